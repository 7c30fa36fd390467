"""Re-execution: `python -m job reproduce` re-runs a bundle's inference, re-derives every row's inputs
and signs the level it reached (bit-identical, equivalent or mismatch), and `python -m verify
--reproduction` counts an attestation only when a trusted reproducer says this very bundle reproduced
at a passing level. Everything runs on the tiny generated fixtures."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bundle.dsse import Envelope
from job.cli import main as job_main
from job.logit_compare import compare_rows, ulps_apart
from job.predictions import PoolOutput
from job.publishing.attestation import attestation_bytes
from job.publishing.signing_keys import generate, load_private_key
from job.spot_sample import draw_batches, draw_rows
from tests.factory import edited_json
from verify.__main__ import main as verify_main
from verify.reproduction import draw_batches as verifier_draw_batches
from verify.reproduction import draw_rows as verifier_draw_rows


@pytest.fixture
def reproducer(reproducer_keys: Path) -> Path:
    """The session's reproducer key pair (tests/conftest.py)."""
    return reproducer_keys


def reproduce(bundle: Path, out: Path, key_dir: Path, lock: Path, *extra: str) -> int:
    return job_main(["reproduce", str(bundle), "--out", str(out), "--signing-key",
                     str(key_dir / "signing-key.pem"), "--resources", str(lock), "--no-progress", *extra])


def verify(bundle: Path, signer: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = verify_main([str(bundle), "--trusted-key", str(signer / "signing-key.pub.pem"), *extra])
    return code, capsys.readouterr().out


def statement(att: Path) -> dict[str, Any]:
    return json.loads(Envelope.from_json(att.read_bytes()).payload)  # type: ignore[no-any-return]


def resign(att: Path, out: Path, key_dir: Path, edit: Any) -> Path:
    """A copy of the attestation whose statement `edit` changed, signed again with the key in key_dir."""
    doc = statement(att)
    edit(doc)
    out.write_bytes(attestation_bytes(doc, load_private_key(key_dir / "signing-key.pem")))
    return out


@pytest.fixture
def full(tiny_reproduction: Path) -> Path:
    """The session's honest full reproduction of the tiny bundle, by `reproducer` (tests/conftest.py)."""
    return tiny_reproduction


@pytest.fixture(scope="module")
def altered(tiny_world: tuple[Path, Path], signing_key_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle whose signer altered three audit rows' logits and let the job regenerate everything
    downstream (metrics, studies, report, crate) and sign it with the real key."""
    import job.pipeline

    real = job.pipeline.pool_output
    calls: list[int] = []

    def edited(*args: Any, **kwargs: Any) -> PoolOutput:
        out = real(*args, **kwargs)
        calls.append(len(out.logits))
        if len(calls) != 2:  # the calibration pool runs first, the audit pool second
            return out
        logits = out.logits.copy()
        logits[:3, 0] += np.float32(0.75)
        return dataclasses.replace(out, logits=logits)

    protocol, lock = tiny_world
    bag = tmp_path_factory.mktemp("altered") / "run"
    mp = pytest.MonkeyPatch()
    mp.setattr(job.pipeline, "pool_output", edited)
    try:
        assert job_main(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(bag),
                         "--signing-key", str(signing_key_dir / "signing-key.pem"), "--no-progress"]) == 0
    finally:
        mp.undo()
    assert calls == [20, 20]
    return bag


def test_a_genuine_bundle_reproduces_in_full_and_the_verifier_counts_it(
        full: Path, tiny_bundle: Path, signing_key_dir: Path, reproducer: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = statement(full)
    p = doc["predicate"]
    assert (p["verdict"], p["mode"], p["rows"]["compared"], p["rows"]["identical"]) == ("bit-identical", "full", 40, 40)
    assert p["largest_difference"] == {"ulps": 0, "abs": 0.0} and p["sample"] is None
    assert p["rows"]["within_tolerance"] == 40 and p["rows"]["predictions_changed"] == 0
    assert p["tolerance"] == {"abs": 1e-4, "source": "protocol"}  # the repository protocol pre-registers it
    assert p["inputs"] == {"checked": {"idx": 40, "text_sha256": 40, "label": 40, "token_count": 40,
                                       "truncated": 40, "full_token_count": 40}, "differing": {}, "first": []}
    assert p["figures"]["changed"] == 0 and p["figures"]["listed"] == [] and p["figures"]["compared"] > 100
    signer = json.loads((tiny_bundle / "data" / "environment.json").read_bytes())["arithmetic"]
    assert p["signer_arithmetic"] == signer and p["environment"]["arithmetic"]["aten_capability"]
    envelope = json.loads((tiny_bundle / "provenance.intoto.json").read_bytes())
    payload_sha = hashlib.sha256(Envelope.from_dict(envelope).payload).hexdigest()
    assert {s["name"]: s["digest"]["sha256"] for s in doc["subject"]}["provenance.intoto.json#payload"] == payload_sha
    code, out = verify(tiny_bundle, signing_key_dir, capsys, "--reproduction", str(full),
                       "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 0, out
    assert "PASS    reproduction.1.reproduced" in out and "bit-identical: 40 rows compared (full: every row)" in out
    assert "signed on " in out and ", reproduced on " in out and "published figures unchanged" in out
    assert ("Assurance: signed by a trusted key and intact; every figure recomputed from the logits; reproduction "
            "tolerance 0.0001 per logit (the protocol's, equal to the format default): an equivalent reproduction can "
            "move audit calibrated NLL by ") in out
    assert out.rstrip().endswith("; logits reproduced bit for bit by 1 trusted party (full: 40 rows)")


def test_a_sampled_reproduction_of_the_archive_runs_only_the_batches_holding_its_rows(
        tiny_bundle: Path, tiny_world: tuple[Path, Path], reproducer: Path, signing_key_dir: Path,
        full: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from job.publishing.archive import archive

    tar = archive(tiny_bundle, tmp_path / "bundle.tar.gz")
    before = hashlib.sha256(tar.read_bytes()).hexdigest()
    att = tmp_path / "sample.json"
    assert reproduce(tar, att, reproducer, tiny_world[1], "--sample", "3", "--seed", "11") == 0
    assert hashlib.sha256(tar.read_bytes()).hexdigest() == before  # only read
    p = statement(att)["predicate"]
    assert p["mode"] == "sample" and p["sample"]["seed"] == 11 and p["sample"]["draw"] == "batches"
    ran = p["sample"]["batches"]
    assert sum(len(b) for b in ran.values()) == 1  # one whole batch (4 or 16 rows) holds 3 rows
    assert p["rows"]["compared"] in (4, 16) and p["verdict"] == "bit-identical" and p["figures"] is None
    code, out = verify(tar, signing_key_dir, capsys, "--reproduction", str(full), "--reproduction", str(att),
                       "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 0, out
    assert f"by 1 trusted party (full: 40 rows; sampled: {p['rows']['compared']} rows)" in out


def test_a_signer_who_altered_logits_passes_verification_but_not_reproduction(
        altered: Path, tiny_world: tuple[Path, Path], reproducer: Path, signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out = verify(altered, signing_key_dir, capsys)
    assert code == 0, out  # signed by the real key, every figure follows from the (altered) logits
    assert "the logits are the signer's word: no trusted reproduction was given" in out
    att = tmp_path / "honest.json"
    capsys.readouterr()
    assert reproduce(altered, att, reproducer, tiny_world[1]) == 1
    said = capsys.readouterr().out
    assert said.startswith("MISMATCH: ") and "3 of 40 rows differ beyond the tolerance 1e-4" in said
    assert "audit idx" in said and "ulps" in said
    p = statement(att)["predicate"]
    assert p["verdict"] == "mismatch" and p["rows"]["identical"] == 37 and p["largest_difference"]["abs"] > 0.7
    assert p["rows"]["within_tolerance"] == 37 and p["inputs"]["differing"] == {}
    assert {d["pool"] for d in p["first_differences"]} == {"audit"} and len(p["first_differences"]) == 3
    # the audit figures the signer published came from the edited logits: the reproducer's differ
    changed = {c["figure"] for c in p["figures"]["listed"]}
    assert p["figures"]["changed"] > 0 and any(f.startswith("metrics-audit/") for f in changed)
    assert not any(f.startswith(("metrics-calibration/", "temperature/")) for f in changed)
    code, out = verify(altered, signing_key_dir, capsys, "--reproduction", str(att),
                       "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 1
    assert "FAIL    reproduction.1.reproduced" in out and "mismatch (full, 40 rows compared" in out
    assert "3 of 40 rows differing" in out and "published figures changed" in out


def test_a_resource_with_another_hash_is_refused_before_any_inference(
        tiny_bundle: Path, tiny_world: tuple[Path, Path], reproducer: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import job.reproduce

    lock = tiny_world[1]
    tok = tmp_path / "tokenizer_config.json"
    original = json.loads(lock.read_text())
    entry = next(f for f in original["model"]["files"] if f["path"] == "tokenizer_config.json")
    tok.write_bytes(Path(entry["local_path"]).read_bytes() + b" ")
    new_sha = hashlib.sha256(tok.read_bytes()).hexdigest()

    def point_at_copy(doc: dict[str, Any]) -> None:
        for f in doc["model"]["files"]:
            if f["path"] == "tokenizer_config.json":
                f.update(local_path=str(tok), size=tok.stat().st_size, sha256=new_sha)

    bad_lock = edited_json(lock, tmp_path / "lock.json", point_at_copy)
    monkeypatch.setattr(job.reproduce, "rerun", lambda *a, **k: pytest.fail("inference ran"))
    att = tmp_path / "att.json"
    capsys.readouterr()
    assert reproduce(tiny_bundle, att, reproducer, bad_lock) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: The model file tokenizer_config.json has sha256 ")
    assert new_sha in err and entry["sha256"] in err
    assert not att.exists() and list(tmp_path.glob(".att.json*")) == []


def test_bad_input_ends_in_one_sentence_and_no_attestation(
        tiny_bundle: Path, tiny_world: tuple[Path, Path], reproducer: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_bundle, broken)
    (broken / "data" / "temperature.json").chmod(0o644)
    (broken / "data" / "temperature.json").write_text("{}\n")
    att = tmp_path / "att.json"
    cases = [
        (broken, [], "fails verification (bag.manifest-sha256"),
        (tiny_bundle, ["--sample", "3"], "--sample and --seed go together"),
        (tiny_bundle, ["--sample", "41", "--seed", "1"], "outside 1..40"),
        (tmp_path / "missing", [], "does not exist"),
    ]
    for bundle, extra, message in cases:
        capsys.readouterr()
        assert reproduce(bundle, att, reproducer, tiny_world[1], *extra) == 2, message
        err = capsys.readouterr().err.strip()
        assert message in err and err.startswith("error: ") and "Traceback" not in err
        assert not att.exists()
    att.write_text("taken")
    assert reproduce(tiny_bundle, att, reproducer, tiny_world[1]) == 2
    assert "never overwritten" in capsys.readouterr().err and att.read_text() == "taken"


def test_an_attestation_counts_only_from_a_trusted_reproducer_about_this_bundle(
        full: Path, tiny_bundle: Path, altered: Path, signing_key_dir: Path, reproducer: Path,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trusted = ["--trusted-reproducer", str(reproducer / "signing-key.pub.pem")]
    stranger = tmp_path / "stranger"
    generate(stranger)
    cases: list[tuple[Path, list[str], str]] = [
        (altered, ["--reproduction", str(full), *trusted], "reproduction.1.subjects"),  # another bundle
        (tiny_bundle, ["--reproduction", str(full), "--trusted-reproducer",
                       str(stranger / "signing-key.pub.pem")], "reproduction.1.signed"),  # untrusted key
        (tiny_bundle, ["--reproduction", str(full)], "reproduction.1.signed"),  # no reproducer trusted
    ]
    for bundle, extra, failing in cases:
        code, out = verify(bundle, signing_key_dir, capsys, *extra)
        assert code == 1 and f"FAIL    {failing}" in out, out
        assert "Assurance: none" in out


def test_a_tampered_predicate_fails(full: Path, tiny_bundle: Path, signing_key_dir: Path, reproducer: Path,
                                    tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trusted = ["--trusted-reproducer", str(reproducer / "signing-key.pub.pem")]
    # the payload edited after signing: the signature no longer holds
    envelope = json.loads(full.read_bytes())
    doc = statement(full)
    doc["predicate"]["rows"]["compared"] = 41
    envelope["payload"] = base64.b64encode(json.dumps(doc).encode()).decode()
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(envelope))
    code, out = verify(tiny_bundle, signing_key_dir, capsys, "--reproduction", str(edited), *trusted)
    assert code == 1 and "FAIL    reproduction.1.signed" in out

    def sample_of_my_choosing(d: dict[str, Any]) -> None:  # re-signed by the trusted key, rows hand-picked
        d["predicate"].update(mode="sample", sample={"n": 2, "seed": 5, "generator": "numpy.random.PCG64.random_raw",
                                                     "batches": {"calibration": [0], "audit": [0]}})
        d["predicate"]["rows"] = {"compared": 2, "identical": 2, "pools": {
            "calibration": {"count": 1, "idx": [d_idx(tiny_bundle, "calibration")]},
            "audit": {"count": 1, "idx": [d_idx(tiny_bundle, "audit")]}}}

    cases = [
        (lambda d: d["predicate"].update(verdict="mismatch"), "reproduction.1.reproduced"),
        (lambda d: d["predicate"].update(verdict="equivalent", tolerance={"abs": 0.5, "source": "protocol"}),
         "reproduction.1.reproduced"),  # a tolerance of its own choosing
        (lambda d: d["predicate"]["rows"].update(predictions_changed=1), "reproduction.1.reproduced"),
        (lambda d: d["predicate"].update(figures=None), "reproduction.1.reproduced"),  # full without figures
        (lambda d: d["predicate"].update(protocol_sha256="ab" * 32), "reproduction.1.subjects"),
        (lambda d: d["predicate"].update(extra=True), "reproduction.1.signed"),  # schema: closed
        (sample_of_my_choosing, "reproduction.1.reproduced"),
        # what equivalent can move, understated
        (lambda d: d["predicate"]["bounds"]["pools"]["audit"]["calibrated"].update(ece=0.0),
         "reproduction.1.reproduced"),
    ]
    for i, (edit, failing) in enumerate(cases):
        att = resign(full, tmp_path / f"att{i}.json", reproducer, edit)
        code, out = verify(tiny_bundle, signing_key_dir, capsys, "--reproduction", str(att), *trusted)
        assert code == 1 and f"FAIL    {failing}" in out, (failing, out)


def d_idx(bundle: Path, pool: str) -> int:
    """The idx of a pool's last row (the seeded draw below never yields exactly that pair)."""
    import pyarrow.parquet as pq

    return int(pq.read_table(bundle / "data" / "predictions" / f"{pool}.parquet").column("idx")[-1].as_py())


@pytest.mark.parametrize("seed", [0, 1, 7, 2**40])
def test_the_job_and_the_verifier_draw_the_same_batches(seed: int) -> None:
    sizes = [("calibration", [16] * 16), ("audit", [16] * 22 + [8])]
    job_draw = draw_batches(sizes, 32, seed)
    assert [job_draw["calibration"], job_draw["audit"]] == verifier_draw_batches([s for _, s in sizes], 32, seed)
    assert sum(len(v) for v in job_draw.values()) == 2  # two batches of 16 hold 32 rows
    assert all(v == sorted(set(v)) for v in job_draw.values())
    small = draw_batches([("calibration", [4, 4]), ("audit", [16])], 5, seed)
    held = sum(4 for _ in small["calibration"]) + 16 * len(small["audit"])
    assert held >= 5 and held - (16 if small["audit"] else 4) < 5  # stops at the first batch reaching n


@pytest.mark.parametrize("seed", [0, 1, 7, 2**40])
def test_the_job_and_the_verifier_draw_the_same_rows_of_earlier_attestations(seed: int) -> None:
    sizes = [("calibration", 256), ("audit", 360)]
    job_draw = draw_rows(sizes, 32, seed)
    assert [job_draw["calibration"], job_draw["audit"]] == verifier_draw_rows([256, 360], 32, seed)
    assert sum(len(v) for v in job_draw.values()) == 32
    assert all(v == sorted(set(v)) for v in job_draw.values())
    assert draw_rows(sizes, 32, seed + 1) != job_draw


def test_ulps_count_the_floats_between_two_values():
    one = np.float32(1.0)
    a = np.array([one, np.float32(0.0), -np.float32(1e-45), one, np.float32(-2.0)], dtype=np.float32)
    b = np.array([np.nextafter(one, np.float32(2)), -np.float32(0.0), np.float32(1e-45), one,
                  np.nextafter(np.float32(-2.0), np.float32(0))], dtype=np.float32)
    assert ulps_apart(a, b).tolist() == [1, 0, 2, 0, 1]


def test_logits_compare_bit_for_bit_and_count_ulps() -> None:
    one = np.float32(1.0)
    up = np.nextafter(one, np.float32(2.0))
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    assert ulps_apart(np.array([one, tiny]), np.array([up, -tiny])).tolist() == [1, 2]
    found = np.array([[one, one], [one, up]], dtype=np.float32)
    recorded = np.array([[one, one], [one, one]], dtype=np.float32)
    result = compare_rows(found, recorded)
    assert result.identical.tolist() == [True, False] and result.ulps.tolist() == [0, 1]
    assert result.abs[1] == float(up) - 1.0
    zero = compare_rows(np.array([[0.0]], dtype=np.float32), np.array([[-0.0]], dtype=np.float32))
    assert not zero.identical[0] and zero.ulps[0] == 0  # equal values, different bits: not identical
