"""Every pre-registered estimator against the reference implementation of its definition.

The references are development-only packages pinned in requirements-dev.lock (never a dependency
of the job or the verifier): `uncertainty-calibration` (Kumar, Liang & Ma 2019) for the binned
plug-in, classwise and debiased estimators, `relplot` (Blasiok & Nakkiran 2024) for smooth ECE and
its bandwidth, scipy for Clopper-Pearson, torchmetrics and netcal for the protocol's 10-bin ECE
and MCE (and torchmetrics' separate bin for a confidence of exactly 1.0), scikit-learn's
temperature scaling for the fitted temperature. Both the job's (job.estimators) and the
verifier's (verify.estimators) code are compared, on the stand-in's audit logits (when
../shared/fixtures is present), K = 3 and K = 1000 sets and edge sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from job import estimators as job_est
from job.calibration import fit_temperature, softmax
from job.estimator_spec import DEFAULT_ESTIMATORS, parse_estimators
from job.metrics import compute_metrics
from verify import estimators as ver_est


# The reference libraries are imported by the tests that use them, not at collection: importing
# uncertainty-calibration loads scikit-learn (about 1.2 s) in every process that collects the suite.
@pytest.fixture(scope="module")
def calibration() -> Any:
    return pytest.importorskip("calibration")  # uncertainty-calibration


@pytest.fixture(scope="module")
def relplot() -> Any:
    return pytest.importorskip("relplot")


@pytest.fixture(scope="module")
def scipy_stats() -> Any:
    return pytest.importorskip("scipy.stats")

ROOT = Path(__file__).resolve().parents[2]
SPECS = {s.id: s for s in parse_estimators(DEFAULT_ESTIMATORS, True)}
ENTRIES = {e["id"]: json.loads(json.dumps(e)) for e in DEFAULT_ESTIMATORS}
EXACT = 1e-12


def standin_audit() -> tuple[np.ndarray, np.ndarray] | None:
    """The stand-in golden's audit logits with their SST-2 labels (None without the fixtures)."""
    data = ROOT.parent / "shared" / "fixtures" / "sst2" / "validation-00000-of-00001.parquet"
    if not data.is_file():
        return None
    import pyarrow.parquet as pq

    table = pq.ParquetFile(data).read(columns=["idx", "label"]).to_pydict()  # no pyarrow.dataset at collection
    label = dict(zip(table["idx"], table["label"]))
    rows = json.loads((ROOT / "tests" / "goldens" / "standin.json").read_text())["rows"]["audit"]
    z = np.array([[r[2], r[3]] for r in rows], dtype=np.float32).astype(np.float64)
    return z, np.array([label[r[0]] for r in rows], dtype=np.int64)


def synthetic(k: int, n: int, seed: int, scale: float = 2.5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, k)) * scale
    y = np.where(rng.random(n) < 0.6, z.argmax(axis=1), rng.integers(0, k, n))
    return z.astype(np.float32).astype(np.float64), y.astype(np.int64)


def pools() -> list[tuple[str, np.ndarray, np.ndarray]]:
    out = [("k3", *synthetic(3, 600, 1)), ("k1000", *synthetic(1000, 1500, 2, scale=4.0)),
           ("k2-sharp", *synthetic(2, 360, 3, scale=9.0))]
    standin = standin_audit()
    if standin is not None:
        out.insert(0, ("standin", *standin))
    return out


POOLS = pools()


def top_label(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pred = p.argmax(axis=1)
    return pred, p[np.arange(len(y)), pred], (pred == y).astype(np.float64)


@pytest.mark.parametrize("name,z,y", POOLS, ids=[p[0] for p in POOLS])
@pytest.mark.parametrize("beta", [1.0, 0.6])
def test_binned_estimators_equal_uncertainty_calibration(name, z, y, beta, calibration):
    p = softmax(beta * z)
    pred = z.argmax(axis=1)
    references = {
        "ece-equal-mass": calibration.get_ece_em(p, y, num_bins=15),
        "debiased-l2": calibration.lower_bound_scaling_ce(p, y, p=2, debias=True, num_bins=15, mode="top-label"),
    }
    if p.shape[1] <= 3:  # Kumar's marginal mode bins every class in pure Python: K = 1000 takes minutes
        references["classwise-ece"] = calibration.lower_bound_scaling_ce(
            p, y, p=1, debias=False, num_bins=15, binning_scheme=calibration.get_equal_prob_bins, mode="marginal")
    for key, reference in references.items():
        assert job_est.binned(SPECS[key], p, y, pred) == pytest.approx(reference, abs=EXACT, rel=0), key
        assert ver_est.binned(ENTRIES[key], p, y, pred) == pytest.approx(reference, abs=EXACT, rel=0), key


@pytest.mark.parametrize("name,z,y", POOLS[:-2] + POOLS[-1:], ids=[p[0] for p in POOLS[:-2] + POOLS[-1:]])
@pytest.mark.parametrize("beta", [1.0, 0.6])
def test_smooth_ece_and_its_bandwidth_equal_relplot(name, z, y, beta, relplot):
    _, conf, correct = top_label(softmax(beta * z), y)
    value, sigma = relplot.smECE(conf, correct, return_width=True)
    assert job_est.smooth_ece(SPECS["smooth-ece"], conf, correct) == pytest.approx((value, sigma), abs=EXACT, rel=0)
    assert ver_est.smooth_ece(ENTRIES["smooth-ece"], conf, correct) == pytest.approx((value, sigma), abs=EXACT,
                                                                                        rel=0)
    fixed = relplot.smECE_sigma(conf, correct, 0.05)
    assert job_est.smooth_ece_at(conf, correct, 0.05, 200) == pytest.approx(fixed, abs=EXACT, rel=0)
    assert ver_est.smooth_ece_at(conf, correct, 0.05, 200) == pytest.approx(fixed, abs=EXACT, rel=0)


@pytest.mark.parametrize("k,n", [(0, 1), (1, 1), (0, 20), (20, 20), (9, 20), (1, 360), (359, 360), (180, 360),
                                 (3, 7), (1234, 5000)])
@pytest.mark.parametrize("level", [0.95, 0.9, 0.5])
def test_clopper_pearson_equals_scipy_beta_quantiles(k, n, level, scipy_stats):
    alpha = 1 - level
    lower = 0.0 if k == 0 else scipy_stats.beta.ppf(alpha / 2, k, n - k + 1)
    upper = 1.0 if k == n else scipy_stats.beta.ppf(1 - alpha / 2, k + 1, n - k)
    assert job_est.clopper_pearson(k, n, level) == pytest.approx((lower, upper), abs=EXACT, rel=0)
    assert ver_est.clopper_pearson(k, n, level) == pytest.approx((lower, upper), abs=EXACT, rel=0)
    ci = scipy_stats.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    assert (ci.low, ci.high) == pytest.approx((lower, upper), abs=EXACT, rel=0)


@pytest.mark.parametrize("name,z,y", POOLS, ids=[p[0] for p in POOLS])
def test_ks_is_the_largest_gap_of_the_cumulative_curves(name, z, y):
    """No listed library ships the KS calibration error; its definition, by brute force over every
    threshold, is the reference."""
    _, conf, correct = top_label(softmax(z), y)
    brute = max(abs(np.sum((correct - conf)[conf <= t])) / len(conf) for t in np.unique(conf))
    assert job_est.ks_error(conf, correct) == pytest.approx(brute, abs=EXACT, rel=0)
    assert ver_est.ks(conf, correct) == pytest.approx(brute, abs=EXACT, rel=0)


# ---- edge sets ---------------------------------------------------------------------------------

def edge_sets() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Probabilities (K = 2) and labels: confidences at a bin edge, exactly 1.0, empty bins, bins
    all right and all wrong."""
    at_edges = np.array([0.6, 0.6, 0.8, 0.8, 0.7, 0.7, 0.9, 0.9, 0.6, 0.8])  # b/15 and k/10 edges
    p_edges = np.stack([at_edges, 1 - at_edges], axis=1)
    ones = np.array([1.0, 1.0, 1.0, 0.95, 0.97, 0.55, 0.65, 0.99, 1.0, 0.52])
    p_ones = np.stack([ones, 1 - ones], axis=1)
    return {
        "ties-at-bin-edges": (p_edges, np.array([0, 1, 0, 0, 1, 0, 0, 0, 1, 1])),
        "confidence-exactly-one": (p_ones, np.array([0, 0, 1, 0, 0, 1, 0, 0, 0, 1])),
        "all-correct": (p_ones, np.zeros(10, dtype=np.int64)),
        "all-wrong": (p_ones, np.ones(10, dtype=np.int64)),
    }


EDGES = edge_sets()


@pytest.mark.parametrize("name", sorted(EDGES))
def test_edge_sets_agree_with_the_references(name, calibration, relplot):
    p, y = EDGES[name]
    pred, conf, correct = top_label(p, y)
    for key, reference in {
        "ece-equal-mass": calibration.get_ece_em(p, y, num_bins=15),
        "debiased-l2": calibration.lower_bound_scaling_ce(p, y, p=2, debias=True, num_bins=15, mode="top-label"),
        "classwise-ece": calibration.lower_bound_scaling_ce(
            p, y, p=1, debias=False, num_bins=15, binning_scheme=calibration.get_equal_prob_bins, mode="marginal"),
    }.items():
        assert job_est.binned(SPECS[key], p, y, pred) == pytest.approx(reference, abs=EXACT, rel=0), key
        assert ver_est.binned(ENTRIES[key], p, y, pred) == pytest.approx(reference, abs=EXACT, rel=0), key
    value, sigma = relplot.smECE(conf, correct, return_width=True)
    assert job_est.smooth_ece(SPECS["smooth-ece"], conf, correct) == pytest.approx((value, sigma), abs=EXACT, rel=0)
    assert ver_est.smooth_ece(ENTRIES["smooth-ece"], conf, correct) == pytest.approx((value, sigma), abs=EXACT,
                                                                                        rel=0)


def test_an_all_correct_bin_has_a_one_sided_interval_where_the_bootstrap_has_none(scipy_stats):
    """The reason for Clopper-Pearson whiskers: 10 rows all right give [0.692, 1], not [1, 1]."""
    p, y = EDGES["all-correct"]
    _, conf, correct = top_label(p, y)
    bins = job_est.bin_intervals(conf, correct, 0.95)
    full = [b for b in bins if b["count"] and b["correct"] == b["count"]]
    assert full and all(b["upper"] == 1.0 and b["lower"] < 1.0 for b in full)
    assert bins[9]["lower"] == pytest.approx(scipy_stats.beta.ppf(0.025, bins[9]["count"], 1), abs=EXACT)


def test_the_debiased_estimate_is_null_with_a_reason_when_no_bin_holds_two_rows():
    p = np.array([[0.9, 0.1]])
    record = job_est.estimator_results((SPECS["debiased-l2"],), np.log(p), np.array([0]), 1.0, 20, 1)
    assert record["debiased-l2"]["raw"] == {"value": None, "reason": job_est.NULL_REASON, "interval": None}
    assert record["debiased-l2"]["difference"]["verdict"] == "no claim"
    assert record["debiased-l2"]["difference"]["reason"]
    assert ver_est.binned(ENTRIES["debiased-l2"], p, np.array([0]), np.array([0])) is None


# ---- torchmetrics: the protocol's 10-bin ECE, and its 1.0 bin ------------------------------------

def test_torchmetrics_binning_equals_the_protocol_ece_and_mce_except_for_a_confidence_of_one():
    """torchmetrics' `_ce_compute` (its binning and norms, fed float64) is the protocol's 10-bin
    ECE and MCE to 1e-12; its public function first casts confidences to float32, so it agrees to
    float32 precision only; a confidence of exactly 1.0 goes to a bin of its own."""
    torch = pytest.importorskip("torch")
    tm = pytest.importorskip("torchmetrics.functional.classification.calibration_error")
    public = pytest.importorskip("torchmetrics.functional.classification")
    for name, z, y in POOLS[:2]:
        m = compute_metrics(z, y, 1.0, 0.9)
        _, conf, correct = top_label(softmax(z), y)
        c, a = torch.from_numpy(conf), torch.from_numpy(correct)
        assert float(tm._ce_compute(c, a, 10, norm="l1")) == pytest.approx(m["ece"], abs=EXACT, rel=0), name
        assert float(tm._ce_compute(c, a, 10, norm="max")) == pytest.approx(m["mce"], abs=EXACT, rel=0), name
        float32 = float(public.multiclass_calibration_error(torch.from_numpy(softmax(z)), torch.from_numpy(y),
                                                           z.shape[1], n_bins=10, norm="l1"))
        assert float32 == pytest.approx(m["ece"], abs=1e-6), name
    # Rows at confidence exactly 1.0: the protocol's last bin is [0.9, 1.0] and holds them;
    # torchmetrics bucketizes them into an eleventh bin of their own.
    p, y = EDGES["confidence-exactly-one"]
    with np.errstate(divide="ignore"):  # probabilities of exactly 0 are logits of -inf
        ours = compute_metrics(np.log(p), y, 1.0, 0.9)["ece"]
    _, conf, correct = top_label(p, y)
    theirs = float(tm._ce_compute(torch.from_numpy(conf), torch.from_numpy(correct), 10, norm="l1"))
    assert abs(ours - theirs) > 1e-3
    split = np.minimum(np.floor(conf * 10).astype(int), 10)  # torchmetrics' bins: [k/10, (k+1)/10) and {1.0}
    by_hand = sum(abs(correct[split == b].mean() - conf[split == b].mean()) * (split == b).sum()
                  for b in np.unique(split)) / len(y)
    assert theirs == pytest.approx(by_hand, abs=EXACT, rel=0)


# ---- netcal: the protocol's 10-bin ECE and MCE ---------------------------------------------------

@pytest.mark.parametrize("name", [p[0] for p in POOLS] + sorted(EDGES))
def test_netcal_ece_and_mce_equal_the_protocols(name):
    """netcal's histogram bins are the protocol's (left-closed, the last holding 1.0). For K > 2
    it scores the top label itself; given K = 2 it scores class 1's probability instead, so the
    top-label confidence and correctness are passed as a binary problem. netcal is given the
    probabilities the protocol scores, softmax(log p), not p: numpy's log and exp round by the
    CPU's instruction set (on an AVX2-only AMD EPYC, 0.9 comes back as 0.8999999999999999 and
    falls in the bin below, while 0.6, 0.7 and 0.8 stay on their edges; p itself passed on AVX-512
    machines), so both see the same confidences at and beside the edges."""
    netcal = pytest.importorskip("netcal.metrics")
    if name in EDGES:
        p, y = EDGES[name]
        with np.errstate(divide="ignore"):  # probabilities of exactly 0 are logits of -inf
            z = np.log(p)
    else:
        z, y = next((pz, py) for n, pz, py in POOLS if n == name)
    p = softmax(z)
    m = compute_metrics(z, y, 1.0, 0.9)
    _, conf, correct = top_label(p, y)
    x, target = (p, y) if p.shape[1] > 2 else (conf, correct.astype(np.int64))
    assert netcal.ECE(bins=10).measure(x, target) == pytest.approx(m["ece"], abs=EXACT, rel=0)
    assert netcal.MCE(bins=10).measure(x, target) == pytest.approx(m["mce"], abs=EXACT, rel=0)


# ---- scikit-learn's temperature scaling ----------------------------------------------------------

def test_the_fitted_temperature_equals_scikit_learns_temperature_method():
    sklearn = pytest.importorskip("sklearn")
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    assert tuple(int(x) for x in sklearn.__version__.split(".")[:2]) >= (1, 8)

    class Logits(ClassifierMixin, BaseEstimator):
        """A fitted classifier whose decision function is its input: the stored logits."""

        def fit(self, x, y):
            self.classes_ = np.arange(x.shape[1])
            return self

        def decision_function(self, x):
            # scikit-learn reads a binary decision function d as the logits (-d, d): the same softmax
            # as (z_0, z_1) for d = (z_1 - z_0) / 2.
            return (x[:, 1] - x[:, 0]) / 2 if x.shape[1] == 2 else x

        def predict(self, x):
            return x.argmax(axis=1)

    for name, z, y in POOLS[:2]:
        ours = fit_temperature(z, y, 0.05, 20.0, 100).beta
        model = CalibratedClassifierCV(FrozenEstimator(Logits().fit(z, y)), method="temperature").fit(z, y)
        theirs = float(model.calibrated_classifiers_[0].calibrators[0].beta_)
        assert ours == pytest.approx(theirs, rel=1e-6), name
