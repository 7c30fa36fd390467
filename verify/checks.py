"""The verification, in the order a reader would check a bundle: bag, signature and signer,
schemas, one protocol everywhere, stage ordering, split, predictions, fit, metrics.

`verify_tree` runs every check and returns one Check per line of the report. A check that needs
something an earlier check found broken is reported as skipped with the reason; a check that
crashes on malformed input is reported as failed, never as passed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.errors import CanonicalJSONError
from verify import (
    bag,
    bootstrap,
    claims,
    crate,
    numerics,
    pools,
    predictions,
    records,
    refit,
    reportcheck,
    schemacheck,
    signature,
    stability,
)
from verify.result import SIGNER_CHECK, Check, Failed, Skipped

METRIC_TOL = 1e-9
"""Recomputed probabilities, metrics and gradients must agree with the bundle within this."""
REFIT_REL_TOL = 1e-6
"""The re-fitted temperature must agree with the bundle's within this relative difference."""

T = TypeVar("T")

POOL_NAMES = ("calibration", "audit")
ROLES = {"audit": "evidence", "calibration": "fit pool, not evidence"}


@dataclass
class Trust:
    """What the user trusts: a public key, a fingerprint, or nothing."""

    key: Ed25519PublicKey | None = None
    fingerprint: str | None = None
    source: str = ""


@dataclass
class Context:
    """What the checks found so far; a later check reads what an earlier one established."""

    tree: bag.BagTree | None
    trust: Trust
    expected_protocol_sha256: str | None = None
    info: dict[str, str] | None = None
    manifest: dict[str, str] | None = None
    envelope: signature.Envelope | None = None
    statement: dict[str, Any] | None = None
    signer_fingerprint: str | None = None
    docs: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, predictions.PoolData] = field(default_factory=dict)
    crate_graph: dict[str, Any] | None = None

    def need(self, value: T | None, what: str) -> T:
        if value is None:
            raise Skipped(f"not run: {what} could not be established (see above)")
        return value

    def doc(self, path: str) -> Any:
        if path not in self.docs:
            raise Skipped(f"not run: {path} is missing, unreadable or invalid (see above)")
        return self.docs[path]

    def table(self, pool: str) -> predictions.PoolData:
        if pool not in self.tables:
            raise Skipped(f"not run: data/predictions/{pool}.parquet could not be read (see above)")
        return self.tables[pool]

    def sha(self, path: str) -> str:
        tree = self.need(self.tree, "the bag")
        if path not in tree.files:
            raise Skipped(f"not run: {path} is missing")
        return tree.sha256(path)

    def payload_sha(self, path: str) -> str | None:
        tree = self.tree
        if tree is None or path not in tree.files or not path.startswith("data/"):
            return None
        return tree.sha256(path)


class Runner:
    def __init__(self, fail_fast: bool = False) -> None:
        self.checks: list[Check] = []
        self.fail_fast = fail_fast

    def run(self, cid: str, title: str, fn: Callable[[], str]) -> bool:
        if self.fail_fast and any(c.status == "fail" for c in self.checks):
            self.checks.append(Check(cid, title, "skip", "not run: stopped at the first failure"))
            return False
        try:
            detail = fn()
            status = "pass"
        except Failed as exc:
            detail, status = str(exc), "fail"
        except Skipped as exc:
            detail, status = str(exc), "skip"
        except Exception as exc:  # noqa: BLE001 - malformed input must fail, never crash or pass
            detail = f"could not be checked: {type(exc).__name__}: {str(exc)[:300]}"
            status = "fail"
        self.checks.append(Check(cid, title, status, detail))  # type: ignore[arg-type]
        return status == "pass"

    def add(self, check: Check) -> None:
        self.checks.append(check)


# -- bag -------------------------------------------------------------------------------------

def _bag_checks(ctx: Context, r: Runner) -> None:
    if ctx.tree is None:
        return
    tree = ctx.tree
    r.run("bag.declaration", "bagit.txt declares BagIt 1.0", lambda: bag.check_declaration(tree))
    r.run("bag.layout", "only tag files and data/, no links", lambda: bag.check_layout(tree))
    r.run("bag.payload-files", "data/ holds exactly the format's files",
          lambda: bag.check_payload_set(tree))
    if r.run("bag.manifest-sha256", "manifest-sha256.txt matches every payload file",
             lambda: bag.check_manifest(tree, "sha256")):
        ctx.manifest = bag.payload_manifest(tree)
    r.run("bag.manifest-sha512", "manifest-sha512.txt matches every payload file",
          lambda: bag.check_manifest(tree, "sha512"))
    r.run("bag.tagmanifest", "tagmanifest-sha256.txt matches every tag file",
          lambda: bag.check_tagmanifest(tree))

    def info() -> str:
        detail, ctx.info = bag.check_bag_info(tree)
        return detail

    r.run("bag.info", "bag-info.txt well formed, Payload-Oxum right", info)


# -- signature -------------------------------------------------------------------------------

def _signature_checks(ctx: Context, r: Runner) -> None:
    def envelope() -> str:
        tree = ctx.need(ctx.tree, "the bag")
        if layout.PROVENANCE not in tree.files:
            raise Failed(f"the bundle is unsigned: {layout.PROVENANCE} is missing, so nothing "
                         "ties the payload to a signer.")
        ctx.envelope = signature.parse_envelope(tree.files[layout.PROVENANCE])
        schemacheck.validate(loads_strict(tree.files[layout.PROVENANCE]), "envelope",
                             layout.PROVENANCE)
        return f"DSSE envelope, payloadType {ctx.envelope.payload_type}, one signature"

    r.run("signature.envelope", "DSSE envelope well formed", envelope)

    def valid() -> str:
        tree = ctx.need(ctx.tree, "the bag")
        env = ctx.need(ctx.envelope, "the envelope")
        if layout.SIGNER_PUB not in tree.files:
            raise Failed(f"{layout.SIGNER_PUB} is missing; the signer's key is not in the bag.")
        key = signature.load_public_key_pem(tree.files[layout.SIGNER_PUB], layout.SIGNER_PUB)
        fp = signature.fingerprint(key)
        if env.keyid != fp:
            raise Failed(f"the envelope's keyid is {env.keyid[:16]}…, {layout.SIGNER_PUB} has "
                         f"fingerprint {fp[:16]}….")
        named = (ctx.info or {}).get(layout.INFO_SIGNER_FINGERPRINT)
        if named is not None and named != fp:
            raise Failed(f"bag-info.txt names signer {named[:16]}…, the signing key is "
                         f"{fp[:16]}….")
        signature.verify_signature(env, key, layout.SIGNER_PUB)
        ctx.statement = signature.parse_statement(env.payload)
        ctx.signer_fingerprint = fp
        return f"Ed25519 signature valid, signer fingerprint {fp}"

    r.run("signature.valid", "signature verifies over the exact statement bytes", valid)

    def subjects() -> str:
        statement = ctx.need(ctx.statement, "the signed statement")
        manifest = ctx.need(ctx.manifest, "manifest-sha256.txt")
        tree = ctx.need(ctx.tree, "the bag")
        actual = {p: tree.sha256(p) for p in tree.payload()}
        return signature.compare_subjects(signature.subjects(statement), manifest, actual)

    r.run("signature.subjects", "signed subjects equal the manifest and the files", subjects)

    def trusted() -> str:
        env = ctx.need(ctx.envelope, "the envelope")
        fp = ctx.need(ctx.signer_fingerprint, "a valid signature")
        if ctx.trust.key is not None:
            want = signature.fingerprint(ctx.trust.key)
            if want != fp:
                raise Failed(f"signed by {fp[:16]}…, not by the trusted key {ctx.trust.source} "
                             f"({want[:16]}…); the bundle was re-signed by someone else.")
            signature.verify_signature(env, ctx.trust.key, f"the trusted key {ctx.trust.source}")
            return f"signer is the trusted key {ctx.trust.source} ({want[:16]}…)"
        if ctx.trust.fingerprint is not None:
            if ctx.trust.fingerprint != fp:
                raise Failed(f"signed by {fp[:16]}…, not by the trusted fingerprint "
                             f"{ctx.trust.fingerprint[:16]}…; the bundle was re-signed by someone "
                             "else.")
            return f"signer has the trusted fingerprint {fp[:16]}…"
        raise Skipped(f"no trusted key given: the bundle is intact and signed by {fp[:16]}…, but "
                      "whose key that is is not established; pass --trusted-key PUB.pem or "
                      "--trusted-fingerprint HEX")

    r.run(SIGNER_CHECK, "signer is the trusted key", trusted)


# -- schemas ---------------------------------------------------------------------------------

def _json_checks(ctx: Context, r: Runner) -> None:
    tree = ctx.tree
    try:
        expected = set(bag.expected_payload(tree)) if tree is not None else set()
    except Failed:
        expected = set(layout.PAYLOAD_FILES)
    for path, name in layout.PAYLOAD_SCHEMAS.items():
        if path not in expected and (tree is None or path not in tree.files):
            continue

        def one(path: str = path, name: str = name) -> str:
            tree = ctx.need(ctx.tree, "the bag")
            if path not in tree.files:
                raise Failed(f"{path} is missing.")
            data = tree.files[path]
            try:
                doc = loads_strict(data, source=path)
            except CanonicalJSONError as exc:
                raise Failed(str(exc)) from exc
            canonical = path not in layout.NON_CANONICAL_PAYLOAD
            if canonical and dumps(doc) != data:
                raise Failed(f"{path} is valid JSON but not canonical (sorted keys, no spaces, "
                             "floats as repr, one trailing newline); it was edited by hand.")
            schemacheck.validate(doc, name, path)
            ctx.docs[path] = doc
            return (f"{'canonical, ' if canonical else 'strict JSON, '}valid against "
                    f"{schemacheck.schema_id(name)}")

        r.run(f"json.{name}", f"{path} valid against the verifier's schema", one)

    def statement() -> str:
        doc = ctx.need(ctx.statement, "the signed statement")
        schemacheck.validate(doc, "statement", "the signed statement")
        ctx.docs["predicate"] = doc["predicate"]
        return (f"valid against {schemacheck.schema_id('statement')} and "
                f"{schemacheck.schema_id('predicate')}")

    r.run("json.statement", "signed statement valid against the verifier's schema", statement)


# -- protocol, resources, stages -------------------------------------------------------------

def _record_checks(ctx: Context, r: Runner) -> None:
    def protocol() -> str:
        sha = ctx.sha(layout.PROTOCOL_JSON)
        named: dict[str, str] = {}
        info = ctx.need(ctx.info, "bag-info.txt")
        named["bag-info.txt Protocol-SHA256"] = info[layout.INFO_PROTOCOL_SHA256]
        for path in (layout.POOLS_JSON, layout.TEMPERATURE_JSON, layout.TRAJECTORY_JSON,
                     layout.METRICS_JSON, layout.STAGES_JSON):
            named[f"{path} protocol_sha256"] = ctx.doc(path)["protocol_sha256"]
        for path in layout.PROTOCOL_SECTION_PAYLOAD.values():
            if path in ctx.docs or (ctx.tree is not None and path in ctx.tree.files):
                named[f"{path} protocol_sha256"] = ctx.doc(path)["protocol_sha256"]
        for stage in ctx.doc(layout.STAGES_JSON)["stages"]:
            named[f"stages.json stage {stage['name']!r}"] = stage["protocol_sha256"]
        named["the signed predicate"] = ctx.doc("predicate")["protocol_sha256"]
        return records.check_protocol_everywhere(sha, named)

    r.run("protocol.hash", "every record names the protocol in the bag", protocol)

    pinned = ctx.expected_protocol_sha256
    if pinned is not None:
        def expected() -> str:
            sha = ctx.sha(layout.PROTOCOL_JSON)
            if sha != pinned:
                raise Failed(f"data/protocol.json hashes to {sha[:16]}…, the pre-registered "
                             f"protocol to {pinned[:16]}….")
            return f"data/protocol.json is the pre-registered protocol ({sha[:16]}…)"

        r.run("protocol.pre-registered", "protocol equals the pre-registered one", expected)

    def resources() -> str:
        info = ctx.need(ctx.info, "bag-info.txt")
        return records.check_resources(ctx.doc(layout.RESOURCES_JSON), ctx.doc(layout.PROTOCOL_JSON),
                                       info[layout.INFO_PROFILE],
                                       ctx.doc(layout.POOLS_JSON)["dataset_sha256"])

    r.run("resources.pins", "resources agree with the protocol's pins and the profile", resources)

    r.run("stages.records", "stage records hash the files in the bag",
          lambda: records.check_stage_records(ctx.doc(layout.STAGES_JSON), ctx.payload_sha))

    r.run("stages.audit-after-fit", "audit inference consumed the frozen temperature",
          lambda: records.check_audit_after_fit(
              ctx.doc(layout.STAGES_JSON), ctx.sha(layout.TEMPERATURE_JSON),
              ctx.sha(layout.AUDIT_PREDICTIONS), ctx.sha(layout.CALIBRATION_PREDICTIONS)))


# -- split and predictions ------------------------------------------------------------------

def _pool_checks(ctx: Context, r: Runner) -> None:
    r.run("pools.split-keys", "split keys are sha256(prefix + idx)",
          lambda: pools.check_split_keys(ctx.doc(layout.POOLS_JSON), ctx.doc(layout.PROTOCOL_JSON)))
    r.run("pools.assignment", "pools re-derived by the split rule; sizes; disjoint",
          lambda: pools.check_assignment(ctx.doc(layout.POOLS_JSON),
                                         ctx.doc(layout.PROTOCOL_JSON)))
    for pool in POOL_NAMES:
        path = f"data/predictions/{pool}.parquet"

        def read(pool: str = pool, path: str = path) -> str:
            tree = ctx.need(ctx.tree, "the bag")
            if path not in tree.files:
                raise Failed(f"{path} is missing.")
            protocol = ctx.doc(layout.PROTOCOL_JSON)
            k = len(protocol["resources"]["dataset"]["labels"])
            ctx.tables[pool] = predictions.read_pool(pool, tree.files[path], k)
            return f"{len(ctx.tables[pool].y)} rows, {k} classes, columns and types as specified"

        r.run(f"predictions.{pool}.columns", f"{pool} predictions: columns and types", read)

        def rows(pool: str = pool) -> str:
            return predictions.check_rows(ctx.table(pool),
                                          ctx.doc(layout.POOLS_JSON)["pools"][pool])

        def probabilities(pool: str = pool) -> str:
            return predictions.check_probabilities(ctx.table(pool), METRIC_TOL)

        def batches(pool: str = pool) -> str:
            return predictions.check_batches(ctx.table(pool),
                                             ctx.doc(layout.PROTOCOL_JSON)["inference"])

        r.run(f"predictions.{pool}.rows", f"{pool} predictions: rows are the pool, in order", rows)
        r.run(f"predictions.{pool}.probabilities",
              f"{pool} predictions: probabilities and pred from the logits", probabilities)
        r.run(f"predictions.{pool}.batches", f"{pool} predictions: batches in protocol order",
              batches)


# -- fit -------------------------------------------------------------------------------------

def _close(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol


def _fit_checks(ctx: Context, r: Runner) -> None:
    def record() -> str:
        t = ctx.doc(layout.TEMPERATURE_JSON)
        fit = ctx.doc(layout.PROTOCOL_JSON)["fit"]
        cal = ctx.table("calibration")
        problems = []
        if t["pool"] != fit["pool"]:
            problems.append(f"fitted on pool {t['pool']!r}, the protocol fits on {fit['pool']!r}")
        if t["n"] != len(cal.y):
            problems.append(f"n is {t['n']}, the calibration pool has {len(cal.y)} rows")
        if t["predictions_sha256"] != ctx.sha(layout.CALIBRATION_PREDICTIONS):
            problems.append("predictions_sha256 is not the calibration predictions in the bag")
        if t["t_min"] != fit["t_min"] or t["t_max"] != fit["t_max"]:
            problems.append(f"interval [{t['t_min']}, {t['t_max']}], the protocol fixes "
                            f"[{fit['t_min']}, {fit['t_max']}]")
        if not (t["beta"] > 0 and abs(t["temperature"] - 1.0 / t["beta"])
                <= 4e-16 * abs(t["temperature"])):
            problems.append(f"temperature {t['temperature']!r} is not 1/beta = "
                            f"{1.0 / t['beta'] if t['beta'] else float('inf')!r}")
        if not fit["t_min"] <= t["temperature"] <= fit["t_max"]:
            problems.append(f"temperature {t['temperature']!r} is outside [t_min, t_max]")
        before = numerics.mean_nll(cal.z, cal.y, 1.0)
        after = numerics.mean_nll(cal.z, cal.y, t["beta"])
        if not _close(t["nll_before"], before, METRIC_TOL):
            problems.append(f"nll_before is {t['nll_before']!r}, recomputed {before!r}")
        if not _close(t["nll_after"], after, METRIC_TOL):
            problems.append(f"nll_after is {t['nll_after']!r}, recomputed {after!r}")
        if after > before + METRIC_TOL:
            problems.append(f"the fitted temperature raises the fit-pool NLL ({before!r} -> "
                            f"{after!r})")
        if problems:
            raise Failed("temperature.json: " + "; ".join(problems) + ".")
        return (f"T = {t['temperature']:.9g} on {t['n']} calibration rows; NLL "
                f"{before:.6f} -> {after:.6f} recomputed")

    r.run("fit.record", "temperature record consistent with protocol and logits", record)

    def trajectory() -> str:
        fit = ctx.doc(layout.PROTOCOL_JSON)["fit"]
        cal = ctx.table("calibration")
        try:
            return refit.check_trajectory(cal.z, cal.y, ctx.doc(layout.TRAJECTORY_JSON),
                                          ctx.doc(layout.TEMPERATURE_JSON), fit["t_min"],
                                          fit["t_max"], fit["steps"], METRIC_TOL)
        except ValueError as exc:
            raise Failed(f"the trajectory is not a valid bisection: {exc}.") from exc

    r.run("fit.trajectory", "trajectory is a valid bisection of the NLL gradient", trajectory)

    def refitted() -> str:
        fit = ctx.doc(layout.PROTOCOL_JSON)["fit"]
        t = ctx.doc(layout.TEMPERATURE_JSON)
        cal = ctx.table("calibration")
        result = refit.refit_temperature(cal.z, cal.y, fit["t_min"], fit["t_max"])
        side = t["boundary_side"] if t["boundary"] else None
        if side != result.boundary_side:
            raise Failed(f"the bundle reports boundary {side!r}, the re-fit finds "
                         f"{result.boundary_side!r} (T = {result.temperature!r}).")
        rel = abs(t["temperature"] - result.temperature) / result.temperature
        if not rel <= REFIT_REL_TOL:
            raise Failed(f"temperature {t['temperature']!r} is not the NLL minimiser: a "
                         f"golden-section + Newton re-fit gives {result.temperature!r} "
                         f"(relative difference {rel:.2e} > {REFIT_REL_TOL:g}; NLL "
                         f"{numerics.mean_nll(cal.z, cal.y, 1.0 / t['temperature']):.12f} vs "
                         f"{result.nll:.12f}).")
        return (f"re-fit T = {result.temperature:.12g} by golden section + Newton, relative "
                f"difference {rel:.1e}")

    r.run("fit.refit", "temperature re-fitted by another method agrees", refitted)


# -- metrics ---------------------------------------------------------------------------------

def _metric_checks(ctx: Context, r: Runner) -> None:
    def header() -> str:
        m = ctx.doc(layout.METRICS_JSON)
        t = ctx.doc(layout.TEMPERATURE_JSON)
        problems = []
        if m["temperature_sha256"] != ctx.sha(layout.TEMPERATURE_JSON):
            problems.append("temperature_sha256 is not the temperature.json in the bag")
        if m["beta"] != t["beta"] or m["temperature"] != t["temperature"]:
            problems.append(f"beta/temperature {m['beta']!r}/{m['temperature']!r}, "
                            f"temperature.json has {t['beta']!r}/{t['temperature']!r}")
        if sorted(m["pools"]) != sorted(POOL_NAMES):
            problems.append(f"pools {sorted(m['pools'])}, expected {sorted(POOL_NAMES)}")
        for pool in POOL_NAMES:
            entry = m["pools"].get(pool)
            if entry is None:
                continue
            if entry["role"] != ROLES[pool]:
                problems.append(f"pool {pool!r} role {entry['role']!r}, expected {ROLES[pool]!r}")
            if entry["predictions_sha256"] != ctx.sha(f"data/predictions/{pool}.parquet"):
                problems.append(f"pool {pool!r} predictions_sha256 is not the file in the bag")
        if problems:
            raise Failed("metrics.json: " + "; ".join(problems) + ".")
        return "metrics name this temperature and these prediction files; roles as specified"

    r.run("metrics.record", "metrics name the temperature and predictions in the bag", header)

    for pool in POOL_NAMES:
        for which in ("raw", "calibrated"):
            def one(pool: str = pool, which: str = which) -> str:
                m = ctx.doc(layout.METRICS_JSON)
                t = ctx.doc(layout.TEMPERATURE_JSON)
                threshold = ctx.doc(layout.PROTOCOL_JSON)["metrics"]["threshold"]["value"]
                data = ctx.table(pool)
                beta = 1.0 if which == "raw" else t["beta"]
                expected = numerics.metric_set(data.z, data.y, beta, threshold)
                if pool not in m["pools"]:
                    raise Failed(f"metrics.json has no {pool!r} pool.")
                found = m["pools"][pool][which]
                diffs: list[str] = []
                numerics.compare(found, expected, f"{pool}.{which}", METRIC_TOL, diffs)
                if diffs:
                    more = f" (+{len(diffs) - 3} more)" if len(diffs) > 3 else ""
                    raise Failed("metrics differ from the logits: " + "; ".join(diffs[:3]) + more
                                 + ".")
                return (f"n {expected['n']}, accuracy {expected['accuracy']:.4f}, NLL "
                        f"{expected['nll']:.4f}, ECE {expected['ece']:.4f}: all fields, 10 bins, "
                        f"threshold counts within {METRIC_TOL:g}")

            r.run(f"metrics.{pool}.{which}", f"{pool} {which} metrics recomputed", one)

    def argmax() -> str:
        m = ctx.doc(layout.METRICS_JSON)
        t = ctx.doc(layout.TEMPERATURE_JSON)
        changed = 0
        for pool in POOL_NAMES:
            data = ctx.table(pool)
            scaled = numerics.first_argmax(numerics.probabilities(data.z, t["beta"]))
            changed += int((scaled != numerics.first_argmax(data.z)).sum())
        if m["argmax_unchanged"] != (changed == 0):
            raise Failed(f"argmax_unchanged is {m['argmax_unchanged']}, but the temperature "
                         f"changes {changed} predictions.")
        if changed:
            raise Failed(f"the temperature changes the argmax of {changed} rows; a temperature "
                         "> 0 cannot.")
        return "argmax of every row unchanged by the temperature"

    r.run("metrics.argmax", "argmax unchanged by the temperature", argmax)


def _study_checks(ctx: Context, r: Runner) -> None:
    """The protocol's optional sections: the paired bootstrap and the stability study."""
    protocol = ctx.docs.get(layout.PROTOCOL_JSON)
    tree = ctx.tree
    wanted = set()
    for section, path in layout.PROTOCOL_SECTION_PAYLOAD.items():
        if (protocol is not None and section in protocol) or (tree is not None
                                                              and path in tree.files):
            wanted.add(section)

    def shas() -> dict[str, str]:
        return {"predictions": ctx.sha(layout.AUDIT_PREDICTIONS),
                "audit": ctx.sha(layout.AUDIT_PREDICTIONS),
                "calibration": ctx.sha(layout.CALIBRATION_PREDICTIONS),
                "temperature": ctx.sha(layout.TEMPERATURE_JSON),
                "metrics": ctx.sha(layout.METRICS_JSON)}

    if "bootstrap" in wanted:
        r.run("bootstrap.record", "bootstrap names this protocol, temperature and predictions",
              lambda: bootstrap.check_record(
                  ctx.doc(layout.BOOTSTRAP_JSON), ctx.doc(layout.PROTOCOL_JSON),
                  len(ctx.table("audit").y), ctx.doc(layout.TEMPERATURE_JSON)["beta"], shas()))
        r.run("bootstrap.intervals", "bootstrap resamples and intervals recomputed",
              lambda: bootstrap.check_differences(ctx.doc(layout.BOOTSTRAP_JSON),
                                                  ctx.table("audit").z, ctx.table("audit").y))
    if "stability" in wanted:
        r.run("stability.refit", "stability subsets re-fitted and NLLs recomputed",
              lambda: stability.check(
                  ctx.doc(layout.STABILITY_JSON), ctx.doc(layout.PROTOCOL_JSON),
                  (ctx.table("calibration").z, ctx.table("calibration").y),
                  (ctx.table("audit").z, ctx.table("audit").y), shas(),
                  ctx.doc(layout.TEMPERATURE_JSON)["temperature"]))

    r.run("predicate.claims", "signed predicate states what the payload holds",
          lambda: _predicate_claims(ctx))


# -- derived files: report, crate, figures ---------------------------------------------------

def _file(ctx: Context, path: str) -> bytes:
    tree = ctx.need(ctx.tree, "the bag")
    if path not in tree.files:
        raise Failed(f"{path} is missing.")
    return tree.files[path]


def _optional_doc(ctx: Context, path: str) -> Any:
    """The parsed optional record when the bag holds it or the protocol requires it, else None."""
    protocol = ctx.docs.get(layout.PROTOCOL_JSON)
    section = next(s for s, p in layout.PROTOCOL_SECTION_PAYLOAD.items() if p == path)
    wanted = (protocol is not None and section in protocol) or (
        ctx.tree is not None and path in ctx.tree.files)
    return ctx.doc(path) if wanted else None


def _derived_checks(ctx: Context, r: Runner) -> None:
    def report() -> str:
        data = _file(ctx, layout.REPORT_MD)
        tree = ctx.need(ctx.tree, "the bag")
        return reportcheck.check(data, ctx.doc(layout.METRICS_JSON),
                                 ctx.doc(layout.TEMPERATURE_JSON), ctx.doc(layout.POOLS_JSON),
                                 _optional_doc(ctx, layout.BOOTSTRAP_JSON),
                                 _optional_doc(ctx, layout.STABILITY_JSON), set(tree.payload()))

    r.run("report.tables", "report.md tables restate the records", report)

    def structure() -> str:
        detail, ctx.crate_graph = crate.parse(_file(ctx, layout.RO_CRATE_JSON))
        return detail

    r.run("crate.structure", "ro-crate-metadata.json is an RO-Crate 1.2 graph", structure)

    def files() -> str:
        graph = ctx.need(ctx.crate_graph, "the crate")
        tree = ctx.need(ctx.tree, "the bag")
        payload = tree.payload()
        return crate.check_files(graph, {p: tree.files[p] for p in payload},
                                 {p: tree.sha256(p) for p in payload})

    r.run("crate.files", "crate lists every payload file with its sha256 and size", files)

    def run() -> str:
        graph = ctx.need(ctx.crate_graph, "the crate")
        tree = ctx.need(ctx.tree, "the bag")
        return crate.check_run(graph, tree.payload(), ctx.doc(layout.RESOURCES_JSON),
                               ctx.doc(layout.ENVIRONMENT_JSON))

    r.run("crate.run", "crate's run reads the resources and produces the payload", run)

    def signer() -> str:
        graph = ctx.need(ctx.crate_graph, "the crate")
        info = ctx.need(ctx.info, "bag-info.txt")
        return crate.check_signer(graph, ctx.need(ctx.signer_fingerprint, "the signer"),
                                  info[layout.INFO_BAGGING_DATE])

    r.run("crate.signer", "crate names the bag's signer", signer)

    def figures() -> str:
        sizes = [f"{p.rsplit('/', 1)[-1]} {w}x{h}"
                 for p in layout.FIGURES for w, h in [crate.check_png(_file(ctx, p), p)]]
        return "well-formed PNG: " + ", ".join(sizes)

    r.run("figures.png", "figures are well-formed PNG images", figures)


def _predicate_claims(ctx: Context) -> str:
    return claims.check(ctx.doc("predicate"), ctx)


# -- entry point -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Verification:
    checks: list[Check]
    signer_fingerprint: str | None
    """The key that signed the bundle, when the signature verifies (trusted or not)."""


def verify_tree(tree: bag.BagTree | None, trust: Trust, *,
                expected_protocol_sha256: str | None = None,
                prelude: list[Check] | None = None, fail_fast: bool = False) -> Verification:
    """Run every check on a bag read into memory; return the report lines in order.

    fail_fast stops at the first failed check (the verdict is the same: rejected); the fuzz
    tests use it to try many tampered bags quickly."""
    ctx = Context(tree=tree, trust=trust, expected_protocol_sha256=expected_protocol_sha256)
    r = Runner(fail_fast)
    for check in prelude or []:
        r.add(check)
    _bag_checks(ctx, r)
    _signature_checks(ctx, r)
    _json_checks(ctx, r)
    _record_checks(ctx, r)
    _pool_checks(ctx, r)
    _fit_checks(ctx, r)
    _metric_checks(ctx, r)
    _study_checks(ctx, r)
    _derived_checks(ctx, r)
    return Verification(r.checks, ctx.signer_fingerprint)
