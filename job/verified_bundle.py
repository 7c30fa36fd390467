"""A bundle handed to `reproduce`: read into memory once, checked by the torch-free verifier, then
read from those very bytes (nothing on disk is read twice, and the bundle is never changed)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from numpy.typing import NDArray

from bundle import layout
from job.errors import JobError
from verify import extract
from verify.checks import verify_tree
from verify.context import Trust
from verify.result import EXIT_OK, EXIT_UNTRUSTED, SIGNER_CHECK, Failed, InputError, exit_code
from verify.tree import BagTree, read_tree


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
    """The files of a bundle that passed verification (integrity; the signer is not judged here)."""

    source: Path
    tree: BagTree
    signer_fingerprint: str

    def json(self, path: str) -> Any:
        return json.loads(self.tree.files[path])

    @property
    def protocol_raw(self) -> bytes:
        return self.tree.files[layout.PROTOCOL_JSON]

    @property
    def statement_sha256(self) -> str:
        """sha256 of the signed statement: the exact payload bytes of the bundle's DSSE envelope."""
        envelope = self.json(layout.PROVENANCE)
        return hashlib.sha256(base64.b64decode(envelope["payload"], validate=True)).hexdigest()

    def sha256(self, path: str) -> str:
        return self.tree.sha256(path)

    def pool(self, name: str) -> RecordedPool:
        table = pq.read_table(io.BytesIO(self.tree.files[layout.PREDICTIONS[name]]))
        k = sum(1 for c in table.column_names if c.startswith("logit_"))
        logits = np.stack([table.column(f"logit_{j}").to_numpy() for j in range(k)], axis=1)
        return RecordedPool(
            name=name,
            idx=table.column("idx").to_numpy().astype(np.int64),
            split_key=tuple(table.column("split_key").to_pylist()),
            text_sha256=tuple(table.column("text_sha256").to_pylist()),
            logits=np.ascontiguousarray(logits, dtype=np.float32),
            token_count=table.column("token_count").to_numpy().astype(np.int64),
            batch=table.column("batch").to_numpy().astype(np.int64),
            label=table.column("label").to_numpy().astype(np.int64),
            truncated=np.asarray(table.column("truncated").to_numpy(zero_copy_only=False), dtype=np.bool_),
            full_token_count=(table.column("full_token_count").to_numpy().astype(np.int64)
                              if "full_token_count" in table.column_names else None),
        )


def _read(path: Path) -> BagTree:
    if not extract.is_archive(path):
        return read_tree(path)
    with tempfile.TemporaryDirectory(prefix="reproduce-") as tmp:
        extract.extract_archive(path, Path(tmp))
        return read_tree(extract.find_bag_root(Path(tmp)))


def load_verified(path: Path) -> VerifiedBundle:
    """The bundle at `path` (bag folder or .tar.gz), verified in-process by the torch-free verifier.

    Raises JobError, naming the first failed check, when it does not verify; no trusted key is
    needed, because what `reproduce` relies on is integrity: the figures follow from the logits."""
    path = Path(path)
    if not path.exists():
        raise JobError(f"The bundle {path} does not exist; pass a bag folder or its .tar.gz.")
    try:
        tree = _read(path)
    except (InputError, Failed) as exc:
        raise JobError(f"The bundle {path} cannot be read ({str(exc).rstrip('.')}); pass the bag "
                       "folder or archive the job wrote.") from exc
    result = verify_tree(tree, Trust())
    if exit_code(result.checks) not in (EXIT_OK, EXIT_UNTRUSTED) or result.signer_fingerprint is None:
        bad = next((c for c in result.checks if c.status != "pass" and c.id != SIGNER_CHECK),
                   None)
        why = f"{bad.id}: {bad.detail}" if bad is not None else "no valid signature"
        raise JobError(f"The bundle {path} fails verification ({why.rstrip('.')}), so there is nothing "
                       f"to reproduce; run `python -m verify {path}` for the full report.")
    return VerifiedBundle(path, tree, result.signer_fingerprint)

