"""The real download path (huggingface_hub, pinned revision, sha256 check) against a local
hub that speaks the resolve and paths-info protocols on loopback."""

import copy
import functools
import hashlib
import http.server
import json
import threading
import urllib.parse
from pathlib import Path
from typing import ClassVar

import pytest

from job.errors import JobError
from job.hub import hub_fetch, hub_lfs_sha256
from job.protocol import ResourcesSpec, load_protocol
from job.resources import resolve_hub
from tests.factory import sha256
from tests.hub_env import go_online

as_pins = ResourcesSpec.from_protocol
"""The typed resources section of an edited copy of the protocol's."""

REVISION_MODEL = load_protocol().resources.model.revision


class LocalHub(http.server.BaseHTTPRequestHandler):
    """Serves /{repo}/resolve/{rev}/{file} and /datasets/{repo}/resolve/{rev}/{file}, and answers
    POST /api/{models|datasets}/{repo}/paths-info/{rev} as the hub does: LFS files (those named in
    `lfs`) carry "lfs": {"oid": sha256, ...}, with the sha256 `lfs` maps them to."""

    files: ClassVar[dict[str, bytes]] = {}
    lfs: ClassVar[dict[str, str]] = {}  # resolve URL path -> the sha256 the hub publishes
    requests: ClassVar[list[str]] = []
    branches: ClassVar[dict[str, str]] = {}  # "{models|datasets}/{repo}@{branch}" -> the commit it points to

    def _repo_info(self) -> None:
        """GET /api/{models|datasets}/{repo}/revision/{rev}: the commit and, as with ?blobs=True, every
        file with its size and, for LFS files, the published sha256."""
        api, _, rev = self.path.split("?")[0].partition("/revision/")
        kind, _, repo = api.removeprefix("/api/").partition("/")
        rev = urllib.parse.unquote(rev)
        sha = self.branches.get(f"{kind}/{repo}@{rev}", rev)
        prefix = f"/{'' if kind == 'models' else 'datasets/'}{repo}/resolve/{sha}/"
        siblings = [{"rfilename": url.removeprefix(prefix), "size": len(body),
                     **({"lfs": {"sha256": self.lfs[url], "size": len(body), "pointerSize": 134}}
                        if url in self.lfs else {})}
                    for url, body in sorted(self.files.items()) if url.startswith(prefix)]
        body = json.dumps({"id": repo, "sha": sha, "siblings": siblings}).encode()
        self.send_response(200 if siblings else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

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
        if self.path.startswith("/api/") and "/revision/" in self.path:
            self._repo_info()
            return
        body = self._lookup()
        if body is None:
            self.send_error(404)
            return
        self._headers(body)
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.requests.append(f"POST {self.path}")
        api, _, rev = self.path.split("?")[0].partition("/paths-info/")
        kind, _, repo = api.removeprefix("/api/").partition("/")
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        prefix = {"models": "", "datasets": "datasets/"}.get(kind)
        entries = []
        for path in form.get("paths", []):
            url = f"/{prefix}{repo}/resolve/{rev}/{path}"
            if prefix is None or url not in self.files:
                continue
            entry = {"type": "file", "path": path, "size": len(self.files[url]), "oid": "0" * 40}
            if url in self.lfs:
                entry["lfs"] = {"oid": self.lfs[url], "size": len(self.files[url]), "pointerSize": 134}
            entries.append(entry)
        body = json.dumps(entries if prefix is not None else {"error": "Repository not found"}).encode()
        self.send_response(200 if prefix is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def local_hub(tiny_world, monkeypatch):
    go_online(monkeypatch)
    _, lock = tiny_world
    doc = json.loads(lock.read_text())
    proto = load_protocol().doc["resources"]
    files, lfs = {}, {}
    for role, prefix in (("model", ""), ("dataset", "datasets/")):
        spec = proto[role]
        for f in doc[role]["files"]:
            url = f"/{prefix}{spec['repo_id']}/resolve/{spec['revision']}/{f['path']}"
            files[url] = Path(f["local_path"]).read_bytes()
            if f["path"].endswith((".safetensors", ".parquet")):  # what the hub stores in LFS
                lfs[url] = hashlib.sha256(files[url]).hexdigest()
    LocalHub.files, LocalHub.lfs, LocalHub.requests = files, lfs, []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LocalHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", doc
    server.shutdown()


def protocol_for(doc: dict) -> dict:
    """The formal protocol's resources, with the local files' sizes and hashes as the pins."""
    res = copy.deepcopy(load_protocol().doc["resources"])
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
    got = resolve_hub(as_pins(res), tmp_path / "cache", fetch=fetch, pins_out=tmp_path / "pins.json",
                      lfs=lfs_at(endpoint))
    assert got.profile == "formal"
    assert any(r.startswith("GET /distilbert/") and REVISION_MODEL in r for r in LocalHub.requests)
    weights = next(f for f in got.model.files if f.path == "model.safetensors")
    assert weights.pin == "hub-lfs" and weights.pinned_sha256 == weights.sha256
    assert f"POST /api/models/{res['model']['repo_id']}/paths-info/{REVISION_MODEL}" in LocalHub.requests
    for f in got.model.files + got.dataset.files:
        assert sha256(f.local) == f.sha256
        assert (tmp_path / "cache" / "hub") in f.local.parents
    LocalHub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = resolve_hub(as_pins(res), tmp_path / "cache", fetch=fetch, lfs=lfs_at(endpoint))
    assert LocalHub.requests == [], "a verified cache is reused with no network call"
    assert again.record() == got.record()


def lfs_at(endpoint: str):
    return functools.partial(hub_lfs_sha256, endpoint=endpoint)


def test_weights_are_pinned_by_the_hubs_lfs_sha256_and_recorded_as_such(local_hub, tmp_path, capsys):
    endpoint, doc = local_hub
    res = protocol_for(doc)
    got = resolve_hub(as_pins(res), tmp_path / "cache", fetch=functools.partial(hub_fetch, endpoint=endpoint),
                      pins_out=tmp_path / "pins.json", lfs=lfs_at(endpoint))
    pins = {f["path"]: f["pin"] for f in got.record()["model"]["files"]}
    assert pins == {"config.json": "protocol", "tokenizer_config.json": "protocol", "vocab.txt": "protocol",
                    "model.safetensors": "hub-lfs"}
    weights = next(f for f in got.model.files if f.path == "model.safetensors")
    key = f"{res['model']['repo_id']}@{REVISION_MODEL}/model.safetensors"
    assert json.loads((tmp_path / "pins.json").read_text()) == {key: weights.sha256}
    err = capsys.readouterr().err
    assert "hub publishes" in err and "FIRST USE" not in err


def test_a_download_that_differs_from_the_hubs_lfs_sha256_is_refused_and_evicted(local_hub, tmp_path):
    endpoint, doc = local_hub
    res = protocol_for(doc)
    url = next(u for u in LocalHub.files if u.endswith("/model.safetensors"))
    real = LocalHub.lfs[url]
    LocalHub.lfs[url] = "b" * 64  # the hub publishes one hash, the download has another
    with pytest.raises(JobError) as err:
        resolve_hub(as_pins(res), tmp_path / "cache", fetch=functools.partial(hub_fetch, endpoint=endpoint),
                    pins_out=tmp_path / "pins.json", lfs=lfs_at(endpoint))
    msg = str(err.value)
    assert "model.safetensors" in msg and real in msg and "b" * 64 in msg and "LFS" in msg
    assert "\n" not in msg
    assert not any(p.exists() for p in (tmp_path / "cache").rglob("model.safetensors"))
    assert not (tmp_path / "pins.json").exists()


def test_an_unreachable_paths_info_api_is_one_sentence(local_hub, tmp_path):
    endpoint, _ = local_hub
    with pytest.raises(JobError, match=r"Cannot read the LFS sha256 of model\.safetensors .*check the network"):
        hub_lfs_sha256("distilbert/x", "space", REVISION_MODEL, ["model.safetensors"], endpoint=endpoint)


def test_a_download_with_the_wrong_hash_is_refused_and_evicted(local_hub, tmp_path):
    endpoint, doc = local_hub
    res = protocol_for(doc)
    res["model"]["files"][0]["sha256"] = "a" * 64
    with pytest.raises(JobError, match=r"config\.json.*expected a{64}"):
        resolve_hub(as_pins(res), tmp_path / "cache", fetch=functools.partial(hub_fetch, endpoint=endpoint),
                    lfs=lfs_at(endpoint))
    leftovers = [p for p in (tmp_path / "cache").rglob("config.json")]
    assert not any(p.exists() for p in leftovers)


def test_a_file_missing_on_the_hub_is_one_sentence(local_hub, tmp_path):
    endpoint, _ = local_hub
    with pytest.raises(JobError, match=r"Cannot download .*nothing\.bin"):
        hub_fetch("distilbert/x", "model", REVISION_MODEL, "nothing.bin", tmp_path, endpoint=endpoint)
