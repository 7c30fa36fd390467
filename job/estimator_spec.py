"""The pre-registered calibration estimators: the protocol's `metrics.estimators` list, parsed and
range-checked before any inference.

Each entry names one estimator and every parameter it needs (bins and binning scheme, bandwidth
rule, interval method and level), so that the protocol's sha256 fixes them before a logit exists.
The schema (schemas/protocol.schema.json) fixes each entry's shape and every parameter's range
(bins >= 2, bandwidth and eps in [0.001, 1], levels in (0, 1)), so an out-of-range parameter is
refused with one sentence naming its field before any work; what the schema cannot say (which
parameters each kind needs, ids unique) is checked here. A protocol without the list runs as
before: no estimator beyond the fixed metrics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from job.errors import JobError

NEEDS: dict[str, tuple[str, ...]] = {
    "binned": ("binning", "bins", "norm", "debias"),
    "ks": (),
    "smooth-ece": ("bandwidth", "eps", "refine", "mesh"),
    "bin-intervals": ("method", "level"),
}
"""The parameters each kind of estimator must state (the schema allows them on any entry)."""

DEFAULT_ESTIMATORS: tuple[dict[str, Any], ...] = (
    {"id": "ece-equal-mass", "kind": "binned", "confidence": "top-label", "binning": "equal-mass", "bins": 15,
     "norm": "l1", "debias": False, "interval": {"method": "paired-bootstrap", "level": 0.95}},
    # No interval for the classwise estimator: its bootstrap scores every class of every resample,
    # K times the work of a top-label one (minutes at K = 1000).
    {"id": "classwise-ece", "kind": "binned", "confidence": "classwise", "binning": "equal-width", "bins": 15,
     "norm": "l1", "debias": False},
    {"id": "debiased-l2", "kind": "binned", "confidence": "top-label", "binning": "equal-mass", "bins": 15,
     "norm": "l2", "debias": True, "interval": {"method": "paired-bootstrap", "level": 0.95}},
    {"id": "ks", "kind": "ks", "confidence": "top-label",
     "interval": {"method": "paired-bootstrap", "level": 0.95}},
    {"id": "smooth-ece", "kind": "smooth-ece", "confidence": "top-label", "bandwidth": "fixed-point",
     "eps": 0.001, "refine": 10, "mesh": 200},
    {"id": "bin-intervals", "kind": "bin-intervals", "method": "clopper-pearson", "level": 0.95},
)
"""What `job init` and the formal protocol pre-register (docs/GUIDE.md, "The estimators")."""


@dataclass(frozen=True)
class Interval:
    """A percentile interval of the paired bootstrap (the protocol's `bootstrap` resamples and
    seed) at `level`: quantiles (1 - level) / 2 and (1 + level) / 2, numpy's `linear` method."""

    level: float

    @property
    def quantiles(self) -> tuple[float, float]:
        return (1.0 - self.level) / 2.0, (1.0 + self.level) / 2.0


@dataclass(frozen=True)
class EstimatorSpec:
    """One entry of `metrics.estimators`. Fields a kind does not use keep their defaults."""

    id: str
    kind: str
    confidence: str = "top-label"
    binning: str = "equal-width"
    bins: int = 0
    norm: str = "l1"
    debias: bool = False
    bandwidth: float | None = None  # None: relplot's fixed-point search
    eps: float = 0.001
    refine: int = 10
    mesh: int = 200
    method: str = "clopper-pearson"  # bin-intervals: the interval of each bin's accuracy
    level: float = 0.95  # bin-intervals: its level
    interval: Interval | None = None

    @classmethod
    def from_protocol(cls, entry: dict[str, Any], index: int) -> EstimatorSpec:
        """The schema-valid entry, or JobError naming the first field its kind needs but lacks (the
        schema bounds every field's range, schemas/protocol.schema.json)."""
        kind = str(entry["kind"])
        missing = [name for name in NEEDS[kind] if name not in entry]
        if missing:
            raise JobError(f"The protocol's metrics.estimators[{index}] ({kind}) has no {missing[0]}; add it "
                           f"(a {kind} estimator needs {', '.join(NEEDS[kind])}).")
        if entry.get("debias") and entry.get("norm") != "l2":
            raise JobError(f"The protocol's metrics.estimators[{index}].debias is true with norm "
                           f"{entry.get('norm')!r}; the debiased estimator is the L2 one, so set norm to \"l2\".")
        fields = {name: entry[name] for name in NEEDS[kind]}
        if fields.get("bandwidth") == "fixed-point":
            fields["bandwidth"] = None
        interval = entry.get("interval")
        return cls(id=str(entry["id"]), kind=kind, confidence=str(entry.get("confidence", "top-label")),
                   interval=None if interval is None else Interval(level=float(interval["level"])), **fields)


def parse_estimators(entries: Sequence[dict[str, Any]], has_bootstrap: bool) -> tuple[EstimatorSpec, ...]:
    """Every entry of `metrics.estimators`, ids unique, and a bootstrap section wherever an entry
    asks for a bootstrap interval."""
    specs = tuple(EstimatorSpec.from_protocol(e, i) for i, e in enumerate(entries))
    ids = [s.id for s in specs]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise JobError(f"The protocol's metrics.estimators repeat the id {repeated[0]!r}; give each estimator "
                       "its own id.")
    if not has_bootstrap and any(s.interval is not None for s in specs):
        first = next(s for s in specs if s.interval is not None)
        raise JobError(f"The protocol's estimator {first.id!r} asks for a paired-bootstrap interval but the "
                       "protocol has no bootstrap section; add one or drop the interval.")
    return specs
