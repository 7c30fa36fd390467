"""The pre-registered protocol (provenance.json): loaded, schema-checked and hashed before any work.

The sections the job acts on (split, fit, bootstrap, stability) are parsed once, here, into frozen
dataclasses; what the schema cannot express (t_min below t_max, the smoke pool among the pools, ...)
is checked here too, so that a protocol the job cannot follow is refused before any inference."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundle.layout import DEFAULT_LOGIT_TOLERANCE
from bundle.userfile import PROTOCOL_BYTES
from job.dataset import DatasetSpec
from job.errors import JobError
from job.labelmap import LabelMap
from job.user_documents import read_checked

DEFAULT_PROTOCOL = Path(__file__).resolve().parent.parent / "provenance.json"

CALIBRATION, AUDIT = "calibration", "audit"
"""The pools the run needs: the temperature is fitted on CALIBRATION, the evidence is AUDIT."""


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
    split: SplitSpec
    fit: FitSpec
    bootstrap: BootstrapSpec | None  # None: the protocol pre-registers no bootstrap
    stability: StabilitySpec | None  # None: no calibration-size study
    dataset: DatasetSpec = field(default_factory=DatasetSpec)  # how the dataset's files are read
    label_map: LabelMap | None = None  # None: model output j is dataset label j, unchecked

    @classmethod
    def from_bytes(cls, raw: bytes, doc: dict[str, Any]) -> Protocol:
        """The protocol whose exact bytes are `raw` and schema-valid parsed form is `doc`."""
        require_verifiable(doc)
        return cls(
            raw=raw, sha256=hashlib.sha256(raw).hexdigest(), doc=doc,
            split=SplitSpec.from_protocol(doc["split"]),
            fit=FitSpec.from_protocol(doc["fit"]),
            bootstrap=BootstrapSpec.from_protocol(doc["bootstrap"]) if "bootstrap" in doc else None,
            stability=StabilitySpec.from_protocol(doc["stability"]) if "stability" in doc else None,
            dataset=DatasetSpec.from_protocol(doc["resources"]["dataset"]),
            label_map=(LabelMap.from_protocol(doc["label_map"], doc["resources"]["dataset"]["labels"])
                       if "label_map" in doc else None),
        )

    @property
    def pool_sizes(self) -> list[tuple[str, int]]:
        return list(self.split.pools)

    @property
    def prefix(self) -> str:
        return self.split.prefix

    @property
    def inference(self) -> dict[str, Any]:
        return dict(self.doc["inference"])

    @property
    def threshold(self) -> float:
        return float(self.doc["metrics"]["threshold"]["value"])

    @property
    def resources(self) -> dict[str, Any]:
        return dict(self.doc["resources"])

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
    bootstrap draws than the format's limits (FORMAT.md, "Limits"; verify.limits holds the numbers),
    found before any download or inference rather than after the run."""
    from verify.limits import ProtocolOutOfBounds, dimensions

    try:
        dimensions(doc)
    except ProtocolOutOfBounds as exc:
        raise JobError(f"The protocol is beyond the format's limits ({exc}), so no verifier would read its "
                       "bundle; change the protocol (bundle/FORMAT.md, \"Limits\").") from exc


def load_protocol(path: Path = DEFAULT_PROTOCOL) -> Protocol:
    """Read, parse and schema-validate the protocol; its hash is fixed here, before inference."""
    raw, doc = read_checked(path, "protocol", "protocol", "--protocol", PROTOCOL_BYTES)
    return Protocol.from_bytes(raw, doc)
