"""Names fixed by bundle/FORMAT.md: tag files, payload files and the schema each JSON file follows."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

FORMAT_VERSION: Final = 2
"""The bundle format this code writes (FORMAT.md's title); the signed predicate records it."""
OLDEST_VERIFIER: Final = "2.0.0"
"""The oldest release of the verifier (calibration-verify) that reads FORMAT_VERSION."""

# Tag files (bag root).
BAGIT_TXT: Final = "bagit.txt"
BAG_INFO: Final = "bag-info.txt"
MANIFEST_SHA256: Final = "manifest-sha256.txt"
MANIFEST_SHA512: Final = "manifest-sha512.txt"
PROVENANCE: Final = "provenance.intoto.json"
SIGNER_PUB: Final = "signer.pub.pem"
TAGMANIFEST_SHA256: Final = "tagmanifest-sha256.txt"
MANIFEST_FILE_RE: Final = re.compile(r"(tag)?manifest-([A-Za-z0-9_-]+)\.txt")
"""A (tag) manifest's file name: group 1 is "tag" for a tag manifest, group 2 the algorithm."""
MANIFEST_LINE_RE: Final = re.compile(r"([0-9A-Fa-f]+)([ \t]+)(\S.*)")
"""One (tag) manifest line as RFC 8493 writes it: digest (either hex case), the separator (one or
more spaces or tabs), path; read with fullmatch."""
TAG_FILE_EOL: Final = re.compile(r"\r\n|\r|\n")
"""The line ends of a tag file RFC 8493 allows (LF, CR, CRLF), and no other."""

TAG_FILES: Final = (
    BAGIT_TXT,
    BAG_INFO,
    MANIFEST_SHA256,
    MANIFEST_SHA512,
    PROVENANCE,
    SIGNER_PUB,
    TAGMANIFEST_SHA256,
)
"""Every file a bag may hold outside data/."""

BAGIT_TXT_CONTENT: Final = "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"

# bag-info.txt labels, in the order they are written.
INFO_BAGGING_DATE: Final = "Bagging-Date"
INFO_PAYLOAD_OXUM: Final = "Payload-Oxum"
INFO_DESCRIPTION: Final = "External-Description"
INFO_PROTOCOL_SHA256: Final = "Protocol-SHA256"
INFO_PROFILE: Final = "Profile"
INFO_SIGNER_FINGERPRINT: Final = "Signer-Fingerprint"
BAG_INFO_LABELS: Final = (
    INFO_BAGGING_DATE,
    INFO_PAYLOAD_OXUM,
    INFO_DESCRIPTION,
    INFO_PROTOCOL_SHA256,
    INFO_PROFILE,
    INFO_SIGNER_FINGERPRINT,
)

PROFILES: Final = ("formal", "other")

# Payload (data/).
DATA_DIR: Final = "data"
PROTOCOL_JSON: Final = "data/protocol.json"
RESOURCES_JSON: Final = "data/resources.json"
POOLS_JSON: Final = "data/pools.json"
CALIBRATION_PREDICTIONS: Final = "data/predictions/calibration.parquet"
AUDIT_PREDICTIONS: Final = "data/predictions/audit.parquet"
TEMPERATURE_JSON: Final = "data/temperature.json"
TRAJECTORY_JSON: Final = "data/trajectory.json"
METRICS_JSON: Final = "data/metrics.json"
STAGES_JSON: Final = "data/stages.json"
ENVIRONMENT_JSON: Final = "data/environment.json"

PREDICTIONS: Final = {"calibration": CALIBRATION_PREDICTIONS, "audit": AUDIT_PREDICTIONS}
"""Pool name -> its predictions file."""

REPORT_MD: Final = "data/report.md"
RO_CRATE_JSON: Final = "data/ro-crate-metadata.json"
RELIABILITY_FIGURE: Final = "data/figures/reliability-audit.png"
CONFIDENCE_FIGURE: Final = "data/figures/confidence-audit.png"
FIGURES: Final = (CONFIDENCE_FIGURE, RELIABILITY_FIGURE)
"""Views derived from the files above (FORMAT.md "Derived files"): the report, the RO-Crate
metadata and the figures."""

BOOTSTRAP_JSON: Final = "data/bootstrap.json"
STABILITY_JSON: Final = "data/stability.json"

PAYLOAD_SCHEMAS: Final[dict[str, str]] = {
    PROTOCOL_JSON: "protocol",
    RESOURCES_JSON: "resources",
    POOLS_JSON: "pools",
    TEMPERATURE_JSON: "temperature",
    TRAJECTORY_JSON: "trajectory",
    METRICS_JSON: "metrics",
    STAGES_JSON: "stages",
    ENVIRONMENT_JSON: "environment",
    BOOTSTRAP_JSON: "bootstrap",
    STABILITY_JSON: "stability",
}
"""Payload path -> schema name (schemas/<name>.schema.json) for every JSON payload file."""

PROTOCOL_SECTION_PAYLOAD: Final[dict[str, str]] = {
    "bootstrap": BOOTSTRAP_JSON,
    "stability": STABILITY_JSON,
}
"""Optional protocol section -> the payload file a bundle holds exactly when the section exists."""

PAYLOAD_FILES: Final = tuple(
    sorted(
        [
            *(p for p in PAYLOAD_SCHEMAS if p not in PROTOCOL_SECTION_PAYLOAD.values()),
            CALIBRATION_PREDICTIONS,
            AUDIT_PREDICTIONS,
            REPORT_MD,
            RO_CRATE_JSON,
            *FIGURES,
        ]
    )
)
"""The payload every bundle holds, sorted (see expected_payload for the complete list)."""


def expected_payload(protocol: Mapping[str, Any]) -> tuple[str, ...]:
    """The complete payload, sorted, of a bundle run under the parsed protocol document."""
    extra = [path for section, path in PROTOCOL_SECTION_PAYLOAD.items() if section in protocol]
    return tuple(sorted([*PAYLOAD_FILES, *extra]))


def data_name(path: str) -> str:
    """The name of payload file `path` inside data/ ("data/metrics.json" -> "metrics.json"): how stage
    records, the report, the crate and the job's data-directory writers refer to it."""
    prefix = f"{DATA_DIR}/"
    if not path.startswith(prefix):
        raise ValueError(f"{path!r} is not a payload path (it does not start with {prefix!r})")
    return path[len(prefix):]


NON_CANONICAL_PAYLOAD: Final = frozenset({PROTOCOL_JSON})
"""JSON payload files copied byte for byte instead of written as canonical JSON."""

# Statement and envelope.
STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE: Final = "https://calibration-runs.example/predicate/temperature-calibration/v1"
PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"

SCHEMA_ID_PREFIX: Final = "https://calibration-runs.example/schemas/"


def schema_id_for(name: str) -> str:
    """The `$id` of schema `name`: https://calibration-runs.example/schemas/<name>/v1."""
    return f"{SCHEMA_ID_PREFIX}{name}/v1"

# Reproduction attestations (FORMAT.md "Reproduction attestation"): separate files next to the bag.
REPRODUCTION_PREDICATE_TYPE: Final = "https://calibration-runs.example/predicate/reproduction/v1"
SIGNED_STATEMENT_SUBJECT: Final = f"{PROVENANCE}#payload"
"""The attestation's subject naming the bundle's signed statement: sha256 of the envelope's decoded payload."""
REPRODUCTION_GENERATOR: Final = "numpy.random.PCG64.random_raw"
"""How a sampled reproduction draws its rows (FORMAT.md): one raw 64-bit draw per candidate row."""
REPRODUCTION_POOLS: Final = ("calibration", "audit")
"""The pools a reproduction re-runs, in the order its sample is drawn from."""
REPRODUCTION_BATCH_DRAW: Final = "batches"
"""How a sampled reproduction draws (FORMAT.md): whole recorded batches, one raw 64-bit draw per batch,
until they hold at least n rows. Attestations without `sample.draw` drew single rows."""
VERDICTS: Final = ("bit-identical", "equivalent", "mismatch")
"""A reproduction's verdicts, strictest first (FORMAT.md "Reproduction attestation")."""
LEGACY_REPRODUCED: Final = "reproduced"
"""The verdict of earlier attestations for every compared logit bit for bit: read as bit-identical."""
LINEAR_KERNELS: Final = {"mkl": "MKL's", "onednn": "oneDNN's"}
"""The protocol's `inference.linear_kernels` values (schemas/protocol.schema.json), each with the name
report.md gives it: whose kernels run the linear layers."""
DEFAULT_LINEAR_KERNELS: Final = "mkl"
"""What a protocol without `inference.linear_kernels` means: every protocol written before the field ran MKL's."""
DEFAULT_LOGIT_TOLERANCE: Final = 1e-4
"""The largest absolute difference between a reproduced and a stored float32 logit that counts as
`equivalent` when the protocol pre-registers none (`reproduction.logit_tolerance`). Chosen from
measurement (docs/PERFORMANCE.md, "Reproduction across CPUs"): about 20 times the largest honest
difference measured across ISA limits and thread counts, and far below the smallest edit that
flips a prediction."""

# Sweeps (FORMAT.md "Sweeps"): member bundles under one directory, tied by a signed plan and index.
SWEEP_FILE: Final = "sweep.json"
"""The sweep file the plan was expanded from, copied byte for byte."""
SWEEP_PLAN: Final = "plan.intoto.json"
SWEEP_INDEX: Final = "index.intoto.json"
SWEEP_MEMBERS: Final = "members"
SWEEP_MD: Final = "sweep.md"
SWEEP_TEMPERATURE_FIGURE: Final = "figures/temperature.png"
SWEEP_ECE_FIGURE: Final = "figures/ece.png"
SWEEP_VIEWS: Final = (SWEEP_MD, SWEEP_ECE_FIGURE, SWEEP_TEMPERATURE_FIGURE)
"""The sweep's views, rendered from the index (bundle.views.sweep_comparison)."""
SWEEP_PLAN_PREDICATE_TYPE: Final = "https://calibration-runs.example/predicate/sweep-plan/v1"
SWEEP_INDEX_PREDICATE_TYPE: Final = "https://calibration-runs.example/predicate/sweep-index/v1"
SWEEP_SUMMARY_METRICS: Final = ("nll", "ece", "brier")
"""The audit metrics an index row summarises, raw and calibrated, with their bootstrap intervals."""
SWEEP_MAX_MEMBERS: Final = 10_000
"""A sweep plans at most this many members (the job refuses more before writing anything)."""
SWEEP_RECORD_SLACK_BYTES: Final = 64 * 1024
"""The envelope, statement and subjects' fixed part of a plan or index, on top of its members."""
SWEEP_PLAN_BYTES_PER_MEMBER: Final = 2 * 1024
"""A plan's bytes per member on average (the envelope, base64 and all): 1.3 KB measured for the
stand-in's seven files. The job refuses a plan larger than SWEEP_MAX_PLAN_BYTES, so every plan it
writes is one a verifier reads."""
SWEEP_MAX_PLAN_BYTES: Final = SWEEP_RECORD_SLACK_BYTES + SWEEP_MAX_MEMBERS * SWEEP_PLAN_BYTES_PER_MEMBER
"""plan.intoto.json is refused unread beyond this (about 19.6 MiB)."""
SWEEP_ERROR_CHARS: Final = 2000
"""A failed member's error in the index: printable ASCII, at most this many characters."""
SWEEP_INDEX_BYTES_PER_MEMBER: Final = 4 * 1024
"""An index row at most, enveloped: name (200), statement sha256 or error (SWEEP_ERROR_CHARS), a
summary of fixed shape (about 700), times 4/3 for base64. index.intoto.json is refused unread
beyond SWEEP_RECORD_SLACK_BYTES + this times the signed plan's member count."""


def sweep_index_max_bytes(members: int) -> int:
    """The most bytes the index of a plan of `members` members may hold."""
    return SWEEP_RECORD_SLACK_BYTES + members * SWEEP_INDEX_BYTES_PER_MEMBER


def member_protocol_subject(name: str) -> str:
    """The plan's subject naming member `name`'s protocol: the path its bundle holds it at."""
    return f"{SWEEP_MEMBERS}/{name}/{PROTOCOL_JSON}"


def member_statement_subject(name: str) -> str:
    """The index's subject naming member `name`'s signed statement (sha256 of its envelope's payload)."""
    return f"{SWEEP_MEMBERS}/{name}/{SIGNED_STATEMENT_SUBJECT}"
