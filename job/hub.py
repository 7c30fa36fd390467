"""Downloads from the Hugging Face hub at a full commit revision, reusing the local cache offline."""

from __future__ import annotations

import os
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


def hub_fetch(repo_id: str, repo_type: str, revision: str, filename: str, cache_dir: Path,
              endpoint: str | None = None) -> Path:
    """Return the cached file if present (no network call); otherwise download it, unless offline.

    `endpoint` overrides the hub's address (default: HF_ENDPOINT or huggingface.co)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    where = f"{repo_id}@{revision[:12]}:{filename}"
    try:
        return Path(hf_hub_download(repo_id, filename, repo_type=repo_type, revision=revision,
                                    cache_dir=cache_dir, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    if offline():
        raise JobError(
            f"{where} is not in the cache {cache_dir} and the network is off (HF_HUB_OFFLINE); "
            "run `python -m job prepare` where the hub is reachable, or point --resources at a local copy."
        )
    try:
        return Path(hf_hub_download(repo_id, filename, repo_type=repo_type, revision=revision,
                                    cache_dir=cache_dir, endpoint=endpoint))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise JobError(
            f"Cannot download {where} into {cache_dir} ({reason}); check the network, "
            "or point --resources at a local copy of the file."
        ) from exc


LfsLookup = Callable[[str, str, str, list[str]], dict[str, str]]
"""(repo_id, repo_type, revision, paths) -> {path: sha256} for the paths stored in LFS."""


def hub_lfs_sha256(repo_id: str, repo_type: str, revision: str, paths: list[str],
                   endpoint: str | None = None) -> dict[str, str]:
    """The sha256 the hub publishes for each of `paths` stored in LFS at `revision`.

    One paths-info request for the repository; a path that is a plain git file (or absent) has no
    entry. `endpoint` overrides the hub's address, as for hub_fetch. Raises JobError when the hub
    cannot be asked."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    where = f"{repo_id}@{revision[:12]}"
    try:
        entries = HfApi(endpoint=endpoint).get_paths_info(repo_id, paths, revision=revision,
                                                           repo_type=repo_type)
    except (HfHubHTTPError, OSError, ValueError, KeyError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise JobError(
            f"Cannot read the LFS sha256 of {', '.join(paths)} in {where} from the hub ({reason}); "
            "check the network, or pin the files' sha256 in the protocol."
        ) from exc
    published = {}
    for entry in entries:
        lfs = getattr(entry, "lfs", None)
        if lfs is not None and entry.path in paths:
            published[entry.path] = str(lfs.sha256)
    return published
