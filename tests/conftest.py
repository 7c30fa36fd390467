from __future__ import annotations

import functools
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import goldens
from tests.factory import make_world


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", metavar="REASON", default=None,
                     help="rewrite the golden digests (tests/goldens/) that this run changes and append "
                          "REASON to tests/goldens/CHANGELOG.md")


def pytest_configure(config: pytest.Config) -> None:
    reason = config.getoption("--update-goldens")
    if reason is not None and not reason.strip():
        raise pytest.UsageError("--update-goldens needs a reason, e.g. --update-goldens='torch 2.14 changes GEMM "
                                "rounding'; it is written to tests/goldens/CHANGELOG.md.")


LONGEST_FIRST = (
    "tests/web/test_browser.py",
    "tests/verify/test_tamper.py",
    "tests/job/test_publish.py",
    "tests/job/test_inference.py",
    "tests/verify/test_sweep.py",
    "tests/job/test_reproduce_levels.py",
    "tests/bundle/test_schemas.py",
    "tests/job/test_own_classifier.py",
    "tests/test_cli_edges.py",
    "tests/job/test_goldens.py",
    "tests/verify/test_cli_fuzz.py",
    "tests/job/test_readme_own.py",
    "tests/job/test_figures.py",
    "tests/job/test_any_classifier.py",
    "tests/job/test_init.py",
    "tests/verify/test_cli.py",
)
"""The modules that take longest in `make test` (the sum of their tests' times, fixtures included), longest
first."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run LONGEST_FIRST's modules first, every other one in collection order. `make test` hands
    whole modules to its workers in this order (pytest-xdist, --dist loadscope, with
    --no-loadscope-reorder: by default xdist orders modules by their number of tests, which handed
    out the browser's four long tests last); a long module handed out last keeps one worker busy
    while the other has nothing left. Only the order moves."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture(scope="session")
def golden(pytestconfig: pytest.Config) -> Callable[[str, Path], None]:
    """golden(run, bundle): fail unless the bundle's logits, temperature and metrics have the
    committed digests of `run` (tests.goldens.compare; --update-goldens rewrites them)."""
    return functools.partial(goldens.compare, update_reason=pytestconfig.getoption("--update-goldens"))


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests never leave this machine: a connection to anything but loopback fails loudly."""
    connect = socket.socket.connect

    def loopback_only(self: socket.socket, address: object) -> None:
        host = address[0] if isinstance(address, tuple) else address
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise OSError(f"network disabled in tests (tried {host})")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", loopback_only)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(protocol, lock) for a tiny generated classifier and a 48-row synthetic dataset."""
    return make_world(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def signing_key_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from job.publishing.signing_keys import generate

    out = tmp_path_factory.mktemp("keys") / "k"
    generate(out)
    return out


@pytest.fixture(scope="session")
def tiny_bundle(tiny_world: tuple[Path, Path], signing_key_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real signed bundle from the job on the tiny fixtures. Treat as read-only: copy before tampering."""
    from job.cli import main

    protocol, lock = tiny_world
    out = tmp_path_factory.mktemp("bundle") / "run"
    rc = main(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(out),
               "--signing-key", str(signing_key_dir / "signing-key.pem"), "--no-progress"])
    assert rc == 0
    return out


@pytest.fixture(scope="session")
def reproducer_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reproducer's key pair (signing-key.pem, signing-key.pub.pem), not the bundle signer's."""
    from job.publishing.signing_keys import generate

    out = tmp_path_factory.mktemp("reproducer") / "k"
    generate(out)
    return out


@pytest.fixture(scope="session")
def tiny_reproduction(tiny_bundle: Path, tiny_world: tuple[Path, Path], reproducer_keys: Path,
                      tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An honest full reproduction of tiny_bundle (`job reproduce`), signed with reproducer_keys.
    Treat as read-only: copy or re-sign before editing."""
    from job.cli import main

    out = tmp_path_factory.mktemp("reproduction") / "full.json"
    assert main(["reproduce", str(tiny_bundle), "--out", str(out), "--signing-key",
                 str(reproducer_keys / "signing-key.pem"), "--resources", str(tiny_world[1]), "--no-progress"]) == 0
    return out


@pytest.fixture(scope="session")
def _tiny_payload(tiny_world: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    from job.pipeline import execute
    from job.protocol import load_protocol
    from job.resources import resolve_local

    protocol_path, lock = tiny_world
    protocol = load_protocol(protocol_path)
    data = tmp_path_factory.mktemp("payload") / "data"
    execute(protocol, resolve_local(lock, protocol.resources), data, progress=False)
    return data


@pytest.fixture(scope="module")
def tiny_data(_tiny_payload: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The payload the job writes (job.pipeline.execute, not sealed) for the tiny 2-class world;
    a fresh copy for each test module."""
    data = tmp_path_factory.mktemp("data") / "data"
    shutil.copytree(_tiny_payload, data)
    return data


