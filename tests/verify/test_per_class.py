"""Per-class results and the label map that cannot look normal: a 4-class run whose data names its
classes in another order than the model (integer labels unchanged) is warned about by the run's
records and by the verifier, which also catches a signer who drops that warning or the per-class
results, and recomputes them on its own."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from job.perclass import max_assignment
from tests.cli import Ran, run_verify
from tests.synthetic import make_bundle, protocol_bytes
from tests.verify.tamper import copy_bag, edit_json, reseal
from verify.perclass import check_permutation, exhaustive_best
from verify.result import Failed

REPO = Path(__file__).resolve().parents[2]
RELABEL = [2, 0, 3, 1]
"""Label stored for a row the model gets as label y: the data's names in another order."""


def _four_class_protocol() -> bytes:
    doc = json.loads(protocol_bytes((8, 120, 160)))
    doc["resources"]["dataset"]["labels"] = ["world", "sports", "business", "science"]
    doc.pop("label_map", None)
    return json.dumps(doc, indent=2).encode() + b"\n"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ed25519PrivateKey, Path]:
    key = Ed25519PrivateKey.generate()
    pub = tmp_path_factory.mktemp("keys") / "pub.pem"
    pub.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    return key, pub


@pytest.fixture(scope="module")
def swapped(tmp_path_factory: pytest.TempPathFactory, keyed: tuple[Ed25519PrivateKey, Path]) -> Path:
    return make_bundle(tmp_path_factory.mktemp("swapped") / "bag", keyed[0], protocol=_four_class_protocol(),
                       relabel=RELABEL)


def _verify(bag: Path, pub: Path, *extra: str) -> Ran:
    return run_verify([str(bag), "--trusted-key", str(pub), *extra])


def test_a_shuffled_label_order_warns_loudly_and_names_the_permutation(swapped: Path,
                                                                       keyed: tuple[Ed25519PrivateKey, Path]) -> None:
    metrics = json.loads((swapped / "data" / "metrics.json").read_text())
    audit = metrics["per_class"]["audit"]
    # predicted class i is the data's label RELABEL[i]: the best relabelling is RELABEL itself
    assert audit["best_permutation"]["map"] == RELABEL
    assert audit["best_permutation"]["correct"] > 2 * sum(audit["correct"])
    named = [w for w in metrics["warnings"] if w.startswith("reading each predicted label through the permutation "
                                                           "0 -> 2, 1 -> 0, 2 -> 3, 3 -> 1 ")]
    assert len(named) == 1 and "the label map is probably wrong" in named[0]
    assert any(w.startswith("label ") and "almost never predicted right" in w for w in metrics["warnings"])
    report = (swapped / "data" / "report.md").read_text()
    assert "**WARNING: reading each predicted label through the permutation" in report
    assert "### Per class, audit pool" in report and "| 2 | business |" in report
    result = _verify(swapped, keyed[1])
    assert result.code == 0, result.out[-3000:]
    assert "PASS    metrics.per-class" in result.out
    assert "WARNING: reading each predicted label through the permutation 0 -> 2" in result.out


def test_a_signer_cannot_drop_the_warning(swapped: Path, keyed: tuple[Ed25519PrivateKey, Path],
                                          tmp_path: Path) -> None:
    bag = copy_bag(swapped, tmp_path / "bag")
    edit_json(bag, "data/metrics.json", lambda m: m.update(warnings=[w for w in m["warnings"]
                                                                   if not w.startswith("reading")]))
    reseal(bag, keyed[0])
    result = _verify(bag, keyed[1])
    assert result.code == 1
    assert "FAIL    metrics.warnings" in result.out


def test_a_signer_cannot_drop_the_per_class_results(swapped: Path, keyed: tuple[Ed25519PrivateKey, Path],
                                                    tmp_path: Path) -> None:
    bag = copy_bag(swapped, tmp_path / "bag")
    edit_json(bag, "data/metrics.json", lambda m: m.pop("per_class") and None)
    reseal(bag, keyed[0])
    result = _verify(bag, keyed[1])
    assert result.code == 1
    assert "FAIL    metrics.per-class" in result.out and "always writes per_class" in result.out


def test_a_forged_best_permutation_is_refused(swapped: Path, keyed: tuple[Ed25519PrivateKey, Path],
                                              tmp_path: Path) -> None:
    """The identity claimed as the best relabelling (so that no permutation warning is due)."""
    bag = copy_bag(swapped, tmp_path / "bag")

    def forge(m: dict) -> None:
        audit = m["per_class"]["audit"]
        audit["best_permutation"]["map"] = [0, 1, 2, 3]
        audit["best_permutation"]["correct"] = sum(audit["correct"])
        m["warnings"] = [w for w in m["warnings"] if not w.startswith("reading")]

    edit_json(bag, "data/metrics.json", forge)
    reseal(bag, keyed[0])
    result = _verify(bag, keyed[1])
    assert result.code == 1
    assert "FAIL    metrics.per-class" in result.out


def test_the_assignment_is_optimal_and_certified_against_every_permutation() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        k = int(rng.integers(2, 7))
        c = rng.integers(0, 8, (k, k))
        mapping, rows, cols = max_assignment(c.T)
        best = {"map": mapping, "correct": sum(int(c[mapping[i], i]) for i in range(k)),
                "certificate": {"rows": rows, "columns": cols}}
        assert check_permutation(c, best) == exhaustive_best(c)[1]
        brute = max(sum(int(c[p[i], i]) for i in range(k)) for p in itertools.permutations(range(k)))
        assert best["correct"] == brute


def test_a_certificate_that_does_not_bound_every_cell_is_refused() -> None:
    c = np.array([[1, 9], [9, 1]])
    with pytest.raises(Failed, match="certificate"):
        check_permutation(c, {"map": [0, 1], "correct": 2, "certificate": {"rows": [1, 0], "columns": [0, 1]}})


def test_a_tolerance_above_the_default_needs_the_readers_consent(keyed: tuple[Ed25519PrivateKey, Path],
                                                                 tmp_path: Path) -> None:
    doc = json.loads(protocol_bytes((8, 40, 40)))
    doc["reproduction"] = {"logit_tolerance": 0.01}
    bag = make_bundle(tmp_path / "bag", keyed[0], protocol=json.dumps(doc, indent=2).encode() + b"\n")
    refused = _verify(bag, keyed[1])
    assert refused.code == 1
    failed = [line for line in refused.out.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].split()[1] == "reproduction.tolerance"
    assert failed[0].endswith("the protocol pre-registers a logit tolerance of 0.01, 100 times the format default "
                              "0.0001, above the 0.0001 you accept; pass --max-tolerance 0.01 to accept it.")
    accepted = _verify(bag, keyed[1], "--max-tolerance", "0.01")
    assert accepted.code == 0, accepted.out[-3000:]
    assert "reproduction tolerance 0.01 per logit (the protocol's, 100 times the format default 0.0001)" \
        in accepted.out
    assert "an equivalent reproduction can move audit calibrated NLL by" in accepted.out
    report = (bag / "data" / "report.md").read_text()
    assert "within 0.01 of the stored one (the protocol's; the format's default is 0.0001)" in report


@pytest.mark.parametrize("version", [1, 2])
def test_the_golden_bundles_state_the_default_tolerance(version: int) -> None:
    golden = REPO / "tests" / "goldens" / f"bundle-v{version}"
    result = _verify(golden, REPO / "tests" / "goldens" / f"bundle-v{version}.pub.pem")
    assert result.code == 0
    assert "PASS    reproduction.tolerance" in result.out
    assert "reproduction tolerance 0.0001 per logit" in result.out


def test_a_greedy_permutation_undoes_a_large_shuffle() -> None:
    """For a bundle without per_class and K > 7 the verifier tries a greedy permutation; on a shuffled
    label map of a good model it finds the shuffle and warns."""
    from verify.perclass import class_warnings as derived
    from verify.perclass import greedy_permutation

    rng = np.random.default_rng(5)
    k, n = 12, 2400
    y = rng.integers(0, k, n)
    pred = np.where(rng.random(n) < 0.85, y, rng.integers(0, k, n))
    shuffle = rng.permutation(k)
    c = np.zeros((k, k), dtype=np.int64)
    np.add.at(c, (y, shuffle[pred]), 1)  # predicted class shuffle[p] is truly label p
    mapping = greedy_permutation(c)
    assert sorted(mapping) == list(range(k))
    assert all(mapping[shuffle[p]] == p for p in range(k))
    warned = derived(c, mapping, sum(int(c[mapping[i], i]) for i in range(k)))
    assert warned and warned[-1].startswith("reading each predicted label through the permutation")
