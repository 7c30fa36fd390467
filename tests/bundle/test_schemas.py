"""Every schema: Draft 2020-12, the right $id, closed objects; accepts a good example, rejects extras."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout
from bundle.dsse import Envelope
from bundle.errors import BundleError, SchemaViolation
from bundle.schemas import (
    SCHEMA_DIR,
    SCHEMA_NAMES,
    schema_id,
    schema_sha256,
    validate,
)
from job.publishing.statement import build_statement, schemas_map
from tests.payload import predicate_from_payload
from tests.synthetic import REPO, write_payload

PROTOCOL_BYTES = (REPO / "provenance.json").read_bytes()
HEX = "ab" * 32


def load_schema(name: str) -> dict[str, Any]:
    """The schema file `name`, parsed."""
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_bytes())  # type: ignore[no-any-return]


def is_valid(doc: Any, name: str) -> bool:
    """Whether the writer's validation accepts `doc` as schema `name`."""
    try:
        validate(doc, name)
    except SchemaViolation:
        return False
    return True


def _lock() -> dict[str, Any]:
    lock: dict[str, Any] = copy.deepcopy(json.loads(PROTOCOL_BYTES)["resources"])
    for part in ("model", "dataset"):
        for entry in lock[part]["files"]:
            entry["local_path"] = f"../fixtures/{entry['path']}"
    return lock


def _predicate(tmp: Path) -> dict[str, Any]:
    predicate = predicate_from_payload(tmp)
    predicate["schemas"] = schemas_map(list(layout.PAYLOAD_SCHEMAS))
    predicate["signer_fingerprint"] = HEX
    return predicate


def _reproduction() -> dict[str, Any]:
    """A sampled reproduction statement, through the attestation writer's own checks."""
    from job.publishing.attestation import build_reproduction_statement

    predicate = {
        "verdict": "reproduced", "mode": "sample", "protocol_sha256": HEX,
        "resources": {"model": [{"path": "model.safetensors", "sha256": HEX}],
                      "dataset": [{"path": "data/validation-00000-of-00001.parquet", "sha256": HEX}]},
        "rows": {"compared": 3, "identical": 3, "pools": {"calibration": {"count": 1, "idx": [17]},
                                                          "audit": {"count": 2, "idx": [4, 811]}}},
        "largest_difference": {"ulps": 0, "abs": 0.0}, "first_differences": [],
        "sample": {"n": 3, "seed": 7, "generator": "numpy.random.PCG64.random_raw",
                   "batches": {"calibration": [3], "audit": [0, 12]}},
        "environment": {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.24.0", "numpy": "2.4.6",
                        "cpu_model": "x86_64", "threads": 4, "image": None, "git_commit": None},
        "reproducer_fingerprint": HEX,
    }
    return build_reproduction_statement(HEX, {layout.PREDICTIONS[p]: HEX for p in ("calibration", "audit")},
                                        predicate)


def _sweep_examples() -> dict[str, Any]:
    """A sweep file, and a plan and an index predicate through the writer's own checks."""
    from job.publishing.sweep_statements import index_statement, plan_statement

    pins = {"repo_id": "r", "revision": "v", "files": [{"path": "model.safetensors", "sha256": HEX}]}
    plan = plan_statement("tiny", HEX, [{"name": "a", "protocol_sha256": HEX, "resources": {
        "num_cpus": 1, "max_retries": 3, "source": "lock", "model": pins, "dataset": pins}}])
    metric = {"raw": 0.5, "calibrated": 0.4, "difference": {"point": -0.1, "lower": -0.2, "upper": 0.0}}
    index = index_statement(HEX, [
        {"name": "a", "status": "done", "statement_sha256": HEX, "summary": {
            "temperature": 1.5, "boundary": False, "n": 360, "interval_level": 0.95,
            "metrics": {"nll": metric, "ece": metric, "brier": metric}}},
        {"name": "b", "status": "failed", "error": "The lock does not match."}])
    sweep = {"name": "tiny", "protocol": "provenance.json", "lock": "lock.json",
             "models": [{"label": "m", "lock": "lock.json"}], "prefixes": ["a:"],
             "pool_sizes": [{"calibration": 8}], "member": {"threads": 1, "max_retries": 2}}
    return {"sweep": sweep, "sweep-plan": plan["predicate"], "sweep-index": index["predicate"]}


def _vsa() -> dict[str, Any]:
    from verify import vsa
    from verify.result import Check

    checks = [Check("signature.signer-trusted", "signer is the trusted key", "pass", "signed"),
              Check("reproduction.1.signed", "attestation 1 signed", "pass", "by the trusted reproducer"),
              Check("reproduction.1.reproduced", "attestation 1 reproduced", "pass", "bit-identical: 20 rows")]
    return vsa.summary(vsa.Subject(layout.SIGNED_STATEMENT_SUBJECT, HEX), resource="out/run", protocol_sha256=HEX,
                       inputs={layout.PROVENANCE: HEX, "reproduction.intoto.json": HEX}, checks=checks,
                       exit_code=0, verifier_version="2.0.0", time_verified="2026-01-01T00:00:00Z")


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    bag = tmp_path_factory.mktemp("payload")
    write_payload(bag / "data", protocol=PROTOCOL_BYTES)
    docs = {path: json.loads((bag / path).read_bytes())
            for path in layout.PAYLOAD_SCHEMAS if path != layout.PROTOCOL_JSON}
    predicate = _predicate(bag)
    statement = build_statement({"data/protocol.json": HEX}, predicate)
    envelope = Envelope(b"{}", layout.PAYLOAD_TYPE).sign(Ed25519PrivateKey.generate()).to_dict()
    return {
        "protocol": json.loads(PROTOCOL_BYTES),
        "resource-lock": _lock(),
        **{layout.PAYLOAD_SCHEMAS[path]: doc for path, doc in docs.items()},
        "predicate": predicate,
        "statement": statement,
        "envelope": envelope,
        "reproduction": _reproduction(),
        **_sweep_examples(),
        "vsa": _vsa(),
    }


def test_every_schema_has_an_example(good: dict[str, Any]) -> None:
    assert sorted(good) == sorted(SCHEMA_NAMES)
    assert sorted(p.name for p in SCHEMA_DIR.glob("*.schema.json")) == sorted(
        f"{n}.schema.json" for n in SCHEMA_NAMES
    )


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schema_header(name: str) -> None:
    schema = load_schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == schema_id(name) == f"https://calibration-runs.example/schemas/{name}/v1"
    assert schema["additionalProperties"] is False
    assert (
        schema_sha256(name)
        == hashlib.sha256((SCHEMA_DIR / f"{name}.schema.json").read_bytes()).hexdigest()
    )


def _objects(node: Any, where: str = "$") -> list[tuple[str, dict[str, Any]]]:
    found = []
    if isinstance(node, dict):
        if "properties" in node:
            found.append((where, node))
        for key, value in node.items():
            found += _objects(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _objects(value, f"{where}[{i}]")
    return found


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_object_with_properties_is_closed(name: str) -> None:
    for where, node in _objects(load_schema(name)):
        assert node.get("additionalProperties") is False, f"{name} {where}"


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_good_example_validates(name: str, good: dict[str, Any]) -> None:
    validate(good[name], name)
    assert is_valid(good[name], name)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_extra_top_level_property_rejected(name: str, good: dict[str, Any]) -> None:
    doc = copy.deepcopy(good[name])
    doc["unexpected"] = 1
    with pytest.raises(SchemaViolation, match=r"'unexpected' was unexpected"):
        validate(doc, name, source=f"the {name} file")


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("protocol", ["resources", "model", "files", 0]),
        ("resources", ["model", "files", 0]),
        ("resource-lock", ["dataset"]),
        ("pools", ["pools", "audit", 0]),
        ("trajectory", ["steps", 0]),
        ("metrics", ["pools", "audit", "raw", "bins", 3]),
        ("stages", ["stages", 0]),
        ("environment", ["stage_times", 0]),
        ("bootstrap", ["differences", "nll"]),
        ("stability", ["sizes", 0]),
        ("predicate", ["audit", "raw"]),
        ("statement", ["subject", 0, "digest"]),
        ("envelope", ["signatures", 0]),
        ("reproduction", ["predicate", "rows", "pools", "audit"]),
        ("sweep", ["member"]),
        ("sweep-plan", ["members", 0, "resources", "model"]),
        ("sweep-index", ["members", 0, "summary", "metrics", "ece"]),
    ],
)
def test_extra_nested_property_rejected(name: str, path: list[Any], good: dict[str, Any]) -> None:
    doc = copy.deepcopy(good[name])
    node = doc
    for part in path:
        node = node[part]
    node["extra"] = True
    with pytest.raises(SchemaViolation, match="'extra' was unexpected"):
        validate(doc, name)


def test_repository_protocol_validates() -> None:
    doc = json.loads(PROTOCOL_BYTES)
    validate(doc, "protocol", source="provenance.json")
    safetensors = [
        f for f in doc["resources"]["model"]["files"] if f["path"] == "model.safetensors"
    ]
    assert safetensors[0]["sha256"] is None  # unpinned by hash, allowed


def test_violation_message_names_file_field_and_problem(good: dict[str, Any]) -> None:
    doc = copy.deepcopy(good["temperature"])
    doc["predictions_sha256"] = "ABC"
    with pytest.raises(SchemaViolation) as info:
        validate(doc, "temperature", source="data/temperature.json")
    message = str(info.value)
    assert "data/temperature.json" in message and "$.predictions_sha256" in message
    assert "does not match" in message and message.count("\n") == 0


@pytest.mark.parametrize("bad", ["ab" * 32 + "\n", "AB" * 32, "ab" * 31])
def test_sha256_hex_is_exact(bad: str, good: dict[str, Any]) -> None:
    doc = copy.deepcopy(good["pools"])
    doc["dataset_sha256"] = bad
    assert not is_valid(doc, "pools")


@pytest.mark.parametrize("key", ["../x.json", "/etc/passwd", "a//b", "a\nb"])
def test_stage_paths_must_be_relative(key: str, good: dict[str, Any]) -> None:
    doc = copy.deepcopy(good["stages"])
    doc["stages"][0]["consumed"][key] = HEX
    assert not is_valid(doc, "stages")


def test_nullable_and_enum_fields(good: dict[str, Any]) -> None:
    temperature = copy.deepcopy(good["temperature"])
    temperature.update(boundary=True, boundary_side="t_max")
    validate(temperature, "temperature")
    temperature["boundary_side"] = "middle"
    assert not is_valid(temperature, "temperature")
    metrics = copy.deepcopy(good["metrics"])
    metrics["pools"]["audit"]["role"] = "fit pool, not evidence"
    assert not is_valid(metrics, "metrics")
    environment = copy.deepcopy(good["environment"])
    environment["stage_times"][0]["start"] = "2024-05-07 00:00:00"
    assert not is_valid(environment, "environment")


def test_unknown_schema_name() -> None:
    with pytest.raises(BundleError, match="Unknown schema 'bench'"):
        validate({}, "bench")


CHECK_JSONSCHEMA = Path(sys.executable).with_name("check-jsonschema")
DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: any download through it fails at once


def _bundle_documents(bundle: Path, lock: Path, out: Path) -> dict[str, Path]:
    """Schema name -> a document of that kind from a real bundle (the statement decoded from the
    envelope), the resource lock the bundle was run with, and the statement of a real (sampled)
    reproduction of the bundle."""
    docs = {name: bundle / path for path, name in layout.PAYLOAD_SCHEMAS.items()}
    envelope = bundle / layout.PROVENANCE
    docs["envelope"] = envelope
    payload = Envelope.from_json(envelope.read_bytes()).payload
    statement = json.loads(payload)
    docs["statement"] = out / "statement.json"
    docs["statement"].write_bytes(payload)
    docs["predicate"] = out / "predicate.json"
    docs["predicate"].write_text(json.dumps(statement["predicate"]))
    docs["resource-lock"] = lock
    from job.cli import main
    from job.publishing.signing_keys import generate

    generate(out / "reproducer")
    attestation = out / "reproduction.intoto.json"
    assert main(["reproduce", str(bundle), "--out", str(attestation), "--resources", str(lock), "--no-progress",
                 "--signing-key", str(out / "reproducer" / "signing-key.pem"), "--sample", "4", "--seed", "1"]) == 0
    docs["reproduction"] = out / "reproduction.json"
    docs["reproduction"].write_bytes(Envelope.from_json(attestation.read_bytes()).payload)
    from verify.__main__ import main as verify_main

    summary = out / "vsa.intoto.json"
    assert verify_main([str(bundle), "--trusted-key", str(bundle / layout.SIGNER_PUB),
                        "--reproduction", str(attestation),
                        "--trusted-reproducer", str(out / "reproducer" / "signing-key.pub.pem"),
                        "--attest", str(out / "reproducer" / "signing-key.pem"), "--out", str(summary)]) == 0
    docs["vsa"] = out / "vsa.json"
    docs["vsa"].write_bytes(Envelope.from_json(summary.read_bytes()).payload)
    from tests.sweeps import build_sweep_dir, write_sweep

    docs["sweep"] = write_sweep(out / "sweep.json", (bundle / layout.PROTOCOL_JSON, lock), prefixes=["s:"])
    build_sweep_dir(docs["sweep"], out / "sweep", out / "reproducer" / "signing-key.pem")
    for name, record in (("sweep-plan", layout.SWEEP_PLAN), ("sweep-index", layout.SWEEP_INDEX)):
        envelope_doc = json.loads((out / "sweep" / record).read_bytes())
        docs[name] = out / f"{name}.json"
        docs[name].write_text(json.dumps(json.loads(Envelope.from_dict(envelope_doc).payload)["predicate"]))
    return docs


def _check_jsonschema(schema: str, document: Path, home: Path, *, process: bool = False) -> tuple[int, str]:
    """(exit code, output) of check-jsonschema on `document` against our schema, with no cache and
    every proxy dead, so a $ref it would have to download fails instead of reaching the network.
    With `process`, the installed console script in a child; otherwise the same command in this
    process (click's runner, the way click commands are tested), without a second interpreter."""
    offline = {"HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"), "NO_PROXY": "", "no_proxy": "",
               "HTTP_PROXY": DEAD_PROXY, "HTTPS_PROXY": DEAD_PROXY, "ALL_PROXY": DEAD_PROXY}
    args = ["--no-cache", "--schemafile", str(SCHEMA_DIR / f"{schema}.schema.json"), str(document)]
    if process:
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()} | offline
        done = subprocess.run([str(CHECK_JSONSCHEMA), *args], capture_output=True, text=True, env=env, timeout=120,
                              check=False)
        return done.returncode, done.stdout + done.stderr
    from check_jsonschema import main
    from click.testing import CliRunner

    unset: dict[str, str | None] = {k: None for k in os.environ if "proxy" in k.lower()}
    ran = CliRunner().invoke(main, args, env=unset | offline)  # set for the call, then restored
    return ran.exit_code, ran.output


@pytest.fixture(scope="module")
def bundle_documents(tiny_bundle: Path, tiny_world: tuple[Path, Path],
                     tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _bundle_documents(tiny_bundle, tiny_world[1], tmp_path_factory.mktemp("documents"))


def test_bundle_documents_cover_every_schema(bundle_documents: dict[str, Path]) -> None:
    assert sorted(bundle_documents) == sorted(SCHEMA_NAMES)
    assert all(p.is_file() for p in bundle_documents.values())


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_check_jsonschema_validates_a_real_document_offline(
    name: str, bundle_documents: dict[str, Path], tmp_path: Path
) -> None:
    code, output = _check_jsonschema(name, bundle_documents[name], tmp_path)
    assert code == 0, output


def test_check_jsonschema_rejects_a_statement_whose_predicate_breaks_its_schema(
    bundle_documents: dict[str, Path], tmp_path: Path
) -> None:
    statement = json.loads(bundle_documents["statement"].read_bytes())
    statement["predicate"]["resources"]["model"]["files"][0]["pin"] = "trusted"
    bad = tmp_path / "statement.json"
    bad.write_text(json.dumps(statement))
    for process in (False, True):  # in this process as the other documents are checked, and as a user runs it
        code, output = _check_jsonschema("statement", bad, tmp_path, process=process)
        assert code == 1, output
        assert "trusted" in output


def test_statement_embeds_the_predicate_schema_it_refers_to() -> None:
    statement = load_schema("statement")
    assert statement["properties"]["predicate"] == {"$ref": schema_id("predicate")}
    assert statement["$defs"]["predicate"] == load_schema("predicate"), (
        "schemas/statement.schema.json's $defs.predicate must be a copy of schemas/predicate.schema.json"
    )


def test_a_remembered_verdict_is_only_ever_that_of_the_same_values(good: dict[str, Any]) -> None:
    """Both validators remember verdicts per document (bundle/memo.py). `true` equals 1 in Python but
    is no integer in JSON Schema: after the valid document, the equal-comparing one still fails, each
    time naming the file it is given."""
    from verify import schemacheck
    from verify.result import SchemaCheckFailed

    valid = copy.deepcopy(good["bootstrap"])
    valid["seed"] = 1
    boolean = copy.deepcopy(valid)
    boolean["seed"] = True
    assert boolean == valid  # what a cache keyed on equality would confuse
    validate(valid, "bootstrap")
    schemacheck.validate(valid, "bootstrap", "a.json")
    for attempt in range(2):
        with pytest.raises(SchemaViolation, match=r"at \$\.seed, True is not of type 'integer'") as writer:
            validate(boolean, "bootstrap", source=f"file{attempt}.json")
        assert str(writer.value).startswith(f"file{attempt}.json does not follow schema bootstrap/v1")
        with pytest.raises(SchemaCheckFailed, match=r"at \$\['seed'\]: True is not of type 'integer'") as verifier:
            schemacheck.validate(boolean, "bootstrap", f"file{attempt}.json")
        assert str(verifier.value).startswith(f"file{attempt}.json does not follow")
    validate(valid, "bootstrap")
    schemacheck.validate(valid, "bootstrap", "a.json")
