"""Levels of a reproduction and the honesty of attestations, on the tiny generated fixtures:

- another arithmetic (oneDNN and ATen limited to AVX2, in a child process) is bit-identical or
  equivalent and the verifier accepts it; a signer's edit of three rows' logits stays a mismatch
  under either arithmetic;
- a signer who relabels wrongly predicted rows and lets the job derive and sign everything else is
  a mismatch naming `label`;
- a whole-batch sample catches an edit inside the batches it draws;
- the format-1 golden bundle reproduces here;
- the verifier tells a broken signature from an untrusted key, checks the reproducer it names,
  shows a self-reproduction as not independent, passes `equivalent` unless
  --require-bit-identical, and still reads attestations written before the graded verdict;
- `job cosign` refuses a bundle that does not verify."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from bundle.dsse import Envelope
from bundle.keys import fingerprint
from bundle.views.arithmetic import short_number
from job.batch_kinds import kind_of
from job.cli import main as job_main
from job.logit_compare import grade
from job.predictions import PoolOutput
from job.publishing.attestation import attestation_bytes
from job.publishing.signing_keys import generate, load_private_key
from job.spot_sample import draw_batches
from tests.factory import REPO, make_world
from verify.__main__ import main as verify_main

AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
GOLDEN = REPO / "tests" / "goldens" / "bundle-v1"


def reproduce(bundle: Path, out: Path, key_dir: Path, lock: Path, *extra: str) -> int:
    return job_main(["reproduce", str(bundle), "--out", str(out), "--signing-key",
                     str(key_dir / "signing-key.pem"), "--resources", str(lock), "--no-progress", *extra])


def reproduce_in_child(bundle: Path, out: Path, key_dir: Path, lock: Path, env: dict[str, str]
                       ) -> subprocess.CompletedProcess[str]:
    """`python -m job reproduce` in its own process, so that the ISA limits in `env` take effect."""
    return subprocess.run([sys.executable, "-m", "job", "reproduce", str(bundle), "--out", str(out),
                           "--signing-key", str(key_dir / "signing-key.pem"), "--resources", str(lock),
                           "--no-progress"], cwd=REPO, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=600, check=False)


def verify(bundle: Path, signer_pub: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = verify_main([str(bundle), "--trusted-key", str(signer_pub), *extra])
    return code, capsys.readouterr().out


def predicate(att: Path) -> dict[str, Any]:
    return json.loads(Envelope.from_json(att.read_bytes()).payload)["predicate"]  # type: ignore[no-any-return]


def resigned(att: Path, out: Path, key_dir: Path, edit: Any) -> Path:
    doc = json.loads(Envelope.from_json(att.read_bytes()).payload)
    edit(doc["predicate"])
    out.write_bytes(attestation_bytes(doc, load_private_key(key_dir / "signing-key.pem")))
    return out


def line(out: str, check: str) -> str:
    return next(x for x in out.splitlines() if check in x)


@pytest.fixture
def reproducer(reproducer_keys: Path) -> Path:
    """The session's reproducer key pair (tests/conftest.py)."""
    return reproducer_keys


@pytest.fixture
def full(tiny_reproduction: Path) -> Path:
    """The session's honest full reproduction of the tiny bundle, by `reproducer` (tests/conftest.py)."""
    return tiny_reproduction


def _run_edited(tiny_world: tuple[Path, Path], key_dir: Path, out: Path, monkeypatch_target: str, edit: Any) -> Path:
    """A bundle the job ran, derived and signed with the real key while `edit` changed what
    job.pipeline.<monkeypatch_target> returned."""
    import job.pipeline

    real = getattr(job.pipeline, monkeypatch_target)
    mp = pytest.MonkeyPatch()
    mp.setattr(job.pipeline, monkeypatch_target, edit(real))
    try:
        protocol, lock = tiny_world
        assert job_main(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(out),
                         "--signing-key", str(key_dir / "signing-key.pem"), "--no-progress"]) == 0
    finally:
        mp.undo()
    return out


EDITED = 3  # audit rows whose margin the signer moved


@pytest.fixture(scope="module")
def margins_edited(tiny_world: tuple[Path, Path], signing_key_dir: Path,
                   tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The signer moved the margins of the first 3 audit rows after inference; the job derived,
    sealed and signed everything else with the genuine key."""
    def edit(real: Any) -> Any:
        calls: list[int] = []

        def edited(*args: Any, **kwargs: Any) -> PoolOutput:
            out = real(*args, **kwargs)
            calls.append(1)
            if len(calls) != 2:  # calibration runs first, the audit pool second
                return out
            logits = out.logits.copy()
            logits[:EDITED, 0] += np.float32(0.75)
            return PoolOutput(logits, out.token_count, out.truncated, out.batch, out.full_token_count)
        return edited

    return _run_edited(tiny_world, signing_key_dir, tmp_path_factory.mktemp("edited") / "run", "pool_output", edit)


@pytest.fixture(scope="module")
def relabelled(tiny_world: tuple[Path, Path], signing_key_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The signer relabelled every wrongly predicted audit row to its predicted class; the job
    derived (metrics, studies, report, crate), sealed and signed everything with the genuine key."""
    def edit(real: Any) -> Any:
        def table(rows: Any, pool: Any, out: PoolOutput) -> Any:
            if pool.name == "audit":
                rows = type(rows)(ids=rows.ids, texts=rows.texts, labels=out.logits.argmax(axis=1).astype(np.int64),
                                  text_sha256=rows.text_sha256, pairs=rows.pairs)
            return real(rows, pool, out)
        return table

    return _run_edited(tiny_world, signing_key_dir, tmp_path_factory.mktemp("relabelled") / "run", "_table", edit)


# -- levels across arithmetic -------------------------------------------------------------------

def test_under_avx2_a_bundle_reproduces_and_the_verifier_accepts_it(
        tiny_bundle: Path, tiny_world: tuple[Path, Path], reproducer: Path, signing_key_dir: Path,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    att = tmp_path / "avx2.json"
    done = reproduce_in_child(tiny_bundle, att, reproducer, tiny_world[1], AVX2)
    assert done.returncode == 0, done.stdout + done.stderr
    p = predicate(att)
    assert p["verdict"] in ("bit-identical", "equivalent") and p["rows"]["predictions_changed"] == 0
    mine = p["environment"]["arithmetic"]
    assert mine["aten_capability"] == "AVX2" and mine["env"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert mine["onednn_isa"] is None or "AVX2" in mine["onednn_isa"]
    assert p["largest_difference"]["abs"] <= p["tolerance"]["abs"] and p["figures"]["changed"] == 0
    code, out = verify(tiny_bundle, signing_key_dir / "signing-key.pub.pem", capsys, "--reproduction", str(att),
                       "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 0, out
    assert "ATen AVX2" in line(out, "reproduction.1.reproduced")  # both kinds of arithmetic named


@pytest.mark.parametrize("env", [pytest.param({}, marks=pytest.mark.slow), AVX2], ids=["default-isa", "avx2"])
def test_three_edited_margins_are_a_mismatch_under_any_arithmetic(
        env: dict[str, str], margins_edited: Path, tiny_world: tuple[Path, Path], reproducer: Path,
        signing_key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    att = tmp_path / "att.json"
    done = reproduce_in_child(margins_edited, att, reproducer, tiny_world[1], env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("MISMATCH: ") and f"{EDITED} of 40 rows differ beyond the tolerance" in done.stdout
    p = predicate(att)
    assert p["verdict"] == "mismatch" and p["rows"]["within_tolerance"] == 40 - EDITED
    code, out = verify(margins_edited, signing_key_dir / "signing-key.pub.pem", capsys, "--reproduction", str(att),
                       "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 1 and "FAIL    reproduction.1.reproduced" in out


def test_a_relabelled_bundle_is_a_mismatch_naming_label(
        relabelled: Path, tiny_world: tuple[Path, Path], reproducer: Path, signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out = verify(relabelled, signing_key_dir / "signing-key.pub.pem", capsys)
    assert code == 0, out  # signed by the real key, every figure follows from the stored (false) labels
    table = pq.read_table(relabelled / "data" / "predictions" / "audit.parquet")
    assert table.column("label").to_pylist() == table.column("pred").to_pylist()  # every audit row now "right"
    att = tmp_path / "att.json"
    capsys.readouterr()
    assert reproduce(relabelled, att, reproducer, tiny_world[1]) == 1
    said = capsys.readouterr().out
    assert said.startswith("MISMATCH: ") and "rows' label differ from the pinned data" in said
    p = predicate(att)
    assert p["verdict"] == "mismatch" and p["largest_difference"]["abs"] == 0  # the logits are genuine
    relabelled_rows = p["inputs"]["differing"]["label"]
    assert set(p["inputs"]["differing"]) == {"label"} and relabelled_rows > 0
    assert {d["field"] for d in p["inputs"]["first"]} == {"label"}
    assert {d["pool"] for d in p["inputs"]["first"]} == {"audit"}
    changed = {c["figure"]: c for c in p["figures"]["listed"]}
    accuracy = changed["metrics-audit/accuracy/raw"]
    assert float(accuracy["to"]) < float(accuracy["from"]) == 1.0  # what the true labels give
    code, out = verify(relabelled, signing_key_dir / "signing-key.pub.pem", capsys, "--reproduction", str(att),
                       "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 1 and f"{relabelled_rows} rows' label differ" in line(out, "reproduction.1.reproduced")


def test_a_whole_batch_sample_catches_an_edit_inside_the_batches_it_draws(
        margins_edited: Path, tiny_world: tuple[Path, Path], reproducer: Path, tmp_path: Path) -> None:
    batches = {name: pq.read_table(margins_edited / "data" / "predictions" / f"{name}.parquet")
               .column("batch").to_numpy() for name in ("calibration", "audit")}
    edited_batches = {int(b) for b in batches["audit"][:EDITED]}
    sizes = [(name, np.bincount(b).tolist()) for name, b in batches.items()]
    hit = next(s for s in range(100) if edited_batches & set(draw_batches(sizes, 1, s)["audit"]))
    miss = next(s for s in range(100) if not edited_batches & set(draw_batches(sizes, 1, s)["audit"]))
    caught, missed = tmp_path / "hit.json", tmp_path / "miss.json"
    assert reproduce(margins_edited, caught, reproducer, tiny_world[1], "--sample", "1", "--seed", str(hit)) == 1
    p = predicate(caught)
    assert p["verdict"] == "mismatch" and p["sample"]["draw"] == "batches"
    assert 1 <= len(p["first_differences"]) <= EDITED and p["rows"]["compared"] > 1  # the whole batch ran
    # A sample is a sample: a draw of other batches sees nothing (FORMAT.md gives the odds).
    assert reproduce(margins_edited, missed, reproducer, tiny_world[1], "--sample", "1", "--seed", str(miss)) == 0


def test_the_format_1_golden_bundle_reproduces_on_this_cpu(
        reproducer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, lock = make_world(tmp_path / "world")  # the world the golden was made from
    att = tmp_path / "golden.json"
    code = reproduce(GOLDEN, att, reproducer, lock)
    p = predicate(att)
    assert code == 0, p
    assert p["verdict"] in ("bit-identical", "equivalent") and p["tolerance"]["source"] == "format default"
    assert p["inputs"]["differing"] == {} and p["rows"]["predictions_changed"] == 0
    # Signed on an Intel Xeon, re-run here: a few ulps can carry a figure across a rounding boundary
    # of its sixth decimal, never further; every such figure is listed with both values.
    for changed in p["figures"]["listed"]:
        assert abs(float(changed["to"]) - float(changed["from"])) <= 1.0000001e-6, changed
    code, out = verify(GOLDEN, REPO / "tests" / "goldens" / "bundle-v1.pub.pem", capsys, "--reproduction", str(att),
                       "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 0, out


# -- the verifier's reading of attestations ------------------------------------------------------

def test_a_broken_signature_and_an_untrusted_key_are_told_apart_naming_the_file(
        full: Path, tiny_bundle: Path, reproducer: Path, signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    trusted = ["--trusted-reproducer", str(reproducer / "signing-key.pub.pem")]
    signer_pub = signing_key_dir / "signing-key.pub.pem"
    envelope = json.loads(full.read_bytes())
    doc = json.loads(Envelope.from_dict(envelope).payload)
    doc["predicate"]["rows"]["compared"] = 41
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps({**envelope, "payload": base64.b64encode(json.dumps(doc).encode()).decode()}))
    stranger = tmp_path / "stranger"
    generate(stranger)
    # another key's signature under the trusted reproducer's keyid
    impostor = json.loads(attestation_bytes(json.loads(Envelope.from_dict(envelope).payload),
                                            load_private_key(stranger / "signing-key.pem")))
    impostor["signatures"][0]["keyid"] = envelope["signatures"][0]["keyid"]
    under_keyid = tmp_path / "impostor.json"
    under_keyid.write_text(json.dumps(impostor))
    foreign = resigned(full, tmp_path / "foreign.json", stranger, lambda p: None)
    broken = tmp_path / "broken.json"
    broken.write_text('{"payload": "e30=", "payloadType": "application/vnd.in-toto+json"}')
    for att, words in ((edited, "does not verify under the trusted reproducer key"),
                       (under_keyid, "does not verify under the trusted reproducer key"),
                       (foreign, "is signed by a key that is not a trusted reproducer"),
                       (broken, "expected a DSSE envelope")):
        code, out = verify(tiny_bundle, signer_pub, capsys, "--reproduction", str(att), *trusted)
        said = line(out, "reproduction.1.signed")
        assert code == 1 and said.startswith("FAIL") and words in said and str(att) in said, said
        assert "provenance.intoto.json" not in said


def test_an_attestation_must_name_the_key_that_signed_it(
        full: Path, tiny_bundle: Path, reproducer: Path, signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    other = fingerprint(load_private_key(signing_key_dir / "signing-key.pem"))
    att = resigned(full, tmp_path / "att.json", reproducer, lambda p: p.update(reproducer_fingerprint=other))
    code, out = verify(tiny_bundle, signing_key_dir / "signing-key.pub.pem", capsys, "--reproduction", str(att),
                       "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 1 and "names the reproducer" in line(out, "reproduction.1.signed")


def test_a_reproduction_by_the_bundles_own_signer_is_not_independent(
        tiny_bundle: Path, tiny_world: tuple[Path, Path], signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    att = tmp_path / "self.json"
    assert reproduce(tiny_bundle, att, signing_key_dir, tiny_world[1]) == 0
    pub = signing_key_dir / "signing-key.pub.pem"
    code, out = verify(tiny_bundle, pub, capsys, "--reproduction", str(att), "--trusted-reproducer", str(pub))
    assert code == 0, out
    assert "self-reproduction" in line(out, "reproduction.1.signed")
    assert out.rstrip().endswith("the logits are the signer's word: no independent trusted reproduction was given; "
                                 "a self-reproduction by the bundle's own signer, not counted as independent: "
                                 "bit for bit (full: 40 rows)")


def _equivalent(p: dict[str, Any]) -> None:
    """What a reproducer on another CPU would sign: two rows a few ulps off, within the tolerance."""
    p.update(verdict="equivalent", largest_difference={"ulps": 3, "abs": 2.4e-7},
             first_differences=[{"pool": "audit", "idx": 1, "ulps": 3, "abs": 2.4e-7},
                                {"pool": "audit", "idx": 2, "ulps": 1, "abs": 6e-8}])
    p["rows"].update(identical=p["rows"]["compared"] - 2)
    here = p["environment"]["arithmetic"]["aten_capability"]
    other = "AVX512" if here.upper().startswith("AVX2") else "AVX2"  # another code path than this machine's
    p["environment"]["arithmetic"] = {**p["environment"]["arithmetic"], "aten_capability": other}
    elsewhere = kind_of(p["environment"]["arithmetic"])
    for g in p["batch_kinds"]["groups"]:  # every batch now re-run on that other kind
        g.update(rerun_on=elsewhere, same_kind=False)
    first = next(g for g in p["batch_kinds"]["groups"] if g["pool"] == "audit")  # holds the two rows, say
    first.update(identical=first["rows"] - 2, largest_difference=p["largest_difference"], level="equivalent")


def test_equivalent_passes_and_says_so_unless_bit_identity_is_required(
        full: Path, tiny_bundle: Path, reproducer: Path, signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    att = resigned(full, tmp_path / "equivalent.json", reproducer, _equivalent)
    args = ["--reproduction", str(att), "--trusted-reproducer", str(reproducer / "signing-key.pub.pem")]
    pub = signing_key_dir / "signing-key.pub.pem"
    code, out = verify(tiny_bundle, pub, capsys, *args)
    assert code == 0, out
    assert "equivalent: 40 rows compared" in line(out, "reproduction.1.reproduced")
    assert out.rstrip().endswith("logits reproduced by 1 trusted party: equivalent on another CPU: every logit "
                                 "within 1e-4 (largest 2.4e-7), predictions unchanged, published figures "
                                 "unchanged (full: 40 rows)")
    code, out = verify(tiny_bundle, pub, capsys, *args, "--require-bit-identical")
    assert code == 1 and "--require-bit-identical" in line(out, "reproduction.1.reproduced")
    beyond = resigned(att, tmp_path / "beyond.json", reproducer,
                      lambda p: p["largest_difference"].update(abs=2e-4))  # claims equivalence beyond it
    code, out = verify(tiny_bundle, pub, capsys, "--reproduction", str(beyond), *args[2:])
    assert code == 1 and "do not" in line(out, "reproduction.1.reproduced")


def test_an_attestation_from_before_the_graded_verdict_cannot_vouch_for_a_format_2_bundle(
        full: Path, tiny_bundle: Path, reproducer: Path, signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Its job never re-derived labels, so a label lie would pass it; format-1 bundles, which such
    attestations were written for, still read it (verify.reproduction._consistent)."""
    def earlier(p: dict[str, Any]) -> None:
        for key in ("tolerance", "inputs", "figures", "signer_arithmetic", "batch_kinds"):
            del p[key]
        for key in ("within_tolerance", "predictions_changed"):
            del p["rows"][key]
        del p["environment"]["arithmetic"]
        p["verdict"] = "reproduced"

    att = resigned(full, tmp_path / "v1.json", reproducer, earlier)
    code, out = verify(tiny_bundle, signing_key_dir / "signing-key.pub.pem", capsys, "--reproduction", str(att),
                       "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 1, out
    assert "predates re-deriving each row's label" in line(out, "reproduction.1.reproduced")


def test_grade_names_the_level() -> None:
    assert grade(True, 0.0, 1e-4, 0, False) == "bit-identical"
    assert grade(False, 5e-6, 1e-4, 0, False) == "equivalent"
    assert grade(False, 2e-4, 1e-4, 0, False) == "mismatch"  # beyond the tolerance
    assert grade(False, 1e-6, 1e-4, 1, False) == "mismatch"  # a prediction changed
    assert grade(True, 0.0, 1e-4, 0, True) == "mismatch"  # the logits hold, a label does not
    assert [short_number(x) for x in (1e-4, 5.07e-6, 0.0, 0.75)] == ["1e-4", "5.1e-6", "0", "0.75"]


def test_cosign_refuses_a_bundle_that_does_not_verify(tiny_bundle: Path, reproducer: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from job.cli import main as job_main

    bag = tmp_path / "bag"
    shutil.copytree(tiny_bundle, bag)
    report = bag / "data" / "report.md"
    report.chmod(0o644)
    report.write_text(report.read_text().replace("Audit", "Approved audit", 1))
    before = (bag / "provenance.intoto.json").read_bytes()
    capsys.readouterr()
    assert job_main(["cosign", str(bag), "--signing-key", str(reproducer / "signing-key.pem")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "does not verify" in err and "nothing was co-signed" in err
    assert (bag / "provenance.intoto.json").read_bytes() == before
    # intact, but sealed by a key other than the one the co-signer trusts: refused too
    intact = tmp_path / "intact"
    shutil.copytree(tiny_bundle, intact)
    sealed_by = ["--signing-key", str(reproducer / "signing-key.pem")]
    not_the_signer = ["--trusted-key", str(reproducer / "signing-key.pub.pem")]
    assert job_main(["cosign", str(intact), *sealed_by, *not_the_signer]) == 2
    assert "signature.signer-trusted" in capsys.readouterr().err
    assert job_main(["cosign", str(intact), *sealed_by]) == 0  # intact under the key it carries


def test_a_reproduction_by_a_co_signer_is_not_independent(
        tiny_bundle: Path, tiny_world: tuple[Path, Path], signing_key_dir: Path, reproducer: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A key that co-signed the bundle already vouched for it: its reproduction is a self-reproduction."""
    import shutil

    from job.publishing.cosign import cosign

    bag = tmp_path / "bag"
    shutil.copytree(tiny_bundle, bag)
    cosign(bag, load_private_key(reproducer / "signing-key.pem"))
    att = tmp_path / "cosigner.json"
    assert reproduce(bag, att, reproducer, tiny_world[1]) == 0
    code, out = verify(bag, signing_key_dir / "signing-key.pub.pem", capsys, "--reproduction", str(att),
                       "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 0, out
    assert "self-reproduction" in line(out, "reproduction.1.signed")
    assert "no independent trusted reproduction was given" in out
