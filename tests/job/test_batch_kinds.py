"""A reproduction judged batch by batch against each batch's recorded CPU kind, on the tiny fixtures
and without a cluster: the bundle's environment.json is given a `cluster` record whose workers claim
two CPU kinds (this machine's and an Intel Xeon's) and is re-sealed with the signer's key, as a
mixed-kind sharded run would have written it; it is then reproduced here.

- the attestation groups every re-run batch by (kind signed on, kind re-run on), and the groups add
  up; the verifier accepts them, shows them and says the run was MIXED; the report says so too;
- a signer's edit of one logit inside a batch signed on this machine's kind is a mismatch, and its
  same-kind group is flagged as suspicious while the other group stays bit-identical;
- the verifier refuses groups that misstate the bundle's kinds or the attestation's own numbers;
- a sharded reproduction (two pretend workers of two kinds) lists its workers with the recorded
  batches each re-ran, and the groups follow them."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from numpy.typing import NDArray

from bundle import layout
from bundle.canonical import dumps
from bundle.views.arithmetic import group_words
from job.arithmetic import arithmetic_record
from job.batch_kinds import Side, groups, kind_of
from job.logit_compare import RowComparison
from job.predictions import PoolOutput
from job.publishing.signing_keys import load_private_key
from tests.job.test_reproduce_levels import _run_edited, line, predicate, reproduce, resigned, verify
from tests.verify.tamper import reseal

XEON = {"vendor": "GenuineIntel", "model": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "isa": "AVX512"}


def _here() -> dict[str, str]:
    a = arithmetic_record()
    return {"vendor": a["cpu_vendor"] or "unknown", "model": a["cpu_model"] or "unknown",
            "isa": a["aten_capability"] or "unknown"}


def _kind(cpu: dict[str, str]) -> str:
    return f"{cpu['vendor']} | {cpu['model']} | {cpu['isa']}"


def _batches(bag: Path, pool: str) -> NDArray[np.int64]:
    """Each row's recorded batch, pool order."""
    return np.asarray(pq.read_table(bag / layout.PREDICTIONS[pool], columns=["batch"]).column("batch").to_numpy(),
                      dtype=np.int64)


def mixed(src: Path, dst: Path, key_dir: Path, here: dict[str, list[int]], other: dict[str, str] = XEON) -> Path:
    """A copy of `src` whose environment.json says the batches in `here` (pool -> batches) ran on a
    worker of this machine's kind and every other batch on a worker of kind `other` (an Intel Xeon);
    re-sealed and signed with the signer's key."""
    shutil.copytree(src, dst)
    env_path = dst / layout.ENVIRONMENT_JSON
    env = json.loads(env_path.read_text())

    def worker(i: int, cpu: dict[str, str], batches: dict[str, list[int]]) -> dict[str, Any]:
        return {"id": f"worker-{i}", "hostname": f"node-{i}", "node_id": f"{i:02d}" * 28, "cpu": cpu,
                "cpu_kind": _kind(cpu), "threads": 1, "died": False, "batches": batches}

    pools = {p: sorted({int(b) for b in _batches(src, p)}) for p in layout.REPRODUCTION_POOLS}
    other_cpu = other
    mine = {p: [b for b in pools[p] if b in here.get(p, [])] for p in pools}
    other = {p: [b for b in pools[p] if b not in here.get(p, [])] for p in pools}
    temperature = hashlib.sha256((src / layout.TEMPERATURE_JSON).read_bytes()).hexdigest()
    env["cluster"] = {"engine": "ray", "workers": [worker(0, _here(), mine), worker(1, other_cpu, other)],
                      "audit_temperature_sha256": temperature}
    env_path.write_bytes(dumps(env))
    reseal(dst, load_private_key(key_dir / "signing-key.pem"))
    return dst


@pytest.fixture(scope="module")
def reproducer(reproducer_keys: Path) -> Path:
    """The session's reproducer key pair (tests/conftest.py)."""
    return reproducer_keys


@pytest.fixture(scope="module")
def mixed_bundle(tiny_bundle: Path, signing_key_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Even batches of each pool on this machine's kind, odd ones on the Xeon."""
    pools = {p: [int(b) for b in np.unique(_batches(tiny_bundle, p)) if b % 2 == 0] for p in layout.REPRODUCTION_POOLS}
    return mixed(tiny_bundle, tmp_path_factory.mktemp("mixed") / "run", signing_key_dir, pools)


@pytest.fixture(scope="module")
def mixed_full(mixed_bundle: Path, tiny_world: tuple[Path, Path], reproducer: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("att") / "full.json"
    assert reproduce(mixed_bundle, out, reproducer, tiny_world[1]) == 0
    return out


def test_a_mixed_run_is_grouped_batch_by_batch_and_the_verifier_shows_it(
        mixed_bundle: Path, mixed_full: Path, reproducer: Path, signing_key_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    p = predicate(mixed_full)
    here, xeon = kind_of(arithmetic_record()), _kind(XEON)
    assert p["verdict"] == "bit-identical" and p["batch_kinds"]["workers"] is None  # re-run in this process
    found = p["batch_kinds"]["groups"]
    for pool in layout.REPRODUCTION_POOLS:
        batches = sorted({int(b) for b in _batches(mixed_bundle, pool)})
        mine = [g for g in found if g["pool"] == pool]
        assert [(g["signed_on"], g["rerun_on"], g["same_kind"]) for g in mine] == [(here, here, True),
                                                                                 (xeon, here, False)]
        assert mine[0]["batches"] == batches[0::2] and mine[1]["batches"] == batches[1::2]
        assert sum(g["rows"] for g in mine) == p["rows"]["pools"][pool]["count"]
        assert all(g["level"] == "bit-identical" and g["identical"] == g["rows"] for g in mine)
    code, out = verify(mixed_bundle, signing_key_dir / "signing-key.pub.pem", capsys, "--reproduction",
                       str(mixed_full), "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 0, out
    shown = line(out, "reproduction.1.batch-kinds")
    assert "signed on 2 CPU kinds (MIXED)" in shown and "SUSPICIOUS" not in shown
    assert "re-run on the same kind: bit-identical" in shown
    assert f"signed on {XEON['model']} {XEON['isa']}, re-run on" in shown
    assert "2 CPU kind(s), MIXED" in line(out, "cluster.batch-owners")
    assert "signed on 2 CPU kinds (MIXED; each batch judged" in line(out, "reproduction.1.reproduced")
    assert "MIXED CPU kinds" in (mixed_bundle / layout.REPORT_MD).read_text()


@pytest.fixture(scope="module")
def edited_in_a_same_kind_batch(tiny_world: tuple[Path, Path], signing_key_dir: Path,
                                tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The signer moved one logit of the first audit row after inference (the job derived, sealed
    and signed the rest), and records that row's batch as run on this machine's kind."""
    def edit(real: Any) -> Any:
        calls: list[int] = []

        def edited(*args: Any, **kwargs: Any) -> PoolOutput:
            out = real(*args, **kwargs)
            calls.append(1)
            if len(calls) != 2:  # calibration runs first, the audit pool second
                return out
            logits = out.logits.copy()
            logits[0, 0] += np.float32(0.75)
            return PoolOutput(logits, out.token_count, out.truncated, out.batch, out.full_token_count)
        return edited

    run = _run_edited(tiny_world, signing_key_dir, tmp_path_factory.mktemp("edited") / "run", "pool_output", edit)
    first = int(_batches(run, "audit")[0])
    return mixed(run, tmp_path_factory.mktemp("mixed-edited") / "run", signing_key_dir, {"audit": [first]})


def test_an_edit_inside_a_same_kind_batch_is_a_mismatch_and_its_group_is_flagged(
        edited_in_a_same_kind_batch: Path, tiny_world: tuple[Path, Path], reproducer: Path, signing_key_dir: Path,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    att = tmp_path / "att.json"
    assert reproduce(edited_in_a_same_kind_batch, att, reproducer, tiny_world[1]) == 1
    assert "SUSPICIOUS: not bit-identical on the kind that signed it" in capsys.readouterr().out
    p = predicate(att)
    assert p["verdict"] == "mismatch"
    audit = [g for g in p["batch_kinds"]["groups"] if g["pool"] == "audit"]
    same = next(g for g in audit if g["same_kind"])
    assert same["level"] == "mismatch" and same["rows"] - same["identical"] == 1
    assert same["largest_difference"]["abs"] == pytest.approx(0.75, abs=1e-3)
    assert all(g["level"] == "bit-identical" for g in p["batch_kinds"]["groups"] if g is not same)
    code, out = verify(edited_in_a_same_kind_batch, signing_key_dir / "signing-key.pub.pem", capsys,
                       "--reproduction", str(att), "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 1 and "FAIL    reproduction.1.reproduced" in out
    shown = line(out, "reproduction.1.batch-kinds")
    assert shown.startswith("PASS") and "1 group(s) re-run on the kind that signed them are NOT bit-identical" in shown


def _misstated(p: dict[str, Any], **change: Any) -> None:
    p["batch_kinds"]["groups"][0].update(change)


@pytest.mark.parametrize(("edit", "said"), [
    (lambda p: _misstated(p, signed_on="GenuineIntel | Intel(R) Core(TM) i7 | AVX2"), "environment.json records"),
    (lambda p: _misstated(p, rerun_on=p["batch_kinds"]["groups"][1]["signed_on"]), "its own arithmetic record"),
    (lambda p: _misstated(p, same_kind=False), "their records say True"),
    (lambda p: _misstated(p, rows=p["batch_kinds"]["groups"][0]["rows"] + 1), "but its batches hold"),
    (lambda p: p["batch_kinds"]["groups"].pop(), "do not hold exactly"),
    (lambda p: _misstated(p, identical=0, level="equivalent"), "do not add up"),
    (lambda p: _misstated(p, level="equivalent"), "its own numbers give bit-identical"),
], ids=["signer-kind", "reproducer-kind", "same-kind", "rows", "batches", "totals", "level"])
def test_groups_that_misstate_the_records_or_the_numbers_fail(
        edit: Any, said: str, mixed_bundle: Path, mixed_full: Path, reproducer: Path, signing_key_dir: Path,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    att = resigned(mixed_full, tmp_path / "att.json", reproducer, edit)
    code, out = verify(mixed_bundle, signing_key_dir / "signing-key.pub.pem", capsys, "--reproduction", str(att),
                       "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    shown = line(out, "reproduction.1.batch-kinds")
    assert code == 1 and shown.startswith("FAIL") and said in shown, shown


def test_groups_follow_workers_and_flag_only_same_kind_differences() -> None:
    a = {"cpu_vendor": "AuthenticAMD", "cpu_model": "AMD EPYC 9B14", "aten_capability": "AVX512"}
    cluster = {"workers": [{"cpu_kind": "GenuineIntel | Xeon | AVX512", "batches": {"audit": [1]}},
                           {"cpu_kind": kind_of(a), "batches": {"audit": [0, 2]}}]}
    row_batches = np.array([0, 0, 1, 2, 2], dtype=np.int64)
    identical = np.array([True, True, False, True, False])
    abs_diff = np.array([0, 0, 3.1e-8, 0, 2e-7])
    compared = RowComparison(identical, np.array([0, 0, 2, 0, 5]), abs_diff)
    found = groups("audit", row_batches, compared, np.zeros(5, dtype=bool), Side(cluster, None), Side(None, a), 1e-4)
    assert [(g["batches"], g["same_kind"], g["level"], g["identical"]) for g in found] == [
        ([0, 2], True, "equivalent", 3), ([1], False, "equivalent", 0)]
    assert group_words(found[1]) == ("signed on Xeon AVX512, re-run on AMD EPYC 9B14 AVX512: equivalent "
                                     "(1 audit batch, 1 rows, largest 3.1e-8)")
    assert "SUSPICIOUS" in group_words(found[0]) and "SUSPICIOUS" not in group_words(found[1])
    # one process on each side: the same CPU with another oneDNN limit is not the same kind
    limited = {**a, "onednn_isa": "AVX2"}
    [g] = groups("audit", row_batches, compared, np.zeros(5, dtype=bool), Side(None, a), Side(None, limited), 1e-4)
    assert g["signed_on"] == g["rerun_on"] and not g["same_kind"]


class TwoKindWorkers:
    """This process's model behind two pretend workers, as a sharded engine reports them: the
    batches of the plan it is given alternate between a worker of this machine's kind and one that
    claims an Intel Xeon, and each worker lists its batches by their place in that plan."""

    def __init__(self, local: Any) -> None:
        self.local = local
        self.tokenizer, self.pad_id, self.segments = local.tokenizer, local.pad_id, local.segments
        self.torch_info = local.torch_info
        self.ran: list[dict[str, list[int]]] = [{}, {}]

    def run(self, pool: str, tokens: Any, plan: Any, progress: str | None = None,
            temperature_sha256: str | None = None) -> Any:
        for i in range(len(plan)):
            self.ran[i % 2].setdefault(pool, []).append(i)
        return self.local.run(pool, tokens, plan, progress, temperature_sha256)

    def forward_check(self, texts: list[str], keys: list[str]) -> dict[str, Any] | None:
        return None

    def cluster(self) -> dict[str, Any]:
        return {"engine": "ray", "audit_temperature_sha256": None, "workers": [
            {"id": f"worker-{i}", "hostname": f"node-{i}", "node_id": str(i), "cpu": cpu, "cpu_kind": _kind(cpu),
             "threads": 1, "died": False, "batches": self.ran[i]} for i, cpu in enumerate((_here(), XEON))]}


def test_a_sharded_reproduction_records_its_workers_by_recorded_batch(
        mixed_bundle: Path, tiny_world: tuple[Path, Path], reproducer: Path, signing_key_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import contextlib

    import job.engines
    import job.reproduce

    @contextlib.contextmanager
    def two_workers(shard: Any, protocol_raw: bytes, recorded: Any, resources: Any, s: Any) -> Any:
        yield TwoKindWorkers(job.engines.LocalEngine(resources, s))

    monkeypatch.setattr(job.reproduce, "open_engine", two_workers)
    att = tmp_path / "att.json"
    # seed 3 draws calibration batches 0 and 1 and audit batch 1 alone, the first of its plan
    assert reproduce(mixed_bundle, att, reproducer, tiny_world[1], "--sample", "24", "--seed", "3") == 0
    p = predicate(att)
    workers = p["batch_kinds"]["workers"]
    assert [w["cpu_kind"] for w in workers] == [kind_of(arithmetic_record()), _kind(XEON)]
    for pool in layout.REPRODUCTION_POOLS:
        drawn = p["sample"]["batches"][pool]
        by_worker = [w["batches"].get(pool, []) for w in workers]
        assert sorted(b for bs in by_worker for b in bs) == drawn  # recorded batch numbers, each once
        assert by_worker[0] == drawn[0::2] and by_worker[1] == drawn[1::2]
        for g in (g for g in p["batch_kinds"]["groups"] if g["pool"] == pool):
            assert all(b in by_worker[0 if g["rerun_on"] == workers[0]["cpu_kind"] else 1] for b in g["batches"])
    assert any(g["rerun_on"] == _kind(XEON) for g in p["batch_kinds"]["groups"])
    code, out = verify(mixed_bundle, signing_key_dir / "signing-key.pub.pem", capsys, "--reproduction", str(att),
                       "--trusted-reproducer", str(reproducer / "signing-key.pub.pem"))
    assert code == 0, out


NUDGE = 9.9e-5  # below the protocol's tolerance (1e-4): "equivalent" on its own


@pytest.fixture(scope="module")
def nudged(tiny_world: tuple[Path, Path], signing_key_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A single-process run whose signer nudged three audit logits by 9.9e-5 after inference."""
    def edit(real: Any) -> Any:
        calls: list[int] = []

        def edited(*args: Any, **kwargs: Any) -> PoolOutput:
            out = real(*args, **kwargs)
            calls.append(1)
            if len(calls) != 2:
                return out
            logits = out.logits.copy()
            logits[:3, 0] += np.float32(NUDGE)
            return PoolOutput(logits, out.token_count, out.truncated, out.batch, out.full_token_count)
        return edited

    return _run_edited(tiny_world, signing_key_dir, tmp_path_factory.mktemp("nudged") / "run", "pool_output", edit)


def test_an_invented_worker_record_never_removes_the_same_kind_warning(
        nudged: Path, tiny_world: tuple[Path, Path], reproducer: Path, signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The signer adds a `cluster` record to its single-process run: one worker of another kind
    "ran every batch". The reproducer here measures the signer's recorded arithmetic, so the nudge
    is still SUSPICIOUS, in the job's words and the verifier's, and the assurance is not clean."""
    amd = {"vendor": "AuthenticAMD", "model": "AMD EPYC 9B14 96-Core Processor", "isa": "AVX512"}
    elsewhere = amd if _kind(amd) != _kind(_here()) else XEON
    pub, rep = signing_key_dir / "signing-key.pub.pem", reproducer / "signing-key.pub.pem"
    for name, bag in (("plain", nudged), ("claimed", mixed(nudged, tmp_path / "claimed", signing_key_dir, {},
                                                          elsewhere))):
        att = tmp_path / f"{name}.json"
        capsys.readouterr()
        assert reproduce(bag, att, reproducer, tiny_world[1]) == 0
        said = capsys.readouterr().out
        assert said.startswith("equivalent:") and "SUSPICIOUS: not bit-identical" in said, said
        assert predicate(att)["verdict"] == "equivalent"
        code, out = verify(bag, pub, capsys, "--reproduction", str(att), "--trusted-reproducer", str(rep))
        assert code == 0, out
        assert "SUSPICIOUS: not bit-identical" in line(out, "reproduction.1.batch-kinds"), out
        assurance = line(out, "Assurance:")
        assert "NOT bit-identical" in assurance, assurance
        if name == "claimed":
            assert "only the bundle's worker records, the signer's word" in said
            assert "the signer's word that nothing checks" in line(out, "reproduction.1.batch-kinds")
            assert "a claim: nothing checks which machine ran a batch" in line(out, "cluster.batch-owners")
