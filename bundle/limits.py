"""How large a bundle may be, and how large the protocol may ask it to be (FORMAT.md, "Limits"):
every limit and cap of the format, defined here once for the writer and the verifier.

A verifier reads files downloaded from anywhere, so every size is bounded before anything is
read or parsed: the protocol's own values (rows, classes, steps, resamples) have fixed bounds,
and each payload file has a size cap derived from the protocol when it is readable and within
those bounds, else a fixed generous cap. Nothing here raises on malformed input: a protocol that
cannot be read gives the fixed caps, and the checks that read it say what is wrong with it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from bundle import layout
from bundle.errors import ProtocolOutOfBounds

MAX_ENTRIES: Final = 10_000
"""Entries (files and folders) in a bag folder or members in an archive; a bundle holds ~25."""
MAX_FILE_BYTES: Final = 64 * 1024 * 1024
"""Any one file, whatever the protocol says."""
MAX_TOTAL_BYTES: Final = 256 * 1024 * 1024
"""All files of a bag together."""
MAX_ARCHIVE_BYTES: Final = MAX_TOTAL_BYTES + 32 * 1024 * 1024
"""A .tar.gz on disk: its data, every header and padding, and deflate's worst-case overhead."""
MAX_NAME_BYTES: Final = 255
"""One path component (the usual filesystem limit)."""
MAX_PATH_BYTES: Final = 1024
"""A whole relative path inside the bag."""
MAX_PROTOCOL_BYTES: Final = 1024 * 1024
"""data/protocol.json, and a --protocol or --trusted-key file given on the command line; the job
reads no protocol larger than this, so no run writes one a verifier refuses."""
KEY_FILE_BYTES: Final = 64 * 1024
"""A PEM key file a user names (a PEM key is a few hundred bytes, an encrypted one under 1 KiB)."""
DOCUMENT_BYTES: Final = 4 * 1024 * 1024
"""A resource lock or a pin file a user names: kilobytes in practice."""
SMALL_FILE_BYTES: Final = 4 * 1024 * 1024
"""A record, tag file or derived file whose size does not grow with the data."""
MAX_TRAILING_ZERO_BYTES: Final = 1024 * 1024
"""Zero padding tolerated after an archive's end-of-archive marker (tar pads to 10,240 bytes)."""

MAX_ROWS: Final = 100_000
"""protocol resources.dataset.rows."""
MAX_CLASSES: Final = 1000
"""len(protocol resources.dataset.labels)."""
MAX_STEPS: Final = 1_100
"""protocol fit.steps: float64 bisection on [1/t_max, 1/t_min] is exhausted long before this."""
MAX_RESAMPLES: Final = 100_000
"""protocol bootstrap.resamples."""
MAX_RESAMPLE_CELLS: Final = 200_000_000
"""resamples x audit rows: the draws the verifier redoes, a bound on time, not memory (it draws
and scores them in blocks, verify/bootstrap.py): 2,000 resamples of the largest split it reads."""
MAX_STABILITY_SIZES: Final = 64
"""protocol stability sizes."""

POOLS_BYTES_PER_ROW: Final = 256
"""pools.json: one entry is ~170 bytes ({"idx", "split_key", "text_sha256"})."""
PARQUET_BYTES_PER_ROW: Final = 512
"""predictions: idx, two hex digests, label, pred, tokens, truncated, batch, uncompressed."""
PARQUET_BYTES_PER_CELL: Final = 16
"""predictions: one float32 logit and one float64 probability per class, uncompressed."""
TRAJECTORY_BYTES_PER_STEP: Final = 512
"""trajectory.json: one step is ~130 bytes (five floats)."""
SLACK_BYTES: Final = 64 * 1024
"""Headers, footers and fixed fields on top of the per-row sizes."""


@dataclass(frozen=True)
class Dimensions:
    """The protocol's sizes that bound the bundle's files."""

    rows: int
    classes: int
    steps: int
    resamples: int
    pool_sizes: Mapping[str, int]


def _int(value: Any, what: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ProtocolOutOfBounds(f"the protocol's {what} is {str(value)[:40]}, the verifier "
                                  f"accepts {low}..{high:,}", field=what, found=str(value)[:40],
                                  low=low, high=high)
    return value


def dimensions(protocol: Any) -> Dimensions:
    """The protocol's sizes; ProtocolOutOfBounds when one is missing, not an integer or beyond
    the verifier's bounds."""
    try:
        dataset = protocol["resources"]["dataset"]
        rows = _int(dataset["rows"], "resources.dataset.rows", 1, MAX_ROWS)
        classes = _int(len(dataset["labels"]), "number of labels", 2, MAX_CLASSES)
        steps = _int(protocol["fit"]["steps"], "fit.steps", 1, MAX_STEPS)
        sizes = {str(p["name"]): _int(p["size"], f"split pool size {str(p['name'])[:20]!r}", 0,
                                      MAX_ROWS) for p in protocol["split"]["pools"]}
        resamples = 0
        if "bootstrap" in protocol:
            spec = protocol["bootstrap"]
            resamples = _int(spec["resamples"], "bootstrap.resamples", 1, MAX_RESAMPLES)
            n = sizes.get(str(spec.get("pool")), rows)
            if resamples * n > MAX_RESAMPLE_CELLS:
                raise ProtocolOutOfBounds(
                    f"the protocol's bootstrap asks for {resamples:,} resamples of {n:,} rows, "
                    f"over the verifier's {MAX_RESAMPLE_CELLS:,} drawn rows")
        if "stability" in protocol:
            _int(len(protocol["stability"].get("sizes", [])), "number of stability sizes", 0,
                 MAX_STABILITY_SIZES)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ProtocolOutOfBounds(f"the protocol lacks a size the verifier needs ({exc!r})") from exc
    if sum(sizes.values()) > rows:
        raise ProtocolOutOfBounds(f"the protocol's pools hold {sum(sizes.values()):,} rows, more "
                                  f"than the dataset's {rows:,}")
    return Dimensions(rows, classes, steps, resamples, sizes)


def parquet_cap(rows: int, classes: int) -> int:
    """The most bytes a predictions file of `rows` rows and `classes` classes may hold, compressed
    on disk or uncompressed in its column chunks."""
    return SLACK_BYTES + rows * (PARQUET_BYTES_PER_ROW + classes * PARQUET_BYTES_PER_CELL)


def file_caps(dims: Dimensions | None) -> dict[str, int]:
    """The size cap of every file the format names, from the protocol's dimensions (None: the
    fixed caps). A file the format does not name gets SMALL_FILE_BYTES (see `cap`)."""
    caps = {path: SMALL_FILE_BYTES for path in (*layout.PAYLOAD_FILES, *layout.TAG_FILES)}
    caps[layout.PROTOCOL_JSON] = MAX_PROTOCOL_BYTES
    if dims is None:
        for path in (layout.POOLS_JSON, layout.CALIBRATION_PREDICTIONS, layout.AUDIT_PREDICTIONS,
                     layout.TRAJECTORY_JSON):
            caps[path] = MAX_FILE_BYTES
        return caps
    caps[layout.POOLS_JSON] = SLACK_BYTES + dims.rows * POOLS_BYTES_PER_ROW
    for pool, path in (("calibration", layout.CALIBRATION_PREDICTIONS),
                       ("audit", layout.AUDIT_PREDICTIONS)):
        caps[path] = parquet_cap(dims.pool_sizes.get(pool, dims.rows), dims.classes)
    caps[layout.TRAJECTORY_JSON] = SLACK_BYTES + dims.steps * TRAJECTORY_BYTES_PER_STEP
    return {path: min(value, MAX_FILE_BYTES) for path, value in caps.items()}


def cap(caps: Mapping[str, int], rel: str) -> int:
    """The size cap of the file at `rel` (a path the format does not name: SMALL_FILE_BYTES)."""
    return caps.get(rel, SMALL_FILE_BYTES)


