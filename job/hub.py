"""Downloads from the Hugging Face hub at a full commit revision, reusing the local cache offline."""

from __future__ import annotations

import os
import socket
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from job.errors import JobError

Fetch = Callable[[str, str, str, str, Path], Path]
"""(repo_id, repo_type, revision, filename, cache_dir) -> local path."""


def default_cache() -> Path:
    """<HF_HOME>/calibration-runs, HF_HOME defaulting to ~/.cache/huggingface."""
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "calibration-runs"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


LOCAL_ROUTE = "or work from local files: write a lock with `python -m job lock` and pass --resources LOCK.json"
"""The end of every message about an unreachable hub: the route that needs no network."""
PROBE_SECONDS = 3.0
"""How long the reachability probe waits for a TCP connection to the hub before giving up."""


def hub_address(endpoint: str | None = None) -> str:
    """The hub's base URL: `endpoint`, else HF_ENDPOINT, else huggingface.co (as huggingface_hub reads it)."""
    from huggingface_hub import constants  # deferred: the hub client loads only when the hub is asked

    return (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def proxied() -> bool:
    """Whether the environment routes HTTP through a proxy (then only huggingface_hub can tell)."""
    return any(os.environ.get(name) for name in PROXY_VARIABLES)


def require_reachable(what: str, endpoint: str | None = None) -> None:
    """JobError, within PROBE_SECONDS, when the network is off or the hub's host does not accept a
    TCP connection: huggingface_hub would otherwise retry for about 23 s and then fail anyway.
    Behind a proxy (PROXY_VARIABLES) the host is not probed."""
    address = hub_address(endpoint)
    if offline():
        raise JobError(f"{what} needs the hub, and the network is off (HF_HUB_OFFLINE); run where the hub is "
                       f"reachable, {LOCAL_ROUTE}.")
    if proxied():
        return  # the hub is reached through a proxy: a direct connection says nothing about it
    url = urllib.parse.urlsplit(address)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=PROBE_SECONDS).close()
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise JobError(f"{what} needs the hub, and {address} cannot be reached ({reason}); check the network, "
                       f"{LOCAL_ROUTE}.") from exc


def failure_reason(exc: BaseException) -> str:
    """The first line of an exception's message, or its type's name: what a one-sentence error quotes."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def hub_fetch(repo_id: str, repo_type: str, revision: str, filename: str, cache_dir: Path,
              endpoint: str | None = None) -> Path:
    """Return the cached file if present (no network call); otherwise download it, unless offline.

    `endpoint` overrides the hub's address (default: HF_ENDPOINT or huggingface.co)."""
    from huggingface_hub import hf_hub_download  # deferred: the hub client loads only when the hub is asked
    from huggingface_hub.errors import LocalEntryNotFoundError

    where = f"{repo_id}@{revision[:12]}:{filename}"
    try:
        return Path(hf_hub_download(repo_id, filename, repo_type=repo_type, revision=revision,
                                    cache_dir=cache_dir, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    require_reachable(f"{where} is not in the cache {cache_dir}, so downloading it", endpoint)
    try:
        return Path(hf_hub_download(repo_id, filename, repo_type=repo_type, revision=revision,
                                    cache_dir=cache_dir, endpoint=endpoint))
    except Exception as exc:  # whatever the network or the hub does, one sentence
        raise JobError(
            f"Cannot download {where} into {cache_dir} ({failure_reason(exc)}); check the network, "
            f"{LOCAL_ROUTE}."
        ) from exc


LfsLookup = Callable[[str, str, str, list[str]], dict[str, str]]
"""(repo_id, repo_type, revision, paths) -> {path: sha256} for the paths stored in LFS."""


def hub_lfs_sha256(repo_id: str, repo_type: str, revision: str, paths: list[str],
                   endpoint: str | None = None) -> dict[str, str]:
    """The sha256 the hub publishes for each of `paths` stored in LFS at `revision`.

    One paths-info request for the repository; a path that is a plain git file (or absent) has no
    entry. `endpoint` overrides the hub's address, as for hub_fetch. Raises JobError when the hub
    cannot be asked."""
    from huggingface_hub import HfApi  # deferred: the hub client loads only when the hub is asked

    where = f"{repo_id}@{revision[:12]}"
    require_reachable(f"Reading the LFS sha256 of {', '.join(paths)} in {where}", endpoint)
    try:
        entries = HfApi(endpoint=endpoint).get_paths_info(repo_id, paths, revision=revision,
                                                           repo_type=repo_type)
    except Exception as exc:  # whatever the network or the hub does, one sentence
        raise JobError(
            f"Cannot read the LFS sha256 of {', '.join(paths)} in {where} from the hub ({failure_reason(exc)}); "
            f"check the network, pin the files' sha256 in the protocol, {LOCAL_ROUTE}."
        ) from exc
    published = {}
    for entry in entries:
        lfs = getattr(entry, "lfs", None)
        if lfs is not None and entry.path in paths:
            published[entry.path] = str(lfs.sha256)
    return published
