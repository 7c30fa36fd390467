"""Every bad input: one clear sentence, a non-zero exit, and nothing left at --out."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from job.cli import main
from tests.factory import edited_json, make_lock, sha256


def run(protocol: Path, lock: Path, out: Path, key_dir: Path) -> int:
    return main(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(out),
                 "--signing-key", str(key_dir / "signing-key.pem"), "--no-progress"])


def assert_clean_failure(rc: int, capsys, out: Path, *fragments: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    message = err[-1]
    assert message.startswith("error: ")
    for fragment in fragments:
        assert fragment in message, message
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if ".partial" in p.name]


def with_dataset(tmp_path: Path, tiny_world, mutate) -> Path:
    """A lock whose dataset is the tiny one after `mutate(table) -> table`."""
    _, lock = tiny_world
    src = Path(json.loads(lock.read_text())["dataset"]["files"][0]["local_path"])
    path = tmp_path / "bad.parquet"
    pq.write_table(mutate(pq.read_table(src)), path)
    return edited_json(lock, tmp_path / "lock.json", lambda doc: doc["dataset"]["files"][0].update(
        local_path=str(path), size=path.stat().st_size, sha256=sha256(path)))


def test_existing_output_directory_is_refused_and_untouched(tmp_path, tiny_world, signing_key_dir, capsys):
    protocol, lock = tiny_world
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("earlier run")
    rc = run(protocol, lock, out, signing_key_dir)
    assert rc == 2 and "already exists" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_unwritable_output_location(tmp_path, tiny_world, signing_key_dir, capsys):
    protocol, lock = tiny_world
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    rc = run(protocol, lock, blocker / "out", signing_key_dir)
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err and str(blocker) in err


def test_hash_mismatch_in_lock(tmp_path, tiny_world, signing_key_dir, capsys):
    protocol, lock = tiny_world
    bad = edited_json(lock, tmp_path / "lock.json", lambda doc: doc["model"]["files"][0].update(sha256="f" * 64))
    out = tmp_path / "out"
    assert_clean_failure(run(protocol, bad, out, signing_key_dir), capsys, out, "expected " + "f" * 64)


@pytest.mark.parametrize("mutate,fragment", [
    (lambda t: t.rename_columns(["idx", "text", "label"]), "column 'sentence' is missing"),
    (lambda t: t.set_column(0, "idx", pa.array(t.column("idx").to_numpy().astype("int64"))),
     "column 'idx' is int64, expected int32"),
    (lambda t: t.set_column(2, "label", pa.array([5] + t.column("label").to_pylist()[1:], pa.int64())),
     "outside the class indices 0..1 (negative, positive): [5] (idx 0)"),
    (lambda t: t.set_column(0, "idx", pa.array([0] + t.column("idx").to_pylist()[:-1], pa.int32())), "duplicate idx"),
    (lambda t: t.slice(0, t.num_rows - 1), "rows, expected"),
])
def test_dataset_not_as_pinned(tmp_path, tiny_world, signing_key_dir, capsys, mutate, fragment):
    protocol, _ = tiny_world
    lock = with_dataset(tmp_path, tiny_world, mutate)
    out = tmp_path / "out"
    assert_clean_failure(run(protocol, lock, out, signing_key_dir), capsys, out, fragment)


def test_pool_sizes_that_do_not_add_up(tmp_path, tiny_world, signing_key_dir, capsys):
    protocol, lock = tiny_world
    bad = edited_json(protocol, tmp_path / "protocol.json",
                      lambda doc: doc["split"]["pools"][0].update(size=doc["split"]["pools"][0]["size"] - 1))
    out = tmp_path / "out"
    assert_clean_failure(run(bad, lock, out, signing_key_dir), capsys, out, "pool sizes add up to")


def test_non_finite_logits(tmp_path, tiny_world, signing_key_dir, capsys):
    from safetensors.torch import load_file, save_file

    protocol, lock = tiny_world
    doc = json.loads(lock.read_text())
    model_dir = Path(doc["model"]["files"][0]["local_path"]).parent
    broken = tmp_path / "model"
    broken.mkdir()
    for f in model_dir.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    weights = load_file(broken / "model.safetensors")
    weights["classifier.bias"][0] = float("nan")
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    bad = make_lock(tmp_path / "lock.json", broken, Path(doc["dataset"]["files"][0]["local_path"]),
                    doc["dataset"]["rows"], doc["dataset"]["labels"])
    out = tmp_path / "out"
    assert_clean_failure(run(protocol, bad, out, signing_key_dir), capsys, out, "non-finite logits")


def test_missing_signing_key(tmp_path, tiny_world, capsys):
    protocol, lock = tiny_world
    out = tmp_path / "out"
    assert_clean_failure(run(protocol, lock, out, tmp_path / "nokeys"), capsys, out, "signing-key.pem")


def test_a_failed_run_leaves_no_throwaway_key(tmp_path, tiny_world, capsys):
    protocol, lock = tiny_world
    bad = edited_json(lock, tmp_path / "lock.json", lambda doc: doc["model"]["files"][0].update(sha256="e" * 64))
    out = tmp_path / "out"
    rc = main(["run", "--protocol", str(protocol), "--resources", str(bad), "--out", str(out),
               "--ephemeral-key", "--no-progress"])
    assert rc == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock.json"]


def test_ephemeral_key_signs_a_bundle_that_verifies(tmp_path, tiny_world, capsys):
    from verify.api import verify_path
    from verify.context import Trust
    from verify.signature import load_trusted_key

    protocol, lock = tiny_world
    out = tmp_path / "out"
    rc = main(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(out),
               "--ephemeral-key", "--no-progress"])
    assert rc == 0
    assert "--trusted-key" in capsys.readouterr().out
    trusted = load_trusted_key(str(tmp_path / "out.key" / "signing-key.pub.pem"))
    assert verify_path(out, Trust(key=trusted)).exit_code == 0


@pytest.mark.parametrize("content,fragment", [
    (b"{not json", "is not valid JSON"),
    (b'{"protocol_version": 1}', "does not follow schemas/protocol.schema.json"),
])
def test_broken_protocol_is_refused_before_any_work(tmp_path, tiny_world, signing_key_dir, capsys, content, fragment):
    _, lock = tiny_world
    bad = tmp_path / "protocol.json"
    bad.write_bytes(content)
    out = tmp_path / "out"
    assert_clean_failure(run(bad, lock, out, signing_key_dir), capsys, out, fragment, str(bad))


def test_run_without_a_signing_key_is_refused(tmp_path, tiny_world, capsys):
    protocol, lock = tiny_world
    out = tmp_path / "out"
    rc = main(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(out), "--no-progress"])
    assert_clean_failure(rc, capsys, out, "--signing-key", "--ephemeral-key", "unsigned")
    assert not (tmp_path / "out.key").exists()


@pytest.mark.parametrize(("edit", "fragments"), [
    (lambda d: d["fit"].update(t_min=5.0, t_max=2.0), ("t_min must be below t_max",)),
    (lambda d: d["fit"].update(pool="audit"), ("fit.pool",)),
    (lambda d: d["split"]["smoke"].update(rows=999), ("split.smoke.rows",)),
    (lambda d: d["split"].update(pools=[p for p in d["split"]["pools"] if p["name"] != "audit"]),
     ("no audit pool",)),
    (lambda d: d["split"]["pools"].append(dict(d["split"]["pools"][0])), ("repeat",)),
    (lambda d: d["bootstrap"]["interval"].update(quantiles=[0.975, 0.025]), ("quantiles",)),
    (lambda d: d["resources"]["dataset"].update(rows=100_001),
     ("format's limits", "resources.dataset.rows is 100001", "1..100,000")),
    (lambda d: d["bootstrap"].update(resamples=100_001), ("format's limits", "bootstrap.resamples is 100001")),
])
def test_protocol_the_job_cannot_follow(tmp_path, tiny_world, signing_key_dir, capsys, edit, fragments):
    protocol, lock = tiny_world
    bad = edited_json(protocol, tmp_path / "protocol.json", edit)
    out = tmp_path / "out"
    assert_clean_failure(run(bad, lock, out, signing_key_dir), capsys, out, *fragments)


def test_a_frozen_file_that_changes_is_a_job_error(tmp_path):
    from bundle import layout
    from job.artifacts import Artifacts
    from job.errors import JobError

    art = Artifacts(tmp_path / "data")
    art.write_bytes(layout.REPORT_MD, b"first")
    assert art.pick(layout.REPORT_MD) == {"report.md": sha256(tmp_path / "data" / "report.md")}
    (tmp_path / "data" / "report.md").write_bytes(b"second")
    with pytest.raises(JobError, match="changed"):
        art.freeze(layout.REPORT_MD)


def test_an_os_error_is_one_sentence(tmp_path, tiny_world, signing_key_dir, capsys, monkeypatch):
    import job.run

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "x"))

    monkeypatch.setattr(job.run, "execute", disk_full)
    protocol, lock = tiny_world
    out = tmp_path / "out"
    assert_clean_failure(run(protocol, lock, out, signing_key_dir), capsys, out, "No space left on device")
