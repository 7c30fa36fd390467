"""Expanding a sweep file into members, and the sweep directory's plan: canonical protocols with
only the varied fields changed, unique names, one-sentence refusals, and a rerun that recognises
its own plan but refuses another sweep file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bundle import layout
from bundle.canonical import dumps
from job.errors import JobError
from job.publishing.signing_keys import generate, load_private_key
from job.sweep_dir import open_sweep_dir
from job.sweep_spec import load_sweep
from tests.sweeps import write_sweep


def test_members_are_the_cross_product_with_only_the_axes_changed(tiny_world: tuple[Path, Path],
                                                                  tmp_path: Path) -> None:
    protocol, lock = tiny_world
    path = write_sweep(tmp_path / "s.json", tiny_world, prefixes=["r0:", "r1:"], threads=2,
                       models=[{"label": "m1"}, {"label": "m2", "lock": str(lock)}])
    doc = json.loads(path.read_text())
    doc["pool_sizes"] = [{"explore": 8, "calibration": 20, "audit": 20}, {"explore": 4, "calibration": 24, "audit": 20}]
    path.write_text(json.dumps(doc))
    sweep = load_sweep(path)
    assert [m.name for m in sweep.members] == [
        "m1-r0-explore8-calibration20-audit20", "m1-r0-explore4-calibration24-audit20",
        "m1-r1-explore8-calibration20-audit20", "m1-r1-explore4-calibration24-audit20",
        "m2-r0-explore8-calibration20-audit20", "m2-r0-explore4-calibration24-audit20",
        "m2-r1-explore8-calibration20-audit20", "m2-r1-explore4-calibration24-audit20"]
    base = json.loads(protocol.read_text())
    for m in sweep.members:
        assert m.protocol == dumps(json.loads(m.protocol))  # canonical
        assert m.protocol_sha256 == hashlib.sha256(m.protocol).hexdigest()
        doc_m = json.loads(m.protocol)
        assert doc_m["inference"]["torch_threads"] == 2 and m.num_cpus == 2 and m.max_retries == 3
        assert doc_m["split"]["prefix"] in {"r0:", "r1:"}
        changed = {k for k in base if base[k] != doc_m[k]}
        assert changed <= {"split", "inference"}
        assert m.pins["source"] == "lock"
        assert Path(m.lock["model"]["files"][0]["local_path"]).is_absolute()  # type: ignore[index]
    # m1 and m2 differ only in where their files come from (the same lock here), not in the protocol
    assert len({m.protocol_sha256 for m in sweep.members}) == 4
    assert load_sweep(path).members == sweep.members  # pure: the same files give the same members


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(pool_sizes=[{"calibration": 5}]), "do not name exactly"),
    (lambda d: d.update(pool_sizes=[{"explore": 8, "calibration": 0, "audit": 40}]),
     r"calibration pool has 0 rows, but it needs at least 1 \(the temperature is fitted on it\)"),
    (lambda d: d.update(pool_sizes=[{"explore": 8, "calibration": 40, "audit": 0}]), "audit pool has 0 rows"),
    (lambda d: d.update(prefixes=["a:", "a/"]), "both named 'a'"),
    (lambda d: (d.pop("lock"), d.update(models=[{"label": "x", "lock": "LOCK"}, {"label": "y"}])),
     "give every member a lock"),
    (lambda d: d["member"].update(threads=0), "sweep.schema.json"),
])
def test_a_sweep_that_cannot_be_planned_is_refused_in_one_sentence(edit, message: str,  # type: ignore[no-untyped-def]
                                                                   tiny_world: tuple[Path, Path],
                                                                   tmp_path: Path) -> None:
    path = write_sweep(tmp_path / "s.json", tiny_world, prefixes=["a:"])
    doc = json.loads(path.read_text())
    edit(doc)
    text = json.dumps(doc).replace('"LOCK"', json.dumps(str(tiny_world[1])))
    path.write_text(text)
    with pytest.raises(JobError, match=message) as info:
        load_sweep(path)
    assert "\n" not in str(info.value)


def test_a_rerun_recognises_its_plan_and_refuses_another_sweep(tiny_world: tuple[Path, Path], tmp_path: Path) -> None:
    generate(tmp_path / "k")
    key = load_private_key(tmp_path / "k" / "signing-key.pem")
    out = tmp_path / "out"
    out.mkdir()
    first = load_sweep(write_sweep(tmp_path / "s.json", tiny_world, prefixes=["a:", "b:"]))
    digest = open_sweep_dir(out, first, key)
    plan = (out / layout.SWEEP_PLAN).read_bytes()
    assert open_sweep_dir(out, first, key) == digest and (out / layout.SWEEP_PLAN).read_bytes() == plan
    (out / layout.SWEEP_PLAN).unlink()  # stopped after sweep.json, before the plan: the rerun signs the same plan
    assert open_sweep_dir(out, first, key) == digest and (out / layout.SWEEP_PLAN).read_bytes() == plan
    other = load_sweep(write_sweep(tmp_path / "t.json", tiny_world, prefixes=["a:", "c:"]))
    with pytest.raises(JobError, match="holds a different sweep file"):
        open_sweep_dir(out, other, key)
    generate(tmp_path / "k2")
    with pytest.raises(JobError, match="holds a plan that"):
        open_sweep_dir(out, first, load_private_key(tmp_path / "k2" / "signing-key.pem"))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(JobError, match="is not a sweep directory"):
        open_sweep_dir(tmp_path / "busy", first, key)


def test_each_reproduced_member_says_its_level() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from job.publishing.sweep_statements import signed_record
    from job.sweep_reproduce import ReproduceOutcome, member_verdict

    key = Ed25519PrivateKey.generate()

    def outcome(verdict: str) -> ReproduceOutcome:
        predicate = {"verdict": verdict, "tolerance": {"abs": 1e-4, "source": "protocol"},
                     "largest_difference": {"abs": 3.1e-8, "ulps": 2}}
        envelope, _ = signed_record({"predicate": predicate}, key)
        return ReproduceOutcome("m", envelope, verdict != "mismatch", None)

    assert member_verdict(outcome("bit-identical")) == ("bit-identical", "")
    assert member_verdict(outcome("equivalent")) == (
        "equivalent", "  (every logit within 1e-4, largest 3.1e-8, 2 ulps)")
    assert member_verdict(outcome("mismatch")) == ("MISMATCH", "")
    no_attestation = ReproduceOutcome("m", None, False, "The lock is wrong.")
    assert member_verdict(no_attestation) == ("failed", ": The lock is wrong.")


@pytest.mark.parametrize(("pools", "ok", "said"), [
    ("explore:0,calibration:20,audit:rest", True, ""),
    ("explore:8,calibration:0,audit:rest", False, "calibration pool has 0 rows, but it needs at least 1"),
    ("explore:8,calibration:40,audit:rest", False, "audit pool has 0 rows, but it needs at least 1"),
])
def test_init_sweeps_and_protocols_share_one_pool_rule(pools: str, ok: bool, said: str,
                                                       tiny_world: tuple[Path, Path], tmp_path: Path) -> None:
    """An empty explore pool is fine everywhere; an empty calibration or audit pool is refused
    everywhere, naming the pool and why: by init --pools, by a sweep's pool_sizes, by a protocol."""
    from job.protocol import SplitSpec
    from job.protocol_init import parse_pools

    rows = 48
    if not ok:
        with pytest.raises(JobError, match=said):
            parse_pools(pools, rows)
    sizes = {p.split(":")[0]: p.split(":")[1] for p in pools.split(",")}
    fixed = sum(int(v) for v in sizes.values() if v != "rest")
    cut = {k: (rows - fixed if v == "rest" else int(v)) for k, v in sizes.items()}
    section = {"prefix": "p:", "pools": [{"name": k, "size": v} for k, v in cut.items()],
               "smoke": {"pool": "calibration", "rows": 0}}
    path = write_sweep(tmp_path / "s.json", tiny_world, prefixes=["a:"])
    doc = json.loads(path.read_text())
    doc["pool_sizes"] = [cut]
    path.write_text(json.dumps(doc))
    if ok:
        assert [p["size"] for p in parse_pools(pools, rows)] == list(cut.values())
        assert SplitSpec.from_protocol(section).pools == tuple(cut.items())
        assert load_sweep(path).members[0].name == "a-explore0-calibration20-audit28"
        return
    with pytest.raises(JobError, match=said):
        SplitSpec.from_protocol(section)
    with pytest.raises(JobError, match=said) as info:
        load_sweep(path)
    assert "\n" not in str(info.value) and str(info.value).startswith("The sweep's pool sizes explore8-")
