"""The verification as a table: every check, in the order a reader would check a bundle (bag,
signature and signer, schemas, one protocol everywhere, stage ordering, split, predictions, fit,
metrics, studies, derived files), and the runner that turns it into report lines.

Each entry names a check function of the domain module that owns it, the facts it needs and the
facts it provides (verify/facts.py). A check returns the reason it passed or raises Failed; a
check that crashes on malformed input is reported as failed, never as passed. A check is skipped,
never run, when a fact it needs was not established, with the reason naming that fact and the
failed check behind it; a check that finds a part of a fact absent (one record of the payload,
another renderer, no trusted key) raises Missing, which is reported the same way. `when` says
whether an entry applies to this bundle at all: one that does not is not reported. Entries with
`{pool}`, `{which}`, `{name}` or `{n}` in their id expand once per pool, scale, JSON file or
attestation.

The table is validated when this module is imported (`validate`): every fact an entry needs is
provided by an entry before it, or is one the verification starts with; a misplaced entry is an
error here, never a skip at run time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bundle import layout
from bundle.dsse import Envelope
from verify import (
    bag,
    batch_kinds,
    bootstrap,
    claims,
    compat,
    crate,
    estimators,
    extract,
    figures,
    fit,
    labelmap,
    metrics,
    perclass,
    plausibility,
    pools,
    predictions,
    protocol_checks,
    report_md,
    reproduction,
    resource_pins,
    run_settings,
    schemacheck,
    signature,
    stability,
    stage_records,
    tolerance,
    workers,
)
from verify.context import Attestation, Context, Reading, Trust
from verify.facts import AUTHENTICATED, CLEAN, FACTS, INPUTS, RUNNER, Facts
from verify.parsed import PoolData
from verify.result import SIGNER_CHECK, Check, Failed, Missing, Scalar, VerifyError, exit_code
from verify.tree import BagTree

__all__ = ["AUTHENTICATION", "CONTENT", "TABLE", "Entry", "Group", "Reading", "TableError", "Trust",
           "Verification", "check_ids", "validate", "verify_tree"]

CheckFn = Callable[..., str]
"""A check: the context, plus the expansion's parameters as keywords; returns the detail."""
Condition = Callable[[Context], bool]
Expansion = Callable[[Context], Iterable[dict[str, str]]]


@dataclass(frozen=True)
class Entry:
    """One check: its stable id, its title and its function; the facts it `needs` (checked in
    order: the first absent one is the reason it is skipped) and the facts it `provides` when it
    passes; `when` decides whether it applies to this bundle at all (an entry that does not apply
    is not reported)."""

    id: str
    title: str
    fn: CheckFn
    needs: tuple[str, ...] = field(default=(), kw_only=True)
    provides: tuple[str, ...] = field(default=(), kw_only=True)
    when: Condition | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class Group:
    """Entries that apply together (`when`) and, with `each`, repeat in order for every set of
    parameters it yields; each parameter fills `{key}` in ids and titles and is passed to the
    functions as a keyword."""

    entries: tuple[Entry, ...]
    when: Condition | None = None
    each: Expansion | None = None


def _has_bag(ctx: Context) -> bool:
    return ctx.tree is not None


def _from_archive(ctx: Context) -> bool:
    return ctx.reading.archive


def _read_as_folder(ctx: Context) -> bool:
    """bag.layout applies to every bag read, and to a folder that could not be read as one."""
    return ctx.tree is not None or not ctx.reading.archive


BAG: Final = (AUTHENTICATED, "bag.files")
"""What every authentication check after the first needs: nothing failed before it, and the bag."""
SIGNED: Final = BAG + ("signature.envelope", "signature.statement")
DOCS: Final = BAG + ("payload.documents",)
"""What a check of the payload's records needs: the bundle authenticated, and the records read."""
PREDICTIONS: Final = DOCS + ("payload.predictions",)


AUTHENTICATION: tuple[Entry | Group, ...] = (
    Entry("archive.safe", "archive extracts safely", extract.safe,
          provides=("bag.files",), when=_from_archive),
    Entry("bag.layout", "tag files and data/, no links", bag.entries,
          needs=(AUTHENTICATED,), provides=("bag.files",), when=_read_as_folder),
    Group((
        Entry("bag.declaration", "bagit.txt declares BagIt 1.0", bag.declaration, needs=BAG),
        Entry("bag.manifest-sha256", "manifest-sha256.txt matches every payload file",
              bag.manifest_sha256, needs=BAG, provides=("bag.manifest",)),
        Entry("bag.manifest-sha512", "manifest-sha512.txt matches every payload file",
              bag.manifest_sha512, needs=BAG),
        Entry("bag.manifest-other", "other payload manifests match", bag.manifest_other, needs=BAG),
        Entry("bag.tagmanifest", "tag manifests match every tag file", bag.tagmanifest, needs=BAG),
        Entry("bag.info", "bag-info.txt well formed, Payload-Oxum right", bag.info, needs=BAG,
              provides=("bag.info",)),
    ), when=_has_bag),
    Entry("signature.envelope", "DSSE envelope well formed", signature.envelope, needs=BAG,
          provides=("signature.envelope",)),
    Entry("signature.valid", "signature verifies over the exact statement bytes", signature.valid,
          needs=BAG + ("signature.envelope", "bag.info"), provides=("signature.statement",)),
    Entry("format.version", "bundle format is one this verifier reads", compat.format_version,
          needs=SIGNED),
    Entry("signature.subjects", "signed subjects equal the manifest and the files",
          signature.signed_subjects, needs=SIGNED + ("bag.manifest",)),
    Entry(SIGNER_CHECK, "signer is the trusted key", signature.trusted_signer,
          needs=SIGNED + ("input.trust",)),
)
"""What authenticates the bag: reading it (extracting an archive safely), size-capped tag files
and manifests, hashes, the signature and the signed subjects. Nothing here parses a payload file.
Each check needs AUTHENTICATED: once one fails, every later check is skipped unread."""

CONTENT: tuple[Entry | Group, ...] = (
    Group((
        Entry("bag.payload-files", "data/ holds exactly the format's files", bag.payload_set,
              needs=BAG),
    ), when=_has_bag),
    Group((
        Entry("json.{name}", "{path} valid against the verifier's schema", schemacheck.json_file,
              needs=BAG, provides=("payload.documents",)),
    ), each=schemacheck.json_files),
    Entry("json.statement", "signed statement valid against the verifier's schema",
          schemacheck.signed_statement, needs=SIGNED, provides=("signature.predicate",)),
    Entry("format.fields", "records hold every field their format requires", compat.format_fields,
          needs=DOCS + ("signature.statement",)),
    Entry("protocol.bounds", "protocol's sizes within the verifier's bounds", protocol_checks.protocol_bounds,
          needs=DOCS),
    Entry("protocol.hash", "every record names the protocol in the bag", protocol_checks.protocol_hash,
          needs=DOCS + ("signature.predicate", "bag.info")),
    Entry("protocol.pre-registered", "protocol equals the pre-registered one",
          protocol_checks.pre_registered, needs=DOCS + ("input.pre-registered-protocol",),
          when=protocol_checks.has_pre_registered_protocol),
    Entry("resources.pins", "resources agree with the protocol's pins and the profile",
          resource_pins.resource_pins, needs=DOCS + ("bag.info",)),
    Entry("stages.records", "stage records hash the files in the bag", stage_records.stage_records,
          needs=DOCS),
    Entry("stages.audit-after-fit", "audit inference consumed the frozen temperature",
          stage_records.audit_after_fit, needs=DOCS),
    Entry("environment.threads", "torch threads within the protocol's bound", run_settings.threads,
          needs=DOCS, when=run_settings.has_thread_choice),
    Entry("environment.forward", "the recorded forward and its check agree", run_settings.forward_choice,
          needs=DOCS, when=run_settings.has_forward_choice),
    Entry("pools.split-keys", "split keys are sha256(prefix + idx)", pools.split_keys, needs=DOCS),
    Entry("pools.assignment", "pools re-derived by the split rule; sizes; disjoint",
          pools.assignment, needs=DOCS),
    Group((
        Entry("predictions.{pool}.columns", "{pool} predictions: columns and types",
              predictions.columns, needs=DOCS + ("signature.statement",),
              provides=("payload.predictions",)),
        Entry("predictions.{pool}.rows", "{pool} predictions: rows are the pool, in order",
              predictions.rows, needs=PREDICTIONS),
        Entry("predictions.{pool}.probabilities",
              "{pool} predictions: probabilities and pred from the logits",
              predictions.probabilities, needs=PREDICTIONS),
        Entry("predictions.{pool}.batches", "{pool} predictions: batches in protocol order",
              predictions.batches, needs=PREDICTIONS),
    ), each=predictions.each_pool),
    Group((
        Entry("cluster.batch-owners", "every recorded batch ran on exactly one worker",
              workers.batch_owners, needs=PREDICTIONS),
        Entry("cluster.audit-temperature", "audit batches carried the frozen temperature's hash",
              workers.audit_temperature, needs=DOCS),
    ), when=workers.wanted),
    Entry("labels.map", "label map is a bijection onto the dataset's labels", labelmap.label_map,
          needs=PREDICTIONS, when=labelmap.wanted),
    Entry("fit.record", "temperature record consistent with protocol and logits", fit.record,
          needs=PREDICTIONS),
    Entry("fit.trajectory", "trajectory is a valid bisection of the NLL gradient",
          fit.trajectory, needs=PREDICTIONS),
    Entry("fit.refit", "temperature re-fitted by another method agrees", fit.refitted,
          needs=PREDICTIONS),
    Entry("metrics.record", "metrics name the temperature and predictions in the bag",
          metrics.record, needs=DOCS),
    Group((
        Entry("metrics.{pool}.{which}", "{pool} {which} metrics recomputed", metrics.recomputed,
              needs=PREDICTIONS),
    ), each=metrics.each_pool_and_scale),
    Entry("metrics.argmax", "argmax unchanged by the temperature", metrics.argmax,
          needs=PREDICTIONS),
    Entry(plausibility.WARNINGS_CHECK, "warnings are those the audit accuracy and temperature call for",
          plausibility.warnings, needs=PREDICTIONS),
    Entry(perclass.CHECK, "per-class results recomputed; best relabelling certified", perclass.per_class,
          needs=PREDICTIONS + ("signature.statement",)),
    Entry(tolerance.BOUNDS_CHECK, "what an equivalent reproduction can move, derived from the logits",
          tolerance.bounds, needs=PREDICTIONS),
    Entry(tolerance.LIMIT_CHECK, "pre-registered logit tolerance within what the reader accepts",
          tolerance.within_limit, needs=DOCS),
    Entry("metrics.truncation", "truncation summary restates the predictions' token counts",
          plausibility.truncation, needs=PREDICTIONS, when=plausibility.has_truncation),
    Entry("metrics.estimators", "pre-registered estimators recomputed with their intervals",
          estimators.recomputed, needs=PREDICTIONS, when=estimators.wanted),
    Group((
        Entry("bootstrap.record", "bootstrap names this protocol, temperature and predictions",
              bootstrap.record, needs=PREDICTIONS),
        Entry("bootstrap.intervals", "bootstrap resamples and intervals recomputed",
              bootstrap.intervals, needs=PREDICTIONS),
    ), when=bootstrap.wanted),
    Entry("stability.refit", "stability subsets re-fitted and NLLs recomputed", stability.refits,
          needs=PREDICTIONS, when=stability.wanted),
    Entry("predicate.claims", "signed predicate states what the payload holds",
          claims.predicate_claims, needs=DOCS + ("signature.statement", "signature.predicate")),
    Entry("report.tables", "report.md tables restate the records", report_md.tables, needs=DOCS),
    Entry("report.regenerated", "report.md is the verifier's rendering of the records",
          report_md.regenerated, needs=DOCS + ("verifier.renderer",)),
    Entry("crate.structure", "ro-crate-metadata.json is an RO-Crate 1.2 graph", crate.structure,
          needs=BAG, provides=("crate.graph",)),
    Entry("crate.files", "crate lists every payload file with its sha256 and size", crate.files,
          needs=BAG + ("crate.graph",)),
    Entry("crate.run", "crate's run reads the resources and produces the payload", crate.run,
          needs=DOCS + ("crate.graph",)),
    Entry("crate.signer", "crate names the bag's signer", crate.signer,
          needs=BAG + ("crate.graph", "bag.info", "signature.statement")),
    Entry("crate.publication", "crate states the signed licence, publisher and authors",
          crate.publication, needs=BAG + ("crate.graph", "signature.predicate")),
    Entry("crate.regenerated", "crate is the verifier's rendering of the records", crate.regenerated,
          needs=DOCS + ("crate.graph", "signature.predicate", "bag.info", "signature.statement",
                        "verifier.renderer")),
    Entry("figures.png", "figures are well-formed PNG images", figures.png, needs=BAG),
    Entry("figures.regenerated", "figures are the verifier's drawing of the records",
          figures.regenerated, needs=PREDICTIONS + ("verifier.renderer", CLEAN)),
    Group((
        Entry("reproduction.{n}.signed", "attestation {n} signed by a trusted reproducer",
              reproduction.signed, needs=SIGNED + ("input.trust",),
              provides=("reproduction.statements",)),
        Entry("reproduction.{n}.subjects", "attestation {n} is about this bundle",
              reproduction.subjects, needs=SIGNED + ("payload.documents", "reproduction.statements")),
        Entry("reproduction.{n}.reproduced", "attestation {n} is bit-identical or equivalent",
              reproduction.reproduced,
              needs=PREDICTIONS + ("signature.statement", "reproduction.statements")),
        Entry("reproduction.{n}.batch-kinds", "attestation {n}'s batches grouped by CPU kind, signed and re-run",
              batch_kinds.grouped, needs=PREDICTIONS + ("reproduction.statements",)),
    ), when=reproduction.wanted, each=reproduction.each_attestation),
)
"""What the payload says, checked only once the bag is authenticated: every check needs
AUTHENTICATED."""

TABLE: tuple[Entry | Group, ...] = AUTHENTICATION + CONTENT
"""Every check the verifier runs, in report order."""


def check_ids(table: Sequence[Entry | Group] = TABLE) -> list[str]:
    """The ids of the table in order, expansions left as templates (`predictions.{pool}.rows`)."""
    return [entry.id for entry in _entries(table)]


class TableError(VerifyError):
    """The check table is inconsistent: an entry needs a fact nothing before it provides."""


def _entries(table: Sequence[Entry | Group]) -> list[Entry]:
    return [e for item in table for e in (item.entries if isinstance(item, Group) else (item,))]


def validate(table: Sequence[Entry | Group]) -> None:
    """TableError unless every fact each entry needs is known and provided by an entry before it
    (or is one the verification starts with, verify.facts.INPUTS and RUNNER), every fact
    provided is known, and no id appears twice."""
    available = set(INPUTS | RUNNER)
    seen: set[str] = set()
    for entry in _entries(table):
        if entry.id in seen:
            raise TableError(f"{entry.id} appears twice in the check table")
        seen.add(entry.id)
        for fact in entry.needs + entry.provides:
            if fact not in FACTS:
                raise TableError(f"{entry.id} names the fact {fact!r}, which verify.facts.FACTS "
                                 "does not define")
        for fact in entry.needs:
            if fact not in available:
                raise TableError(f"{entry.id} needs {fact}, which no check before it provides; "
                                 "move it after the check that provides it")
        available.update(entry.provides)


def _outcome(fn: Callable[[], str]) -> tuple[str, str, dict[str, Scalar], str | None]:
    """(status, detail, details, fact) of running `fn`; never raises. `fact` is the missing fact
    of a skip."""
    try:
        return "pass", fn(), {}, None
    except Failed as exc:
        return "fail", str(exc), dict(exc.details), None
    except Missing as exc:
        return "skip", str(exc), {}, exc.fact
    except Exception as exc:  # noqa: BLE001 - malformed input must fail, never crash or pass
        return ("fail", f"could not be checked: {type(exc).__name__}: {str(exc)[:300]}",
                {"error": type(exc).__name__}, None)


class Runner:
    """Runs the table's entries in order: records one Check per run and the facts established."""

    def __init__(self, ctx: Context, unread: Context) -> None:
        self.ctx = ctx
        self.unread = unread
        """A context that has read nothing: where entries skipped for want of authentication
        decide whether they apply and expand, so that nothing unauthenticated is parsed."""
        self.checks: list[Check] = []
        self.facts = Facts()

    def run_table(self, table: Sequence[Entry | Group], *, authenticating: bool = False) -> None:
        """Run every entry of `table` in order, expanding groups. While `authenticating`, the
        first failed check withdraws AUTHENTICATED."""
        for item in table:
            if isinstance(item, Entry):
                self.run_entry(item, {}, authenticating)
                continue
            where = self.ctx if AUTHENTICATED in self.facts.provided else self.unread
            if item.when is not None and not item.when(where):
                continue
            for params in (item.each(where) if item.each is not None else [{}]):
                for entry in item.entries:
                    self.run_entry(entry, params, authenticating)

    def run_entry(self, entry: Entry, params: dict[str, str], authenticating: bool) -> None:
        """Run one entry with the expansion's parameters when it applies; skip it when a fact it
        needs is absent."""
        ctx = self.ctx if AUTHENTICATED in self.facts.provided else self.unread
        if entry.when is not None and not entry.when(ctx):
            return
        cid, title = entry.id.format(**params), entry.title.format(**params)
        missing = self.facts.absent(entry.needs)
        if missing is not None:
            self.checks.append(Check(cid, title, "skip", str(missing)))
            self.facts.withhold(entry.provides, self.facts.withheld.get(missing.fact))
            return
        self.ctx.declared = frozenset(entry.needs)
        try:
            status, detail, details, fact = _outcome(lambda: entry.fn(self.ctx, **params))
        finally:
            self.ctx.declared = None
        self.checks.append(Check(cid, title, status, detail, details))  # type: ignore[arg-type]
        if status == "pass":
            self.facts.provide(entry.provides)
            return
        self.facts.withhold(entry.provides, cid if status == "fail" else self.facts.withheld.get(fact or ""))
        if status == "fail":
            self.facts.revoke(CLEAN, cid)
            if authenticating:
                self.facts.revoke(AUTHENTICATED, cid)


@dataclass(frozen=True)
class Verification:
    checks: list[Check]
    signer_fingerprint: str | None
    """The key that signed the bundle, when the signature verifies (trusted or not)."""
    notes: list[str]
    """What the bag holds that nothing signed: reported, never trusted, never a failure."""
    assurance: str = ""
    """What the checks establish, in words (verify.reproduction.assurance)."""
    envelope: Envelope | None = None
    """The DSSE envelope as the checks read it (None when it could not be read)."""
    documents: Mapping[str, Any] = field(default_factory=dict)
    """bag path -> every JSON payload file the checks parsed and validated against its schema."""
    pools: Mapping[str, PoolData] = field(default_factory=dict)
    """pool -> its predictions file as the checks read it (columns, types and ranges checked)."""


def verify_tree(tree: BagTree | None, trust: Trust, *, reading: Reading | None = None,
                expected_protocol_sha256: str | None = None,
                attestations: tuple[Attestation, ...] = (),
                reproducers: tuple[Ed25519PublicKey, ...] = (),
                require_bit_identical: bool = False,
                max_tolerance: float = layout.DEFAULT_LOGIT_TOLERANCE) -> Verification:
    """Run every check on a bag read into memory (None: it could not be read, as `reading`
    says); return the report lines in order.

    Authenticate before parsing: the AUTHENTICATION checks run first, and once one of them
    fails, every later check is reported as skipped without reading the payload, whatever it
    holds; their expansions are then those of the format's base payload."""
    ctx = Context(tree=tree, trust=trust, expected_protocol_sha256=expected_protocol_sha256,
                  attestations=attestations, reproducers=reproducers,
                  require_bit_identical=require_bit_identical, reading=reading or Reading(),
                  max_tolerance=max_tolerance)
    unread = Context(tree=BagTree(root=tree.root) if tree is not None else None, trust=trust,
                     expected_protocol_sha256=expected_protocol_sha256, reading=ctx.reading)
    runner = Runner(ctx, unread)
    runner.run_table(AUTHENTICATION, authenticating=True)
    runner.run_table(CONTENT)
    return Verification(runner.checks, ctx.signer_fingerprint, ctx.notes,
                        reproduction.assurance(ctx, exit_code(runner.checks)),
                        ctx.envelope, dict(ctx.docs), dict(ctx.tables))


validate(TABLE)
