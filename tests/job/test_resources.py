import copy
import json
import shutil
from pathlib import Path

import pytest

from job.errors import JobError
from job.hub import hub_fetch
from job.protocol import ResourcesSpec, load_protocol
from job.resources import PINS_FILE, resolve_hub, resolve_local
from tests.factory import REPO, SHARED_FIXTURES, edited_json, sha256
from tests.hub_env import go_online

as_pins = ResourcesSpec.from_protocol
"""The typed resources section of an edited copy of the protocol's."""


@pytest.fixture
def protocol_resources():
    return load_protocol().resources


def fake_hub(files: dict[str, Path], calls: list[str]):
    """A stand-in for hub_fetch that serves local files and counts what it was asked for."""
    def fetch(repo_id, repo_type, revision, filename, cache_dir):
        calls.append(f"{repo_id}@{revision}/{filename}")
        src = files[filename]
        dst = Path(cache_dir) / repo_id / revision / filename
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            shutil.copyfile(src, dst)
        return dst
    return fetch


def pinned_protocol(tmp_path: Path, files: dict[str, Path]) -> dict:
    """The formal protocol's resources with this machine's files standing at the pinned paths."""
    res = copy.deepcopy(load_protocol().doc["resources"])
    for role in ("model", "dataset"):
        for f in res[role]["files"]:
            local = files[f["path"]]
            f["size"] = local.stat().st_size
            if f["sha256"] is not None:
                f["sha256"] = sha256(local)
    return res


@pytest.fixture
def hub_files(tiny_world):
    _, lock = tiny_world
    doc = json.loads(lock.read_text())
    files = {f["path"]: Path(f["local_path"]) for role in ("model", "dataset") for f in doc[role]["files"]}
    return files


def test_hub_resolution_checks_hashes_and_pins_unpinned_files_on_first_use(tmp_path, hub_files, capsys):
    res = pinned_protocol(tmp_path, hub_files)
    calls: list[str] = []
    pins_out = tmp_path / "observed-pins.json"
    got = resolve_hub(as_pins(res), tmp_path / "cache", fetch=fake_hub(hub_files, calls), pins_out=pins_out)
    assert got.profile == "formal", got.deviations
    weights = next(f for f in got.model.files if f.path == "model.safetensors")
    assert weights.pin == "first-use" and weights.sha256 == sha256(hub_files["model.safetensors"])
    assert "PINNED ON FIRST USE" in capsys.readouterr().err
    assert list(json.loads(pins_out.read_text()).values()) == [weights.sha256]
    assert json.loads((tmp_path / "cache" / PINS_FILE).read_text())
    # second resolution: the stored first-use pin is enforced
    again = resolve_hub(as_pins(res), tmp_path / "cache", fetch=fake_hub(hub_files, calls))
    assert again.profile == "formal"
    cached = next(f for f in again.model.files if f.path == "model.safetensors").local
    cached.chmod(0o644)
    cached.write_bytes(cached.read_bytes()[:-1] + b"\0")
    with pytest.raises(JobError, match="model.safetensors.*expected"):
        resolve_hub(as_pins(res), tmp_path / "cache", fetch=fake_hub(hub_files, calls))
    assert not cached.exists(), "a cached file that fails its check is evicted, never kept"


def test_hash_mismatch_names_the_file_expected_and_found(tmp_path, hub_files):
    res = pinned_protocol(tmp_path, hub_files)
    res["model"]["files"][0]["sha256"] = "0" * 64
    with pytest.raises(JobError) as err:
        resolve_hub(as_pins(res), tmp_path / "cache", fetch=fake_hub(hub_files, []))
    msg = str(err.value)
    assert "config.json" in msg and "0" * 64 in msg and sha256(hub_files["config.json"]) in msg


def test_empty_cache_and_no_network_says_which_file_and_what_to_do(tmp_path, protocol_resources):
    with pytest.raises(JobError, match=r"config\.json is not in the cache .* network is off.*--resources"):
        resolve_hub(protocol_resources, tmp_path / "cache")


def test_network_failure_is_one_clear_sentence_within_seconds(tmp_path, monkeypatch):
    """No retries: the hub's host is probed once, and the sentence names the local route."""
    import time

    from job.hub import PROXY_VARIABLES

    go_online(monkeypatch)
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    start = time.monotonic()
    with pytest.raises(JobError, match=r"config\.json is not in the cache.*cannot be reached.*check the network"
                                       r".*--resources LOCK\.json\.$"):
        hub_fetch("distilbert/distilbert-base-uncased-finetuned-sst-2-english", "model",
                  "714eb0fa89d2f80546fda750413ed43d93601a13", "config.json", tmp_path)
    assert time.monotonic() - start < 5


def test_local_lock_missing_file(tmp_path, tiny_world):
    _, lock = tiny_world
    bad = edited_json(lock, tmp_path / "lock.json",
                      lambda doc: doc["model"]["files"][0].update(local_path=str(tmp_path / "nowhere.json")))
    with pytest.raises(JobError, match="is missing: no file at"):
        resolve_local(bad, load_protocol().resources)


def test_local_lock_is_labelled_other_with_reasons(tiny_world):
    _, lock = tiny_world
    got = resolve_local(lock, load_protocol().resources)
    assert got.profile == "other"
    assert any("not the pinned distilbert" in d for d in got.deviations)


@pytest.mark.skipif(not SHARED_FIXTURES.is_dir(), reason="../shared/fixtures is absent")
def test_real_checkpoint_small_files_match_the_published_pins():
    for f in load_protocol().resources.model.files:
        if f.sha256 is None:
            continue
        local = SHARED_FIXTURES / "distilbert-sst2-real-config" / f.path
        assert local.stat().st_size == f.size
        assert sha256(local) == f.sha256


def test_committed_standin_lock_is_valid():
    from job.resources import load_lock

    lock = load_lock(REPO / "job" / "locks" / "standin.json")
    assert lock["dataset"]["rows"] == 872
