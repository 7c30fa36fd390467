"""The browser verifier (web/) in Debian's chromium, headless, against the Python verifier.

For every bundle (the goldens, a fresh tiny-world bundle and its archive, a K=3 bundle, a fresh
stand-in bundle and its archive where ../shared/fixtures is present, a 50,000-row bundle of the job,
every tamper class and hostile bundle or archive of the Python suite's generators), every check the page
performs gives the Python verifier's status, the page lists no check Python does not run, and
what it cannot read at all Python cannot either. Every figure the page recomputes agrees with
Python's to 1e-12. No request leaves the page (each is intercepted and refused, and counted) and
no CSP violation occurs. Screenshots of a VERIFIED and a REJECTED bundle go to out/.

Without chromium, node or web/node_modules (`make web`) these tests skip, except where CI=true,
where they fail: CI installs all three (.ci/run)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout
from bundle.canonical import dumps
from bundle.keys import fingerprint, public_key_pem
from job.publishing.archive import archive
from tests.factory import SHARED_FIXTURES
from tests.synthetic import make_bundle
from tests.verify.tamper import HOSTILE, Keys, copy_bag, reseal, synthetic_bag, verify_keys  # noqa: F401
from tests.verify.test_tamper import TAMPERS, VIEW_LIES
from verify import estimators, numerics
from verify.api import Outcome, verify_path
from verify.context import Trust
from verify.predictions import read_pool
from verify.result import InputError
from verify.tolerance import figure_bounds, temperature_range

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "web"
PAGE = WEB / "dist" / "verify.html"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
GOLDENS = REPO / "tests" / "goldens"
SHOTS = REPO / "out"
FIGURE_TOL = 1e-12
BROWSER_BLIND = {"symlink-in-data"}
"""Tamper classes a browser cannot see in a chosen folder: it follows a symbolic link and hands the
page the target's bytes (web/README.md, "What a browser cannot see"); the page then says VERIFIED of
no folder (test_a_folder_with_a_symbolic_link_is_never_verified_on_the_page). Their archive forms hold
no links: `job archive` refuses them, and the page refuses a link member (hostile archives)."""


def _missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not CHROMIUM.is_file():
        return f"{CHROMIUM} is absent (apt-get install -y chromium)"
    if shutil.which("node") is None:
        return "node is absent"
    if not (WEB / "node_modules" / "puppeteer-core").is_dir():
        return "web/node_modules is absent (make web)"
    return None


@pytest.fixture(scope="module")
def browser_ready() -> None:
    why = _missing()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser tests must run in CI: {why}")
        pytest.skip(why)


def _pem(key: Ed25519PrivateKey) -> str:
    return public_key_pem(key).decode()


@dataclass
class Case:
    """One run of the page and of the Python verifier on the same input under the same trust."""

    name: str
    path: Path
    key: Ed25519PrivateKey | None = None
    pem_file: Path | None = None
    fingerprint: str | None = None
    probe: bool = False

    @property
    def kind(self) -> str:
        return "archive" if self.path.is_file() else "folder"

    def trust(self) -> Trust:
        if self.key is not None:
            return Trust(key=self.key.public_key(), source="key")
        if self.pem_file is not None:
            from verify.signature import load_trusted_key

            return Trust(key=load_trusted_key(str(self.pem_file)), source=str(self.pem_file))
        if self.fingerprint is not None:
            return Trust(fingerprint=self.fingerprint, source="--trusted-fingerprint")
        return Trust()

    def job(self) -> dict[str, Any]:
        pem = _pem(self.key) if self.key is not None else (
            self.pem_file.read_text() if self.pem_file is not None else None)
        return {"name": self.name, "kind": self.kind, "path": str(self.path), "key": pem,
                "fingerprint": self.fingerprint, "probe": self.probe}


def run_page(cases: list[Case], tmp: Path, screenshots: dict[str, Path] | None = None,
             timeout: int = 900) -> dict[str, dict[str, Any]]:
    """name -> what the page found ({result, requests, violations, errors, wall})."""
    job = {"chromium": str(CHROMIUM), "userDataDir": str(tmp / "profile"),
           "screenshots": {k: str(v) for k, v in (screenshots or {}).items()},
           "cases": [c.job() for c in cases]}
    (tmp / "job.json").write_text(json.dumps(job))
    done = subprocess.run(["node", str(WEB / "test" / "drive.mjs"), str(tmp / "job.json"), str(tmp / "out.jsonl")],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    found = {f["name"]: f for f in map(json.loads, (tmp / "out.jsonl").read_text().splitlines())}
    assert found.pop("__control__")["requests"] == ["http://127.0.0.1:9/control"], "the interception sees requests"
    return found


def run_python(case: Case) -> Outcome | str:
    """The Python verifier's outcome, or the sentence it stops with (exit 2)."""
    try:
        return verify_path(case.path, case.trust())
    except InputError as exc:
        return str(exc)


def compare(case: Case, page: dict[str, Any], python: Outcome | str) -> list[str]:
    """Every disagreement between the page and the Python verifier on one case, in words."""
    assert page["requests"] == [], (case.name, page["requests"])
    assert page["violations"] == [], (case.name, page["violations"])
    assert page["errors"] == [], (case.name, page["errors"])
    result = page["result"]
    if isinstance(python, str):
        return [] if "error" in result else [f"{case.name}: Python cannot read it ({python}), the page says "
                                             + str(result.get("verdict"))]
    if "error" in result:
        return [f"{case.name}: the page cannot read it ({result['error']}), Python says exit {python.exit_code}"]
    theirs = {c.id: c for c in python.checks}
    problems = []
    for check in result["checks"]:
        ours, cid = check["status"], check["id"]
        if cid not in theirs:
            problems.append(f"{case.name}: the page lists {cid}, which Python does not run")
            continue
        if check["title"] != theirs[cid].title:
            problems.append(f"{case.name}: {cid} title {check['title']!r}, Python's {theirs[cid].title!r}")
        if ours != "not-checked" and ours != theirs[cid].status:
            problems.append(f"{case.name}: {cid} is {ours} on the page ({check['detail'][:120]}), "
                            f"{theirs[cid].status} in Python ({theirs[cid].detail[:120]})")
    listed = {c["id"] for c in result["checks"]}
    problems += [f"{case.name}: Python runs {cid}, the page does not list it" for cid in theirs if cid not in listed]
    # The page rejects exactly what Python rejects by a check the page performs; otherwise it says how far
    # it got ("verified-here"), never Python's verdict for checks it did not perform.
    verdict = {0: "verified", 3: "intact-signer-unknown"}.get(python.exit_code, "failed")
    caught = any(c["status"] == "fail" for c in result["checks"])
    partial = any(c["status"] == "not-checked" for c in result["checks"])
    if caught:
        expected = "failed"
    elif verdict == "failed":
        expected = "verified-here" if all(theirs[c["id"]].status == "pass" or c["status"] == "not-checked"
                                          for c in result["checks"] if c["id"] in theirs) else "failed"
        expected = "intact-signer-unknown-here" if case.trust() == Trust() and expected != "failed" else expected
    else:
        # a folder is never VERIFIED: the browser hides its symbolic links from the page
        expected = f"{verdict}-here" if partial or case.kind == "folder" else verdict
    if result["verdict"] != expected:
        problems.append(f"{case.name}: the page says {result['verdict']}, expected {expected} (Python: {verdict})")
    return problems


# -- the bundles --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def keys(verify_keys: Keys) -> Keys:  # noqa: F811
    return verify_keys


@pytest.fixture(scope="module")
def synthetic(synthetic_bag: Path) -> Path:  # noqa: F811
    """The tamper suite's synthetic bundle, signed by keys.real (read-only: cases copy it)."""
    return synthetic_bag


def _k3_protocol() -> bytes:
    doc = json.loads((REPO / "provenance.json").read_bytes())
    for pool, size in zip(doc["split"]["pools"], (8, 40, 40), strict=True):
        pool["size"] = size
    doc["resources"]["dataset"]["rows"] = 88
    doc["resources"]["dataset"]["labels"] = ["negative", "neutral", "positive"]
    return (json.dumps(doc, indent=2) + "\n").encode()


def _golden_cases(tmp: Path) -> Iterator[Case]:
    for name in ("bundle-v1", "bundle-v2"):
        pem = GOLDENS / f"{name}.pub.pem"
        yield Case(f"golden-{name}", GOLDENS / name, pem_file=pem)
        yield Case(f"golden-{name}.tar.gz", archive(GOLDENS / name, tmp / f"{name}.tar.gz"), pem_file=pem)


def test_the_page_agrees_with_python_on_genuine_bundles(browser_ready: None, tmp_path: Path, keys: Keys,
                                                         synthetic: Path) -> None:
    k3 = make_bundle(tmp_path / "k3" / "bag", keys.real, protocol=_k3_protocol())
    cases = [*_golden_cases(tmp_path),
             Case("synthetic", synthetic, key=keys.real),
             Case("synthetic.tar.gz", archive(synthetic, tmp_path / "synthetic.tar.gz"), key=keys.real),
             Case("k3", k3, key=keys.real),
             Case("no-trusted-key", synthetic),
             Case("fingerprint", synthetic, fingerprint=fingerprint(keys.real)),
             Case("other-key-trusted", synthetic, key=keys.other)]
    not_a_key = tmp_path / "not-a-key.pem"
    not_a_key.write_text("-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n")
    cases.append(Case("unusable-trusted-key", synthetic, pem_file=not_a_key))
    probe = Case("probe", synthetic, key=keys.real, probe=True)
    SHOTS.mkdir(exist_ok=True)
    pages = run_page([*cases, probe], tmp_path, {"golden-bundle-v2.tar.gz": SHOTS / "web-verified.png",
                                                 "other-key-trusted": SHOTS / "web-rejected.png"})
    # A fetch, an image and a WebSocket tried from inside the page, and a fetch from a worker started as
    # the page starts its own: the CSP stops each, none is sent.
    assert pages["probe"]["requests"] == []
    blocked = {v.split()[0] for v in pages["probe"]["violations"]}
    assert blocked == {"connect-src", "img-src", "worker:connect-src"}, pages["probe"]["violations"]
    assert "worker:connect-src http://127.0.0.1:9/probe-worker" in pages["probe"]["violations"]
    problems = [p for c in cases for p in compare(c, pages[c.name], run_python(c))]
    assert problems == [], "\n".join(problems)
    assert pages["golden-bundle-v2.tar.gz"]["result"]["verdict"] == "verified-here"
    assert pages["no-trusted-key"]["result"]["verdict"] == "intact-signer-unknown-here"
    assert pages["other-key-trusted"]["result"]["verdict"] == "failed"
    assert "not an Ed25519 public key" in pages["unusable-trusted-key"]["result"]["error"]
    for c in cases:
        if pages[c.name]["result"].get("verdict") == "verified-here":
            _figures_agree(c, pages[c.name]["result"]["figures"])
    assert (SHOTS / "web-verified.png").stat().st_size > 10_000


def test_the_page_agrees_with_python_on_a_fresh_job_bundle(browser_ready: None, tmp_path: Path,
                                                           tiny_bundle: Path, signing_key_dir: Path) -> None:
    pem = signing_key_dir / "signing-key.pub.pem"
    cases = [Case("tiny", tiny_bundle, pem_file=pem),
             Case("tiny.tar.gz", archive(tiny_bundle, tmp_path / "tiny.tar.gz"), pem_file=pem)]
    pages = run_page(cases, tmp_path)
    assert [p for c in cases for p in compare(c, pages[c.name], run_python(c))] == []
    for c in cases:
        assert pages[c.name]["result"]["verdict"] == "verified-here"
        _figures_agree(c, pages[c.name]["result"]["figures"])


def _job_run(out: Path, *args: str) -> tuple[Path, Path]:
    """(bundle, its signer's public key) of `python -m job run ARGS` with a fresh ephemeral key."""
    done = subprocess.run([sys.executable, "-m", "job", "run", *args, "--out", str(out), "--ephemeral-key",
                           "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=3600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out, out.parent / f"{out.name}.key" / "signing-key.pub.pem"


def _agree_on(bundle: Path, pem: Path, tmp: Path, name: str) -> dict[str, dict[str, Any]]:
    """The page on the bundle folder and its archive agrees with Python, check by check and figure by figure."""
    cases = [Case(name, bundle, pem_file=pem), Case(f"{name}.tar.gz", archive(bundle, tmp / f"{name}.tar.gz"),
                                                    pem_file=pem)]
    pages = run_page(cases, tmp)
    assert [p for c in cases for p in compare(c, pages[c.name], run_python(c))] == []
    for c in cases:
        assert pages[c.name]["result"]["verdict"] == "verified-here", pages[c.name]["result"].get("verdict")
        _figures_agree(c, pages[c.name]["result"]["figures"])
    return pages


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_FIXTURES.is_dir(), reason="../shared/fixtures is absent")
def test_the_page_agrees_with_python_on_a_fresh_standin_bundle(browser_ready: None, tmp_path: Path) -> None:
    """The job on SST-2 validation and the stand-in classifier: 872 rows, bootstrap, stability, estimators
    (slow: a whole stand-in run; the fast suite has the goldens, written by such runs, and a fresh tiny-world
    bundle of this tree)."""
    bundle, pem = _job_run(tmp_path / "standin", "--resources", str(REPO / "job" / "locks" / "standin.json"))
    _agree_on(bundle, pem, tmp_path, "standin")


@pytest.mark.slow
def test_the_page_agrees_with_python_on_a_50000_row_job_bundle(browser_ready: None, tmp_path: Path) -> None:
    """The job on 50,000 generated rows and a generated DistilBERT (scripts/generated_split.py, as
    scripts/bench_large.py makes them): pools 256, 256 and 49,488 rows."""
    from scripts.generated_split import make_data, make_lock, make_model, make_protocol

    rows = 50_000
    model = make_model(tmp_path / "model")
    data = make_data(tmp_path / "data" / "validation.parquet", rows)
    protocol = make_protocol(tmp_path / "protocol.json", rows)
    lock = make_lock(tmp_path / "lock.json", model, data, rows, ["negative", "positive"])
    bundle, pem = _job_run(tmp_path / "large", "--protocol", str(protocol), "--resources", str(lock))
    _agree_on(bundle, pem, tmp_path, "large")


def _figures_agree(case: Case, figures: dict[str, Any]) -> None:
    """The page's recomputed metrics, NLLs and refitted temperatures, the bootstrap's matrix digest and
    intervals and the stability study's NLLs equal Python's to 1e-12."""
    bag = case.path
    if bag.is_file():
        return  # the same bag as its folder case
    protocol = json.loads((bag / layout.PROTOCOL_JSON).read_bytes())
    temperature = json.loads((bag / layout.TEMPERATURE_JSON).read_bytes())
    k = len(protocol["resources"]["dataset"]["labels"])
    threshold = protocol["metrics"]["threshold"]["value"]
    pools = {pool: read_pool(pool, (bag / path).read_bytes(), k, full_counts_required=False)
             for pool, path in layout.PREDICTIONS.items()}
    for pool, data in pools.items():
        for which, beta in (("raw", 1.0), ("calibrated", temperature["beta"])):
            _close(figures["metrics"][f"{pool}.{which}"], numerics.metric_set(data.z, data.y, beta, threshold),
                   f"{case.name} {pool}.{which}")
    cal = pools["calibration"]
    _close(figures["fit"], {"nll_before": numerics.mean_nll(cal.z, cal.y, 1.0),
                            "nll_after": numerics.mean_nll(cal.z, cal.y, temperature["beta"])}, f"{case.name} fit")
    refit = figures["refit"]["temperature"]
    assert abs(refit - temperature["temperature"]) <= FIGURE_TOL * temperature["temperature"], (case.name, refit)
    for pool, data in pools.items():
        _close(figures["perClass"][pool], _per_class(data.z, data.y, k), f"{case.name} per_class.{pool}")
    _close(figures["bounds"], _bounds(protocol, temperature, json.loads((bag / layout.METRICS_JSON).read_bytes()),
                                      pools), f"{case.name} reproduction_bounds")
    if (bag / layout.BOOTSTRAP_JSON).is_file():
        recorded = json.loads((bag / layout.BOOTSTRAP_JSON).read_bytes())
        _close(figures["bootstrap"], _bootstrap(recorded, pools["audit"]), f"{case.name} bootstrap")
    if (bag / layout.STABILITY_JSON).is_file():
        stability = json.loads((bag / layout.STABILITY_JSON).read_bytes())
        audit = pools["audit"]
        assert [e["m"] for e in figures["stability"]["sizes"]] == [e["m"] for e in stability["sizes"]], case.name
        _close(figures["stability"]["audit_nll_raw"], numerics.mean_nll(audit.z, audit.y, 1.0),
               f"{case.name} stability")
        for found, entry in zip(figures["stability"]["sizes"], stability["sizes"], strict=True):
            z, y = cal.z[:entry["m"]], cal.y[:entry["m"]]
            # the job fits each subset by the protocol's bisection, as the page does
            assert abs(found["temperature"] - entry["temperature"]) <= FIGURE_TOL * entry["temperature"], (
                case.name, found)
            _close(found, {"calibration_nll_after": numerics.mean_nll(z, y, entry["beta"]),
                           "audit_nll": numerics.mean_nll(audit.z, audit.y, entry["beta"])},
                   f"{case.name} stability m={entry['m']}")
    if protocol["metrics"].get("estimators"):
        _estimators_agree(figures["estimators"], estimators.expected_record(
            protocol, pools["audit"].z, pools["audit"].y, temperature["beta"]), case.name)


def _estimators_agree(page: dict[str, Any], python: dict[str, Any], where: str) -> None:
    """The page's estimators, their paired-bootstrap intervals included, equal Python's to 1e-12."""
    python = json.loads(json.dumps(python))
    assert set(page["results"]) == set(python["results"]), where
    for entry_id, entry in python["results"].items():
        if "difference" in entry:
            assert set(page["results"][entry_id]["difference"]) == set(entry["difference"]), (where, entry_id)
    _close(page, python, f"{where} estimators")


def _bootstrap(doc: dict[str, Any], audit: Any) -> dict[str, Any]:
    """indices_sha256 and each metric's point, lower and upper by the Python verifier's functions
    (verify/bootstrap.py): the matrix drawn by numpy, scored through draw counts."""
    from verify import bootstrap

    z, y, n = audit.z, audit.y, len(audit.y)
    digest = hashlib.sha256()
    nll_r, brier_r, gap_r = bootstrap.row_terms(z, y, 1.0)
    nll_c, brier_c, gap_c = bootstrap.row_terms(z, y, doc["beta"])
    columns = np.column_stack([nll_r, nll_c, brier_r, brier_c, gap_r, gap_c])
    bins = gap_r.shape[1]
    sums = bootstrap.block_sums(doc["seed"], doc["resamples"], n, columns, digest) / n
    parts = {"nll": sums[:, 1] - sums[:, 0], "brier": sums[:, 3] - sums[:, 2],
             "ece": np.abs(sums[:, 4 + bins:]).sum(axis=1) - np.abs(sums[:, 4:4 + bins]).sum(axis=1)}
    whole_raw, whole_cal = numerics.metric_set(z, y, 1.0, 0.9), numerics.metric_set(z, y, doc["beta"], 0.9)
    differences = {}
    for metric in doc["differences"]:
        quantiles = doc["interval"]["quantiles"]
        lower, upper = (float(v) for v in np.quantile(parts[metric], quantiles, method="linear"))
        differences[metric] = {"point": whole_cal[metric] - whole_raw[metric], "lower": lower, "upper": upper}
    return {"indices_sha256": digest.hexdigest(), "differences": differences}


def _per_class(z: np.ndarray, y: np.ndarray, k: int) -> dict[str, Any]:
    """support, predicted, correct, recall, precision and the non-zero cells, counted here."""
    c = np.zeros((k, k), dtype=np.int64)
    np.add.at(c, (y, np.argmax(z, axis=1)), 1)
    support, predicted, correct = c.sum(axis=1), c.sum(axis=0), np.diag(c)
    return {"support": support.tolist(), "predicted": predicted.tolist(), "correct": correct.tolist(),
            "recall": [int(r) / int(s) if s else None for r, s in zip(correct, support, strict=True)],
            "precision": [int(r) / int(s) if s else None for r, s in zip(correct, predicted, strict=True)],
            "confusion": [[a, b, int(c[a, b])] for a in range(k) for b in range(k) if c[a, b]]}


def _bounds(protocol: dict[str, Any], temperature: dict[str, Any], metrics: dict[str, Any],
            pools: dict[str, Any]) -> dict[str, Any]:
    """reproduction_bounds by the Python verifier's functions (verify/tolerance.py)."""
    section = protocol.get("reproduction")
    tau = float(section["logit_tolerance"]) if section is not None else layout.DEFAULT_LOGIT_TOLERANCE
    beta = temperature["beta"]
    cal = pools["calibration"]
    low, high = temperature_range(cal.z, cal.y, tau, beta, protocol)
    moved = max(high - beta, beta - low)
    out: dict[str, Any] = {"logit_tolerance": tau, "temperature": {"beta_low": low, "beta_high": high,
                                                                    "t_low": 1.0 / high, "t_high": 1.0 / low}}
    for pool, data in pools.items():
        spread = np.ptp(data.z, axis=1)
        mce = metrics["pools"][pool]
        out[pool] = {"raw": figure_bounds(data.z, data.y, 1.0, np.full(len(data.y), tau), tau, mce["raw"]["mce"]),
                     "calibrated": figure_bounds(data.z, data.y, beta, high * tau + moved * spread / 2.0, tau,
                                                 mce["calibrated"]["mce"])}
    return {"logit_tolerance": tau, "temperature": out["temperature"],
            "pools": {pool: out[pool] for pool in pools}}


def _close(page: Any, python: Any, where: str) -> None:
    if isinstance(python, dict):
        assert set(page) >= set(python), where
        for key, value in python.items():
            _close(page[key], value, f"{where}.{key}")
    elif isinstance(python, list):
        assert len(page) == len(python), where
        for i, (a, b) in enumerate(zip(page, python, strict=True)):
            _close(a, b, f"{where}[{i}]")
    elif isinstance(python, float):
        assert abs(page - python) <= FIGURE_TOL * max(1.0, abs(python)), (where, page, python)
    else:
        assert page == python, (where, page, python)


def _label_map_protocol(labels: list[str], pairs: list[tuple[str, str]], by: str) -> bytes:
    """The repository's protocol on the K3 sizes with dataset `labels` and a label map of `pairs`
    (model label, dataset label), model index in order."""
    doc = json.loads(_k3_protocol())
    doc["resources"]["dataset"]["labels"] = labels
    doc["label_map"] = {"by": by, "pairs": [{"model_index": i, "model_label": m, "dataset_label": d}
                                            for i, (m, d) in enumerate(pairs)]}
    return (json.dumps(doc, indent=2) + "\n").encode()


LABEL_MAPS = {
    # only Python's casefold matches these names: toLowerCase keeps 'ß' and the ligature 'ﬁ'
    "casefold-only": (["straße", "ﬁve", "σοφος"], [("STRASSE", "straße"), ("FIVE", "ﬁve"), ("ΣΟΦΟΣ", "σοφος")],
                      "name"),
    "by-name-mismatch": (["negative", "neutral", "positive"],
                         [("negative", "negative"), ("positive", "neutral"), ("neutral", "positive")], "name"),
    "explicit-against-namesake": (["negative", "neutral", "positive"],
                                  [("NEGATIVE", "negative"), ("Positive", "neutral"), ("other", "positive")],
                                  "explicit"),
    "not-a-bijection": (["negative", "neutral", "positive"],
                        [("negative", "negative"), ("neutral", "neutral"), ("positive", "neutral")], "explicit"),
}
"""Label maps a synthetic K=3 bundle pre-registers: each check id of the page against Python's."""

ESTIMATOR_TAMPERS = ("estimator-value-edited", "estimator-interval-edited", "estimator-bandwidth-edited",
                     "estimator-bin-count-edited", "estimators-dropped")
"""The tamper suite's estimator edits, re-signed by the key holder, run in the fast suite too."""


def _cluster_edits(tiny_bundle: Path, signing_key_dir: Path, tmp: Path) -> list[Case]:
    """A stand-in sharded bundle (tests/job/test_batch_kinds.py's `mixed`: even batches on this
    machine's kind, odd ones on a Xeon) and its record broken each way the cluster checks catch,
    each re-sealed and signed by the signer."""
    from job.publishing.signing_keys import load_private_key
    from tests.job.test_batch_kinds import _batches, mixed

    pools = {p: [int(b) for b in np.unique(_batches(tiny_bundle, p)) if b % 2 == 0] for p in layout.REPRODUCTION_POOLS}
    pem = signing_key_dir / "signing-key.pub.pem"
    base = mixed(tiny_bundle, tmp / "cluster" / "run", signing_key_dir, pools)
    cases = [Case("cluster", base, pem_file=pem),
             Case("cluster.tar.gz", archive(base, tmp / "cluster.tar.gz"), pem_file=pem)]

    def twice(c: dict[str, Any]) -> None:
        c["workers"][1]["batches"]["audit"].append(c["workers"][0]["batches"]["audit"][0])

    def missing(c: dict[str, Any]) -> None:
        c["workers"][1]["batches"]["calibration"].pop()

    def extra(c: dict[str, Any]) -> None:
        c["workers"][0]["batches"]["audit"].append(9999)

    def unknown_pool(c: dict[str, Any]) -> None:
        c["workers"][0]["batches"]["stability"] = [0]

    def temperature(c: dict[str, Any]) -> None:
        c["audit_temperature_sha256"] = "0" * 64

    key = load_private_key(signing_key_dir / "signing-key.pem")
    for fn in (twice, missing, extra, unknown_pool, temperature):
        bag = copy_bag(base, tmp / "cluster-edits" / fn.__name__ / "bag")
        env = json.loads((bag / layout.ENVIRONMENT_JSON).read_bytes())
        fn(env["cluster"])
        (bag / layout.ENVIRONMENT_JSON).write_bytes(dumps(env))
        reseal(bag, key)
        cases.append(Case(f"cluster:{fn.__name__}", bag, pem_file=pem))
    return cases


def test_the_page_agrees_with_python_on_estimators_label_maps_and_clusters(
        browser_ready: None, tmp_path: Path, keys: Keys, synthetic: Path, tiny_bundle: Path,
        signing_key_dir: Path) -> None:
    """The checks the page added: metrics.estimators (the tamper suite's estimator edits), labels.map
    (casefold-only names, a mismatch by name, an explicit map against a namesake, no bijection) and
    cluster.* (a sharded record and five broken ones): every status Python's."""
    cases = [Case(f"label-map:{name}", make_bundle(tmp_path / "labels" / name / "bag", keys.real,
                                                   protocol=_label_map_protocol(*spec)), key=keys.real)
             for name, spec in LABEL_MAPS.items()]
    cases += _tampered(synthetic, keys, tmp_path, {n: TAMPERS[n] for n in ESTIMATOR_TAMPERS}, "estimators")
    cases += _cluster_edits(tiny_bundle, signing_key_dir, tmp_path)
    pages = run_page(cases, tmp_path)
    problems = [p for c in cases for p in compare(c, pages[c.name], run_python(c))]
    assert problems == [], "\n".join(problems)

    def status(name: str, cid: str) -> str:
        return str(next(c["status"] for c in pages[name]["result"]["checks"] if c["id"] == cid))

    # each case reaches the check it is for, performed on the page
    assert status("label-map:casefold-only", "labels.map") == "pass"
    assert status("label-map:explicit-against-namesake", "labels.map") == "pass"
    assert status("label-map:by-name-mismatch", "labels.map") == "fail"
    assert status("label-map:not-a-bijection", "labels.map") == "fail"
    assert status("cluster", "cluster.batch-owners") == status("cluster", "cluster.audit-temperature") == "pass"
    for name in ("twice", "missing", "extra", "unknown_pool"):
        assert status(f"cluster:{name}", "cluster.batch-owners") == "fail", name
    assert status("cluster:temperature", "cluster.audit-temperature") == "fail"
    assert status("estimators:estimator-value-edited", "metrics.estimators") == "fail"
    assert status("estimators:estimator-interval-edited", "metrics.estimators") == "fail"
    assert status("estimators:estimator-bandwidth-edited", "metrics.estimators") == "fail"
    assert status("estimators:estimator-bin-count-edited", "metrics.estimators") == "fail"
    assert status("estimators:estimators-dropped", "metrics.estimators") == "fail"
    for c in cases:
        if pages[c.name]["result"].get("verdict") == "verified-here":
            _figures_agree(c, pages[c.name]["result"]["figures"])


def _tampered(src: Path, keys: Keys, tmp: Path, table: dict[str, tuple[Callable[..., None], str, str]],
              prefix: str) -> list[Case]:
    cases = []
    for name, (tamper, _, _) in sorted(table.items()):
        if name in BROWSER_BLIND:
            continue
        section = re.match(r"(bootstrap|stability)-", name)
        if section and not (src / f"data/{section.group(1)}.json").exists():
            continue
        bag = copy_bag(src, tmp / prefix / name / "bag")
        tamper(bag, keys)
        cases.append(Case(f"{prefix}:{name}", bag, key=keys.real))
    return cases


def test_a_folder_with_a_symbolic_link_is_never_verified_on_the_page(browser_ready: None, tmp_path: Path,
                                                                      keys: Keys, synthetic: Path) -> None:
    """The browser hands the page a link's target, so the page cannot fail bag.layout as Python does;
    it says so, and says VERIFIED of no folder, this one or an untouched one."""
    linked = copy_bag(synthetic, tmp_path / "linked" / "bag")
    TAMPERS["symlink-in-data"][0](linked, keys)
    assert (linked / layout.ENVIRONMENT_JSON).is_symlink()
    cases = [Case("linked", linked, key=keys.real), Case("untouched", synthetic, key=keys.real)]
    pages = run_page(cases, tmp_path)
    python = run_python(cases[0])
    assert not isinstance(python, str) and python.exit_code != 0
    for c in cases:
        result = pages[c.name]["result"]
        assert result["verdict"] == "verified-here", (c.name, result["verdict"])
        assert "never VERIFIED here" in result["message"] and "symbolic link" in result["message"]
        layout_check = next(check for check in result["checks"] if check["id"] == "bag.layout")
        assert "not visible to a browser" in layout_check["detail"]


@pytest.mark.slow
def test_the_page_agrees_with_python_on_every_tamper_class(browser_ready: None, tmp_path: Path, keys: Keys,
                                                           synthetic: Path) -> None:
    cases = _tampered(synthetic, keys, tmp_path, TAMPERS, "tamper") + _tampered(synthetic, keys, tmp_path,
                                                                               VIEW_LIES, "view")
    resealed = copy_bag(synthetic, tmp_path / "resealed" / "bag")
    reseal(resealed, keys.other)
    cases.append(Case("resealed-by-another", resealed, key=keys.real))
    pages = run_page(cases, tmp_path)
    problems = [p for c in cases for p in compare(c, pages[c.name], run_python(c))]
    assert problems == [], "\n".join(problems)
    # a tampered bundle is never VERIFIED on the page; those only a check it does not perform can catch
    # (the views' regeneration, the crate, the report) are "verified as far as this page checks"
    assert all(pages[c.name]["result"].get("verdict") in ("failed", "verified-here") for c in cases)
    assert sum(pages[c.name]["result"].get("verdict") == "failed" for c in cases) >= 30


@pytest.mark.slow
def test_the_page_agrees_with_python_on_every_hostile_bundle_and_archive(browser_ready: None, tmp_path: Path,
                                                                         keys: Keys, synthetic: Path) -> None:
    cases = []
    for name, build in sorted(HOSTILE.items()):
        target = build(copy_bag(synthetic, tmp_path / "hostile" / name / "bag"), keys, 0.02)
        cases.append(Case(f"hostile:{name}", target, key=keys.real))
    pages = run_page(cases, tmp_path)
    problems = [p for c in cases for p in compare(c, pages[c.name], run_python(c))]
    assert problems == [], "\n".join(problems)
    slow = {c.name: pages[c.name]["wall"] for c in cases if pages[c.name]["wall"] > 5}
    assert slow == {}, slow
