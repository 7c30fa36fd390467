"""The verification as a table: every check, in the order a reader would check a bundle (bag,
signature and signer, schemas, one protocol everywhere, stage ordering, split, predictions, fit,
metrics, studies, derived files), and the runner that turns it into report lines.

Each entry names a check function of the domain module that owns it. A check returns the
reason it passed, raises Failed, or raises Skipped when something it needs failed earlier; a
check that crashes on malformed input is reported as failed, never as passed. Entries with
`{pool}`, `{which}` or `{name}` in their id expand once per pool, scale or JSON file."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from verify import (
    bag,
    batch_kinds,
    bootstrap,
    claims,
    compat,
    crate,
    figures,
    fit,
    labelmap,
    metrics,
    plausibility,
    pools,
    predictions,
    records,
    reportcheck,
    reproduction,
    schemacheck,
    signature,
    stability,
    workers,
)
from verify.context import Attestation, Context, Trust
from verify.result import SIGNER_CHECK, Check, Failed, Skipped, exit_code
from verify.tree import BagTree

__all__ = ["AUTHENTICATION", "CONTENT", "TABLE", "Entry", "Group", "Trust", "Verification", "check_ids", "verify_tree"]

CheckFn = Callable[..., str]
"""A check: the context, plus the expansion's parameters as keywords; returns the detail."""
Condition = Callable[[Context], bool]
Expansion = Callable[[Context], Iterable[dict[str, str]]]


@dataclass(frozen=True)
class Entry:
    """One check: its stable id, its title and its function; `when` decides whether it applies
    to this bundle at all (an entry that does not apply is not reported)."""

    id: str
    title: str
    fn: CheckFn
    when: Condition | None = None
    only_if_clean: bool = False
    """Skip (with the reason) once an earlier check failed: for costly checks whose answer could
    not change the verdict then, so that a rejected bundle is rejected quickly."""


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


AUTHENTICATION: tuple[Entry | Group, ...] = (
    Group((
        Entry("bag.declaration", "bagit.txt declares BagIt 1.0", bag.declaration),
        Entry("bag.layout", "tag files and data/, no links", bag.entries),
        Entry("bag.manifest-sha256", "manifest-sha256.txt matches every payload file",
              bag.manifest_sha256),
        Entry("bag.manifest-sha512", "manifest-sha512.txt matches every payload file",
              bag.manifest_sha512),
        Entry("bag.manifest-other", "other payload manifests match", bag.manifest_other),
        Entry("bag.tagmanifest", "tag manifests match every tag file", bag.tagmanifest),
        Entry("bag.info", "bag-info.txt well formed, Payload-Oxum right", bag.info),
    ), when=_has_bag),
    Entry("signature.envelope", "DSSE envelope well formed", signature.envelope),
    Entry("signature.valid", "signature verifies over the exact statement bytes", signature.valid),
    Entry("format.version", "bundle format is one this verifier reads", compat.format_version),
    Entry("signature.subjects", "signed subjects equal the manifest and the files",
          signature.signed_subjects),
    Entry(SIGNER_CHECK, "signer is the trusted key", signature.trusted_signer),
)
"""What authenticates the bag: size-capped tag files and manifests, hashes, the signature and the
signed subjects. Nothing here parses a payload file."""

CONTENT: tuple[Entry | Group, ...] = (
    Group((
        Entry("bag.payload-files", "data/ holds exactly the format's files", bag.payload_set),
    ), when=_has_bag),
    Group((
        Entry("json.{name}", "{path} valid against the verifier's schema", schemacheck.json_file),
    ), each=schemacheck.json_files),
    Entry("json.statement", "signed statement valid against the verifier's schema",
          schemacheck.signed_statement),
    Entry("format.fields", "records hold every field their format requires", compat.format_fields),
    Entry("protocol.bounds", "protocol's sizes within the verifier's bounds", records.protocol_bounds),
    Entry("protocol.hash", "every record names the protocol in the bag", records.protocol_hash),
    Entry("protocol.pre-registered", "protocol equals the pre-registered one",
          records.pre_registered, when=records.has_pre_registered_protocol),
    Entry("resources.pins", "resources agree with the protocol's pins and the profile",
          records.resource_pins),
    Entry("stages.records", "stage records hash the files in the bag", records.stage_records),
    Entry("stages.audit-after-fit", "audit inference consumed the frozen temperature",
          records.audit_after_fit),
    Entry("environment.threads", "torch threads within the protocol's bound", records.threads,
          when=records.has_thread_choice),
    Entry("environment.forward", "the recorded forward and its check agree", records.forward_choice,
          when=records.has_forward_choice),
    Entry("pools.split-keys", "split keys are sha256(prefix + idx)", pools.split_keys),
    Entry("pools.assignment", "pools re-derived by the split rule; sizes; disjoint",
          pools.assignment),
    Group((
        Entry("predictions.{pool}.columns", "{pool} predictions: columns and types",
              predictions.columns),
        Entry("predictions.{pool}.rows", "{pool} predictions: rows are the pool, in order",
              predictions.rows),
        Entry("predictions.{pool}.probabilities",
              "{pool} predictions: probabilities and pred from the logits",
              predictions.probabilities),
        Entry("predictions.{pool}.batches", "{pool} predictions: batches in protocol order",
              predictions.batches),
    ), each=predictions.each_pool),
    Group((
        Entry("cluster.batch-owners", "every recorded batch ran on exactly one worker", workers.batch_owners),
        Entry("cluster.audit-temperature", "audit batches carried the frozen temperature's hash",
              workers.audit_temperature),
    ), when=workers.wanted),
    Entry("labels.map", "label map is a bijection onto the dataset's labels", labelmap.label_map,
          when=labelmap.wanted),
    Entry("fit.record", "temperature record consistent with protocol and logits", fit.record),
    Entry("fit.trajectory", "trajectory is a valid bisection of the NLL gradient",
          fit.trajectory),
    Entry("fit.refit", "temperature re-fitted by another method agrees", fit.refitted),
    Entry("metrics.record", "metrics name the temperature and predictions in the bag",
          metrics.record),
    Group((
        Entry("metrics.{pool}.{which}", "{pool} {which} metrics recomputed", metrics.recomputed),
    ), each=metrics.each_pool_and_scale),
    Entry("metrics.argmax", "argmax unchanged by the temperature", metrics.argmax),
    Entry(plausibility.WARNINGS_CHECK, "warnings are those the audit accuracy and temperature call for",
          plausibility.warnings),
    Entry("metrics.truncation", "truncation summary restates the predictions' token counts",
          plausibility.truncation, when=plausibility.has_truncation),
    Group((
        Entry("bootstrap.record", "bootstrap names this protocol, temperature and predictions",
              bootstrap.record),
        Entry("bootstrap.intervals", "bootstrap resamples and intervals recomputed",
              bootstrap.intervals),
    ), when=bootstrap.wanted),
    Entry("stability.refit", "stability subsets re-fitted and NLLs recomputed", stability.refits,
          when=stability.wanted),
    Entry("predicate.claims", "signed predicate states what the payload holds",
          claims.predicate_claims),
    Entry("report.tables", "report.md tables restate the records", reportcheck.tables),
    Entry("report.regenerated", "report.md is the verifier's rendering of the records",
          reportcheck.regenerated),
    Entry("crate.structure", "ro-crate-metadata.json is an RO-Crate 1.2 graph", crate.structure),
    Entry("crate.files", "crate lists every payload file with its sha256 and size", crate.files),
    Entry("crate.run", "crate's run reads the resources and produces the payload", crate.run),
    Entry("crate.signer", "crate names the bag's signer", crate.signer),
    Entry("crate.publication", "crate states the signed licence, publisher and authors",
          crate.publication),
    Entry("crate.regenerated", "crate is the verifier's rendering of the records", crate.regenerated),
    Entry("figures.png", "figures are well-formed PNG images", figures.png),
    Entry("figures.regenerated", "figures are the verifier's drawing of the records",
          figures.regenerated, only_if_clean=True),
    Group((
        Entry("reproduction.{n}.signed", "attestation {n} signed by a trusted reproducer",
              reproduction.signed),
        Entry("reproduction.{n}.subjects", "attestation {n} is about this bundle", reproduction.subjects),
        Entry("reproduction.{n}.reproduced", "attestation {n} is bit-identical or equivalent",
              reproduction.reproduced),
        Entry("reproduction.{n}.batch-kinds", "attestation {n}'s batches grouped by CPU kind, signed and re-run",
              batch_kinds.grouped),
    ), when=reproduction.wanted, each=reproduction.each_attestation),
)
"""What the payload says, checked only once the bag is authenticated."""

TABLE: tuple[Entry | Group, ...] = AUTHENTICATION + CONTENT
"""Every check the verifier runs, in report order."""


def check_ids(table: Sequence[Entry | Group] = TABLE) -> list[str]:
    """The ids of the table in order, expansions left as templates (`predictions.{pool}.rows`)."""
    out: list[str] = []
    for item in table:
        if isinstance(item, Group):
            out.extend(entry.id for entry in item.entries)
        else:
            out.append(item.id)
    return out


class Runner:
    """Runs check functions and records one Check per run, in order."""

    def __init__(self, fail_fast: bool = False) -> None:
        self.checks: list[Check] = []
        self.fail_fast = fail_fast

    def run(self, cid: str, title: str, fn: Callable[[], str]) -> None:
        """Run `fn` and record its outcome; never raises."""
        if self.fail_fast and any(c.status == "fail" for c in self.checks):
            self.checks.append(Check(cid, title, "skip", "not run: stopped at the first failure"))
            return
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

    def run_entry(self, ctx: Context, entry: Entry, params: dict[str, str],
                  skip: str | None = None) -> None:
        """Run one table entry with the expansion's parameters, when it applies; with `skip`,
        record it as skipped for that reason instead of running it."""
        if entry.when is not None and not entry.when(ctx):
            return
        cid, title = entry.id.format(**params), entry.title.format(**params)
        if skip is None and entry.only_if_clean and (failed := self.first_failure()) is not None:
            skip = (f"skipped: {failed} failed, so the verdict is already a rejection; drawn again "
                    "only for a bundle whose other checks all pass")
        if skip is not None:
            self.checks.append(Check(cid, title, "skip", skip))
            return
        self.run(cid, title, lambda: entry.fn(ctx, **params))

    def run_table(self, ctx: Context, table: Sequence[Entry | Group], *,
                  gate: bool = False, unread: Context | None = None) -> None:
        """Run every entry of `table` in order, expanding groups. With `gate`, once a check has
        failed every later entry is recorded as skipped instead of run; groups of skipped
        entries expand on `unread` (a context that has read nothing) when given."""
        for item in table:
            skip = self.not_authenticated() if gate else None
            where = unread if skip is not None and unread is not None else ctx
            if isinstance(item, Entry):
                self.run_entry(where, item, {}, skip)
                continue
            if item.when is not None and not item.when(where):
                continue
            for params in (item.each(where) if item.each is not None else [{}]):
                for entry in item.entries:
                    skip = self.not_authenticated() if gate else None
                    self.run_entry(where if skip is not None else ctx, entry, params, skip)

    def not_authenticated(self) -> str | None:
        """The reason to skip what follows when a check has failed, or None."""
        failed = self.first_failure()
        if failed is None:
            return None
        return f"skipped: the bundle is not authenticated ({failed} failed)"

    def first_failure(self) -> str | None:
        """The id of the first failed check so far, or None."""
        return next((c.id for c in self.checks if c.status == "fail"), None)


@dataclass(frozen=True)
class Verification:
    checks: list[Check]
    signer_fingerprint: str | None
    """The key that signed the bundle, when the signature verifies (trusted or not)."""
    notes: list[str]
    """What the bag holds that nothing signed: reported, never trusted, never a failure."""
    assurance: str = ""
    """What the checks establish, in words (verify.reproduction.assurance)."""


def verify_tree(tree: BagTree | None, trust: Trust, *,
                expected_protocol_sha256: str | None = None,
                prelude: list[Check] | None = None, fail_fast: bool = False,
                attestations: tuple[Attestation, ...] = (),
                reproducers: tuple[Ed25519PublicKey, ...] = (),
                require_bit_identical: bool = False) -> Verification:
    """Run every check on a bag read into memory; return the report lines in order.

    Authenticate before parsing: the AUTHENTICATION checks run first, and once one of them (or
    the prelude) fails, every later check is reported as skipped without reading the payload,
    whatever it holds; their expansions are then those of the format's base payload.

    fail_fast stops at the first failed check (the verdict is the same: rejected); the fuzz
    tests use it to try many tampered bags quickly."""
    ctx = Context(tree=tree, trust=trust, expected_protocol_sha256=expected_protocol_sha256,
                  attestations=attestations, reproducers=reproducers,
                  require_bit_identical=require_bit_identical)
    runner = Runner(fail_fast)
    runner.checks.extend(prelude or [])
    runner.run_table(ctx, AUTHENTICATION, gate=True)
    unread = Context(tree=BagTree(root=tree.root) if tree is not None else None, trust=trust,
                     expected_protocol_sha256=expected_protocol_sha256)
    if runner.first_failure() is None:
        runner.run_table(ctx, CONTENT)
    else:
        runner.run_table(ctx, CONTENT, gate=True, unread=unread)
    return Verification(runner.checks, ctx.signer_fingerprint, ctx.notes,
                        reproduction.assurance(ctx, exit_code(runner.checks)))
