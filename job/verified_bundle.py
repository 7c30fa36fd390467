"""A bundle handed to `reproduce`: read into memory once, checked by the torch-free verifier through
its public API (verify.verify_path), then used as the verifier read it (nothing on disk is read
twice, no format is parsed a second time, and the bundle is never changed)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bundle import layout
from job.errors import JobError
from verify import EXIT_OK, EXIT_UNTRUSTED, SIGNER_CHECK, InputError, Outcome, Trust, verify_path


@dataclass(frozen=True)
class RecordedPool:
    """One pool's predictions as the bundle records them, in pool order."""

    name: str
    idx: NDArray[np.int64]
    split_key: tuple[str, ...]
    text_sha256: tuple[str, ...]
    logits: NDArray[np.float32]  # [n, K], exactly as stored
    token_count: NDArray[np.int64]
    batch: NDArray[np.int64]
    label: NDArray[np.int64]
    truncated: NDArray[np.bool_]
    full_token_count: NDArray[np.int64] | None  # None in bundles written before the column existed

    def batches(self) -> dict[int, list[int]]:
        """Recorded batch -> its rows (pool positions) in the order they ran: token count descending,
        ties by split key, the protocol's order (the verifier checked that the bundle follows it)."""
        members: dict[int, list[int]] = {}
        for row, b in enumerate(self.batch.tolist()):
            members.setdefault(int(b), []).append(row)
        return {b: sorted(rows, key=lambda r: (-int(self.token_count[r]), self.split_key[r]))
                for b, rows in sorted(members.items())}


@dataclass(frozen=True)
class VerifiedBundle:
    """A bundle that passed verification (integrity; the signer is not judged here), read through
    the verifier: its documents, predictions and envelope are the verifier's parse of them, so
    this module reads no file format of its own."""

    source: Path
    outcome: Outcome

    @property
    def signer_fingerprint(self) -> str:
        return self.outcome.signer_fingerprint or ""

    @property
    def files(self) -> Mapping[str, bytes]:
        """bag path -> the bytes of each file of the bag, as the verifier read them."""
        return self.outcome.files

    def json(self, path: str) -> Any:
        """A JSON payload file as the verifier parsed and validated it."""
        return self.outcome.documents[path]

    @property
    def protocol_raw(self) -> bytes:
        return self.outcome.files[layout.PROTOCOL_JSON]

    @property
    def statement_sha256(self) -> str:
        """sha256 of the signed statement: the exact payload bytes of the bundle's DSSE envelope."""
        envelope = self.outcome.envelope
        assert envelope is not None, "a verified bundle has an envelope"
        return hashlib.sha256(envelope.payload).hexdigest()

    def sha256(self, path: str) -> str:
        return self.outcome.sha256(path)

    def pool(self, name: str) -> RecordedPool:
        """One pool's predictions as the verifier read them (columns, types and ranges checked)."""
        data = self.outcome.pools[name]
        return RecordedPool(
            name=name,
            idx=np.asarray(data.idx, dtype=np.int64),
            split_key=tuple(data.split_key),
            text_sha256=tuple(data.text_sha256),
            logits=np.ascontiguousarray(data.z32, dtype=np.float32),
            token_count=np.asarray(data.token_count, dtype=np.int64),
            batch=np.asarray(data.batch, dtype=np.int64),
            label=np.asarray(data.y, dtype=np.int64),
            truncated=np.asarray(data.truncated, dtype=np.bool_),
            full_token_count=(None if data.full_token_count is None
                              else np.asarray(data.full_token_count, dtype=np.int64)),
        )


def load_verified(path: Path) -> VerifiedBundle:
    """The bundle at `path` (bag folder or .tar.gz), verified in-process by the torch-free verifier.

    Raises JobError, naming the first failed check, when it does not verify; no trusted key is
    needed, because what `reproduce` relies on is integrity: the figures follow from the logits."""
    path = Path(path)
    if not path.exists():
        raise JobError(f"The bundle {path} does not exist; pass a bag folder or its .tar.gz.")
    try:
        outcome = verify_path(path, Trust())
    except InputError as exc:
        raise _unreadable(path, str(exc)) from exc
    if outcome.read_failure is not None:
        raise _unreadable(path, outcome.read_failure)
    if outcome.exit_code not in (EXIT_OK, EXIT_UNTRUSTED) or outcome.signer_fingerprint is None:
        bad = next((c for c in outcome.checks if c.status != "pass" and c.id != SIGNER_CHECK), None)
        why = f"{bad.id}: {bad.detail}" if bad is not None else "no valid signature"
        raise JobError(f"The bundle {path} fails verification ({why.rstrip('.')}), so there is nothing "
                       f"to reproduce; run `python -m verify {path}` for the full report.")
    return VerifiedBundle(path, outcome)


def _unreadable(path: Path, why: str) -> JobError:
    return JobError(f"The bundle {path} cannot be read ({why.rstrip('.')}); pass the bag folder or "
                    "archive the job wrote.")
