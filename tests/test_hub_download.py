"""The real download path (huggingface_hub, pinned revision, sha256 check) against a local
hub that speaks the resolve protocol on loopback."""

import functools
import hashlib
import http.server
import threading
from pathlib import Path
from typing import ClassVar

import pytest

from job.errors import JobError
from job.hub import hub_fetch
from job.protocol import load_protocol
from job.resources import resolve_hub
from tests.factory import sha256

REVISION_MODEL = load_protocol().resources["model"]["revision"]


class LocalHub(http.server.BaseHTTPRequestHandler):
    """Serves /{repo}/resolve/{rev}/{file} and /datasets/{repo}/resolve/{rev}/{file}."""

    files: ClassVar[dict[str, bytes]] = {}
    requests: ClassVar[list[str]] = []

    def _lookup(self) -> bytes | None:
        return self.files.get(self.path.split("?")[0])

    def _headers(self, body: bytes) -> None:
        rev = self.path.split("/resolve/")[1].split("/")[0]
        self.send_response(200)
        self.send_header("X-Repo-Commit", rev)
        self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()

    def do_HEAD(self) -> None:
        self.requests.append(f"HEAD {self.path}")
        body = self._lookup()
        if body is None:
            self.send_error(404)
            return
        self._headers(body)

    def do_GET(self) -> None:
        self.requests.append(f"GET {self.path}")
        body = self._lookup()
        if body is None:
            self.send_error(404)
            return
        self._headers(body)
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def local_hub(tiny_world, monkeypatch):
    import json

    monkeypatch.delenv("HF_HUB_OFFLINE")
    _, lock = tiny_world
    doc = json.loads(lock.read_text())
    proto = load_protocol().resources
    files = {}
    for role, prefix in (("model", ""), ("dataset", "datasets/")):
        spec = proto[role]
        for f in doc[role]["files"]:
            files[f"/{prefix}{spec['repo_id']}/resolve/{spec['revision']}/{f['path']}"] = Path(f["local_path"]).read_bytes()
    LocalHub.files, LocalHub.requests = files, []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LocalHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", doc
    server.shutdown()


def protocol_for(doc: dict) -> dict:
    """The formal protocol's resources, with the local files' sizes and hashes as the pins."""
    res = load_protocol().resources
    local = {f["path"]: f for role in ("model", "dataset") for f in doc[role]["files"]}
    for role in ("model", "dataset"):
        for f in res[role]["files"]:
            f["size"] = local[f["path"]]["size"]
            if f["sha256"] is not None:
                f["sha256"] = local[f["path"]]["sha256"]
    return res


def test_download_at_the_pinned_revision_then_reuse_the_cache_without_network(local_hub, tmp_path, monkeypatch):
    endpoint, doc = local_hub
    res = protocol_for(doc)
    fetch = functools.partial(hub_fetch, endpoint=endpoint)
    got = resolve_hub(res, tmp_path / "cache", fetch=fetch, pins_out=tmp_path / "pins.json")
    assert got.profile == "formal"
    assert any(r.startswith("GET /distilbert/") and REVISION_MODEL in r for r in LocalHub.requests)
    for f in got.model.files + got.dataset.files:
        assert sha256(f.local) == f.sha256
        assert (tmp_path / "cache" / "hub") in f.local.parents
    LocalHub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = resolve_hub(res, tmp_path / "cache", fetch=fetch)
    assert LocalHub.requests == [], "a verified cache is reused with no network call"
    assert again.record() == got.record()


def test_a_download_with_the_wrong_hash_is_refused_and_evicted(local_hub, tmp_path):
    endpoint, doc = local_hub
    res = protocol_for(doc)
    res["model"]["files"][0]["sha256"] = "a" * 64
    with pytest.raises(JobError, match=r"config\.json.*expected a{64}"):
        resolve_hub(res, tmp_path / "cache", fetch=functools.partial(hub_fetch, endpoint=endpoint))
    leftovers = [p for p in (tmp_path / "cache").rglob("config.json")]
    assert not any(p.exists() for p in leftovers)


def test_a_file_missing_on_the_hub_is_one_sentence(local_hub, tmp_path):
    endpoint, _ = local_hub
    with pytest.raises(JobError, match=r"Cannot download .*nothing\.bin"):
        hub_fetch("distilbert/x", "model", REVISION_MODEL, "nothing.bin", tmp_path, endpoint=endpoint)
