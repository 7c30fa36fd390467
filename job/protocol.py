"""The pre-registered protocol (provenance.json): loaded, schema-checked and hashed before any work.

The sections the job acts on (resources, split, inference, fit, bootstrap, stability) are parsed
once, here, into frozen dataclasses (the bytes, and so the protocol's sha256, stay as written); what
the schema cannot express (t_min below t_max, the smoke pool among the pools, ...) is checked here
too, so that a protocol the job cannot follow is refused before any inference."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundle.errors import ProtocolOutOfBounds
from bundle.layout import DEFAULT_LOGIT_TOLERANCE
from bundle.limits import MAX_PROTOCOL_BYTES, dimensions
from job.dataset import DatasetSpec
from job.errors import JobError, ProtocolBeyondLimits
from job.estimator_spec import EstimatorSpec, parse_estimators
from job.labelmap import LabelMap
from job.linear_kernels import DEFAULT as LINEAR_DEFAULT
from job.user_documents import read_checked

DEFAULT_PROTOCOL = Path(__file__).resolve().parent.parent / "provenance.json"

CALIBRATION, AUDIT = "calibration", "audit"
"""The pools the run needs: the temperature is fitted on CALIBRATION, the evidence is AUDIT."""


@dataclass(frozen=True)
class FilePin:
    """One file of a pinned repository: its path there, its size, and its sha256 (None: pinned by
    revision and size only)."""

    path: str
    size: int
    sha256: str | None

    @classmethod
    def from_protocol(cls, entry: dict[str, Any]) -> FilePin:
        sha = entry["sha256"]
        return cls(path=str(entry["path"]), size=int(entry["size"]), sha256=None if sha is None else str(sha))


@dataclass(frozen=True)
class RepoPin:
    """`resources.model`: a hub repository at a full commit id, and the files the run reads from it."""

    repo_id: str
    repo_type: str
    revision: str
    files: tuple[FilePin, ...]

    @staticmethod
    def _repo_fields(section: dict[str, Any]) -> dict[str, Any]:
        return {"repo_id": str(section["repo_id"]), "repo_type": str(section["repo_type"]),
                "revision": str(section["revision"]),
                "files": tuple(FilePin.from_protocol(f) for f in section["files"])}

    @classmethod
    def from_protocol(cls, section: dict[str, Any]) -> RepoPin:
        return cls(**cls._repo_fields(section))


@dataclass(frozen=True)
class DatasetPin(RepoPin):
    """`resources.dataset`: a pinned repository whose rows, typed columns and label names the
    protocol states (how the files are read is Protocol.dataset, a DatasetSpec)."""

    rows: int
    columns: tuple[tuple[str, str], ...]  # (name, type) in the protocol's order
    labels: tuple[str, ...]

    @classmethod
    def from_protocol(cls, section: dict[str, Any]) -> DatasetPin:
        return cls(**cls._repo_fields(section), rows=int(section["rows"]),
                   columns=tuple((str(k), str(v)) for k, v in section["columns"].items()),
                   labels=tuple(str(label) for label in section["labels"]))

    def shape(self) -> dict[str, Any]:
        """rows, columns and labels as the JSON documents write them (job.dataset.load_rows reads it)."""
        return {"rows": self.rows, "columns": dict(self.columns), "labels": list(self.labels)}


@dataclass(frozen=True)
class ResourcesSpec:
    """`resources`: the model and the dataset the protocol pins."""

    model: RepoPin
    dataset: DatasetPin

    @classmethod
    def from_protocol(cls, section: dict[str, Any]) -> ResourcesSpec:
        return cls(model=RepoPin.from_protocol(section["model"]), dataset=DatasetPin.from_protocol(section["dataset"]))

    def role(self, name: str) -> RepoPin:
        """The pin of "model" or "dataset"."""
        return self.model if name == "model" else self.dataset


@dataclass(frozen=True)
class InferenceSpec:
    """`inference`: how the model is run, every field as the protocol states it (job.runtime.Settings
    is what a run applies of it)."""

    device: str
    dtype: str
    torch_threads: int
    torch_interop_threads: int
    attn_implementation: str
    batch_size: int
    max_length: int
    truncation: bool
    padding: str
    eval_mode: bool
    seed: int
    deterministic_algorithms: bool
    batch_order: str
    linear_kernels: str = LINEAR_DEFAULT  # absent from protocols written before it: MKL's, as they ran

    @classmethod
    def from_protocol(cls, section: dict[str, Any]) -> InferenceSpec:
        return cls(device=str(section["device"]), dtype=str(section["dtype"]),
                   torch_threads=int(section["torch_threads"]),
                   torch_interop_threads=int(section["torch_interop_threads"]),
                   attn_implementation=str(section["attn_implementation"]),
                   batch_size=int(section["batch_size"]), max_length=int(section["max_length"]),
                   truncation=bool(section["truncation"]), padding=str(section["padding"]),
                   eval_mode=bool(section["eval_mode"]), seed=int(section["seed"]),
                   deterministic_algorithms=bool(section["deterministic_algorithms"]),
                   batch_order=str(section["batch_order"]),
                   linear_kernels=str(section.get("linear_kernels", LINEAR_DEFAULT)))


MIN_POOL_ROWS = {CALIBRATION: 1, AUDIT: 1}
"""The fewest rows a pool may hold (any other pool, e.g. explore, may be empty): the temperature is
fitted on the calibration pool and the evidence is the audit pool, so neither can be empty. One
rule for `init --pools`, a protocol's split and a sweep's pool_sizes."""


def pool_size_problem(name: str, size: int) -> str | None:
    """None when a pool `name` may hold `size` rows; otherwise what is wrong, as a clause naming the
    pool and why (the caller says which document and what to change)."""
    least = MIN_POOL_ROWS.get(name, 0)
    if size >= least:
        return None
    why = {CALIBRATION: "the temperature is fitted on it", AUDIT: "the audit figures are measured on it"}.get(
        name, "a pool cannot hold fewer than 0 rows")
    return f"{name} pool has {size} rows, but it needs at least {least} ({why})"


@dataclass(frozen=True)
class SplitSpec:
    """`split`: rows ordered by sha256(prefix + idx), cut into consecutive pools of these sizes."""

    prefix: str
    pools: tuple[tuple[str, int], ...]  # (name, size) in cutting order
    smoke_pool: str
    smoke_rows: int

    @classmethod
    def from_protocol(cls, section: dict[str, Any]) -> SplitSpec:
        pools = tuple((str(p["name"]), int(p["size"])) for p in section["pools"])
        names = [name for name, _ in pools]
        if len(set(names)) != len(names):
            raise JobError(f"The protocol's split lists the pools {names} with a repeat; name each pool once.")
        missing = [name for name in (CALIBRATION, AUDIT) if name not in names]
        if missing:
            raise JobError(f"The protocol's split has no {' or '.join(missing)} pool; add it to split.pools.")
        for name, rows in pools:
            problem = pool_size_problem(name, rows)
            if problem is not None:
                raise JobError(f"The protocol's {problem}; change split.pools.")
        smoke = section["smoke"]
        spec = cls(prefix=str(section["prefix"]), pools=pools, smoke_pool=str(smoke["pool"]),
                   smoke_rows=int(smoke["rows"]))
        size = dict(pools).get(spec.smoke_pool)
        if size is None or spec.smoke_rows > size:
            raise JobError(f"The protocol's smoke test wants {spec.smoke_rows} rows of the {spec.smoke_pool} pool, "
                           f"which has {size or 0}; lower split.smoke.rows or pick a listed pool.")
        return spec


@dataclass(frozen=True)
class FitSpec:
    """`fit`: `steps` bisection steps on beta = 1/T over T in [t_min, t_max], on the calibration pool."""

    t_min: float
    t_max: float
    steps: int

    @property
    def beta_min(self) -> float:
        return 1.0 / self.t_max

    @property
    def beta_max(self) -> float:
        return 1.0 / self.t_min

    @classmethod
    def from_protocol(cls, section: dict[str, Any]) -> FitSpec:
        if section["pool"] != CALIBRATION:
            raise JobError(f"The protocol fits the temperature on the {section['pool']} pool, but the job fits "
                           f"it only on the {CALIBRATION} pool; set fit.pool to {CALIBRATION!r}.")
        spec = cls(t_min=float(section["t_min"]), t_max=float(section["t_max"]), steps=int(section["steps"]))
        if not spec.t_min < spec.t_max:
            raise JobError(f"The protocol's fit interval [t_min, t_max] = [{spec.t_min}, {spec.t_max}] is "
                           "empty; t_min must be below t_max.")
        return spec


@dataclass(frozen=True)
class BootstrapSpec:
    """`bootstrap`: a paired percentile bootstrap of calibrated-minus-raw metrics over the audit pool."""

    resamples: int
    seed: int
    metrics: tuple[str, ...]
    level: float
    quantiles: tuple[float, float]

    @classmethod
    def from_protocol(cls, section: dict[str, Any]) -> BootstrapSpec:
        interval = section["interval"]
        lo, hi = (float(q) for q in interval["quantiles"])
        if not lo < hi:
            raise JobError(f"The protocol's bootstrap quantiles [{lo}, {hi}] are not increasing; list the "
                           "lower quantile first.")
        return cls(resamples=int(section["resamples"]), seed=int(section["seed"]),
                   metrics=tuple(str(m) for m in section["metrics"]), level=float(interval["level"]),
                   quantiles=(lo, hi))


@dataclass(frozen=True)
class StabilitySpec:
    """`stability`: the temperature refitted on the first m calibration rows, for each size m."""

    sizes: tuple[int, ...]

    @classmethod
    def from_protocol(cls, section: dict[str, Any]) -> StabilitySpec:
        return cls(sizes=tuple(int(m) for m in section["sizes"]))


@dataclass(frozen=True)
class Protocol:
    raw: bytes  # the exact bytes: their sha256 is the protocol's identity
    sha256: str
    doc: dict[str, Any]
    resources: ResourcesSpec
    split: SplitSpec
    inference: InferenceSpec
    fit: FitSpec
    bootstrap: BootstrapSpec | None  # None: the protocol pre-registers no bootstrap
    stability: StabilitySpec | None  # None: no calibration-size study
    dataset: DatasetSpec = field(default_factory=DatasetSpec)  # how the dataset's files are read
    label_map: LabelMap | None = None  # None: model output j is dataset label j, unchecked
    estimators: tuple[EstimatorSpec, ...] = ()  # metrics.estimators; () for a protocol without them

    @classmethod
    def from_bytes(cls, raw: bytes, doc: dict[str, Any]) -> Protocol:
        """The protocol whose exact bytes are `raw` and schema-valid parsed form is `doc`."""
        require_verifiable(doc)
        return cls(
            raw=raw, sha256=hashlib.sha256(raw).hexdigest(), doc=doc,
            resources=ResourcesSpec.from_protocol(doc["resources"]),
            split=SplitSpec.from_protocol(doc["split"]),
            inference=InferenceSpec.from_protocol(doc["inference"]),
            fit=FitSpec.from_protocol(doc["fit"]),
            bootstrap=BootstrapSpec.from_protocol(doc["bootstrap"]) if "bootstrap" in doc else None,
            stability=StabilitySpec.from_protocol(doc["stability"]) if "stability" in doc else None,
            dataset=DatasetSpec.from_protocol(doc["resources"]["dataset"]),
            label_map=(LabelMap.from_protocol(doc["label_map"], doc["resources"]["dataset"]["labels"])
                       if "label_map" in doc else None),
            estimators=parse_estimators(doc["metrics"].get("estimators", ()), "bootstrap" in doc),
        )

    @property
    def pool_sizes(self) -> list[tuple[str, int]]:
        return list(self.split.pools)

    @property
    def prefix(self) -> str:
        return self.split.prefix

    @property
    def threshold(self) -> float:
        return float(self.doc["metrics"]["threshold"]["value"])

    @property
    def logit_tolerance(self) -> tuple[float, str]:
        """(tolerance, where it comes from): the largest absolute logit difference a reproduction may
        find and still be `equivalent`; the protocol's `reproduction.logit_tolerance`, or the format's
        default (bundle.layout.DEFAULT_LOGIT_TOLERANCE) for a protocol that pre-registers none."""
        section = self.doc.get("reproduction")
        if section is None:
            return DEFAULT_LOGIT_TOLERANCE, "format default"
        return float(section["logit_tolerance"]), "protocol"


def require_verifiable(doc: dict[str, Any]) -> None:
    """Refuse a protocol whose bundle a verifier would not read: more rows, classes, fit steps or
    bootstrap draws than the format's limits (FORMAT.md, "Limits"; bundle.limits holds the numbers),
    found before any download or inference rather than after the run."""
    try:
        dimensions(doc)
    except ProtocolOutOfBounds as exc:
        raise ProtocolBeyondLimits(f"The protocol is beyond the format's limits ({exc}), so no verifier would "
                                   "read its bundle; change the protocol (bundle/FORMAT.md, \"Limits\").",
                                   reason=str(exc)) from exc


def load_protocol(path: Path = DEFAULT_PROTOCOL) -> Protocol:
    """Read, parse and schema-validate the protocol; its hash is fixed here, before inference."""
    raw, doc = read_checked(path, "protocol", "protocol", "--protocol", MAX_PROTOCOL_BYTES)
    return Protocol.from_bytes(raw, doc)
