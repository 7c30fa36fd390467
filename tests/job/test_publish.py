"""Atomic output: NAME appears only complete; a failed or killed run leaves nothing at NAME."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import bagit  # type: ignore[import-untyped]
import pytest

from bundle.errors import BundleError, OutputExistsError
from job.publishing.publish import assembling, cleanup_stale_partials, publish, staging_dir
from job.publishing.signing_keys import generate

ROOT = Path(__file__).resolve().parents[2]


def _partials(parent: Path) -> list[Path]:
    return sorted(parent.glob(".*.partial-*"))


def test_staging_is_a_hidden_sibling_named_partial(tmp_path: Path) -> None:
    out = tmp_path / "new" / "run"
    staging = staging_dir(out)
    assert staging.parent == out.parent and staging.is_dir()
    assert staging.name.startswith(f".run.partial-{os.getpid()}-")
    assert not out.exists()


def test_existing_output_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(
        OutputExistsError,
        match=f"Output directory {out} already exists; choose a new --out or remove it.",
    ):
        staging_dir(out)
    with pytest.raises(OutputExistsError), assembling(out):
        pytest.fail("must not be reached")
    assert _partials(tmp_path) == []


def test_publish_never_replaces_even_an_empty_directory(tmp_path: Path) -> None:
    out = tmp_path / "run"
    staging = staging_dir(out)
    (staging / "x").write_text("x")
    out.mkdir()
    with pytest.raises(OutputExistsError):
        publish(staging, out)
    assert list(out.iterdir()) == [] and (staging / "x").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_parent_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "ro"
    parent.mkdir(mode=0o555)
    with pytest.raises(BundleError, match="not writable"):
        staging_dir(parent / "run")


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt(), SystemExit(1)])
def test_failure_inside_removes_staging(tmp_path: Path, exc: BaseException) -> None:
    out = tmp_path / "run"
    with pytest.raises(type(exc)), assembling(out) as staging:
        (staging / "data").mkdir()
        (staging / "data" / "f").write_text("half")
        raise exc
    assert not out.exists() and _partials(tmp_path) == []


def test_success_publishes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    previous = signal.getsignal(signal.SIGTERM)
    with assembling(out) as staging:
        assert signal.getsignal(signal.SIGTERM) is not previous
        (staging / "f").write_text("done")
    assert (out / "f").read_text() == "done" and _partials(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) is previous


def test_cleanup_removes_only_partials_of_dead_processes(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = tmp_path / f".run.partial-{child.stdout.strip()}-abcd"
    alive = tmp_path / f".run.partial-{os.getpid()}-abcd"
    unrelated = tmp_path / ".run.partially-1-abcd"
    for path in (dead, alive, unrelated):
        path.mkdir()
    assert cleanup_stale_partials(tmp_path) == [dead]
    assert alive.exists() and unrelated.exists() and not dead.exists()


CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from job.publishing import ledger, publish
    from job.publishing import seal as bag
    from tests.payload import seal_payload
    from tests.synthetic import write_payload
    from job.publishing.signing_keys import load_private_key

    out, pause, key_path = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    key = load_private_key(key_path)

    def point(name):
        if name == pause:
            print("PAUSED", flush=True)
            time.sleep(60)

    real_of, calls = ledger.Written.of, []
    def slow_of(data):
        calls.append(data)
        if len(calls) == 3:
            point("digests")
        return real_of(data)
    ledger.Written.of = slow_of

    real_write = bag._write
    def write(where, name, data):
        real_write(where, name, data)
        point("wrote " + name)
    bag._write = write

    real_rename = publish.rename_noreplace
    def rename(src, dst):
        point("rename")
        real_rename(src, dst)
    publish.rename_noreplace = rename

    point("start")
    with publish.assembling(out) as staging:
        point("staging")
        protocol_sha256 = write_payload(staging / "data", profile="formal")
        point("payload")
        seal_payload(staging, description="kill test", protocol_sha256=protocol_sha256,
                     profile="formal", private_key=key)
        point("sealed")
    point("published")
    print("DONE", flush=True)
""")

POINTS = [
    "start",
    "staging",
    "payload",
    "digests",
    "wrote bag-info.txt",
    "wrote provenance.intoto.json",
    "wrote tagmanifest-sha256.txt",
    "sealed",
    "rename",
    "published",
]
EDGES = ("start", "payload", "sealed", "published")
"""The kill points make test covers: before anything, mid-payload, sealed but unpublished, and
after; every other point (a process start each, about 1.3 s) is a slow test."""
KILL_POINTS = [p if p in EDGES else pytest.param(p, marks=pytest.mark.slow) for p in POINTS]


@pytest.fixture(scope="module")
def child_setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    where = tmp_path_factory.mktemp("child")
    (where / "child.py").write_text(CHILD)
    generate(where / "key")
    return where / "child.py", where / "key" / "signing-key.pem"


def _run_and_kill(script: Path, key: Path, out: Path, point: str, signum: int) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(out), point, str(key)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line == "PAUSED\n", (line, proc.stderr.read() if proc.stderr else "")
    proc.send_signal(signum)
    try:
        return proc.wait(timeout=20)
    finally:
        proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


def _complete_or_absent(out: Path) -> bool:
    if not os.path.lexists(out):
        return False
    bagit.Bag(str(out)).validate()
    assert (out / "tagmanifest-sha256.txt").exists()
    return True


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_leaves_nothing_incomplete_at_out(
    tmp_path: Path, child_setup: tuple[Path, Path], point: str
) -> None:
    script, key = child_setup
    out = tmp_path / "run"
    code = _run_and_kill(script, key, out, point, signal.SIGKILL)
    assert code == -signal.SIGKILL
    published = _complete_or_absent(out)
    assert published == (point == "published")
    for partial in _partials(tmp_path):  # only the clearly named kind may be left
        assert partial.name.startswith(".run.partial-")
    cleanup_stale_partials(tmp_path)
    assert _partials(tmp_path) == []


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigterm_cleans_up(tmp_path: Path, child_setup: tuple[Path, Path], point: str) -> None:
    script, key = child_setup
    out = tmp_path / "run"
    code = _run_and_kill(script, key, out, point, signal.SIGTERM)
    inside = point not in ("start", "published")
    assert code == (128 + signal.SIGTERM if inside else -signal.SIGTERM)
    assert _complete_or_absent(out) == (point == "published")
    assert _partials(tmp_path) == []


def test_unwritable_parent_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "access", lambda *_args, **_kw: False)
    with pytest.raises(
        BundleError,
        match=f"Directory {tmp_path} is not writable; choose an --out in a writable directory.",
    ):
        staging_dir(tmp_path / "run")
