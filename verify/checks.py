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

from verify import (
    bag,
    bootstrap,
    claims,
    crate,
    figures,
    fit,
    labelmap,
    metrics,
    pools,
    predictions,
    records,
    reportcheck,
    schemacheck,
    signature,
    stability,
)
from verify.context import Context, Trust
from verify.result import SIGNER_CHECK, Check, Failed, Skipped
from verify.tree import BagTree

__all__ = ["TABLE", "Entry", "Group", "Trust", "Verification", "check_ids", "verify_tree"]

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


TABLE: tuple[Entry | Group, ...] = (
    Group((
        Entry("bag.declaration", "bagit.txt declares BagIt 1.0", bag.declaration),
        Entry("bag.layout", "only tag files and data/, no links", bag.entries),
        Entry("bag.payload-files", "data/ holds exactly the format's files", bag.payload_set),
        Entry("bag.manifest-sha256", "manifest-sha256.txt matches every payload file",
              bag.manifest_sha256),
        Entry("bag.manifest-sha512", "manifest-sha512.txt matches every payload file",
              bag.manifest_sha512),
        Entry("bag.tagmanifest", "tagmanifest-sha256.txt matches every tag file", bag.tagmanifest),
        Entry("bag.info", "bag-info.txt well formed, Payload-Oxum right", bag.info),
    ), when=_has_bag),
    Entry("signature.envelope", "DSSE envelope well formed", signature.envelope),
    Entry("signature.valid", "signature verifies over the exact statement bytes", signature.valid),
    Entry("signature.subjects", "signed subjects equal the manifest and the files",
          signature.signed_subjects),
    Entry(SIGNER_CHECK, "signer is the trusted key", signature.trusted_signer),
    Group((
        Entry("json.{name}", "{path} valid against the verifier's schema", schemacheck.json_file),
    ), each=schemacheck.json_files),
    Entry("json.statement", "signed statement valid against the verifier's schema",
          schemacheck.signed_statement),
    Entry("protocol.hash", "every record names the protocol in the bag", records.protocol_hash),
    Entry("protocol.pre-registered", "protocol equals the pre-registered one",
          records.pre_registered, when=records.has_pre_registered_protocol),
    Entry("resources.pins", "resources agree with the protocol's pins and the profile",
          records.resource_pins),
    Entry("stages.records", "stage records hash the files in the bag", records.stage_records),
    Entry("stages.audit-after-fit", "audit inference consumed the frozen temperature",
          records.audit_after_fit),
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
    Entry("crate.structure", "ro-crate-metadata.json is an RO-Crate 1.2 graph", crate.structure),
    Entry("crate.files", "crate lists every payload file with its sha256 and size", crate.files),
    Entry("crate.run", "crate's run reads the resources and produces the payload", crate.run),
    Entry("crate.signer", "crate names the bag's signer", crate.signer),
    Entry("figures.png", "figures are well-formed PNG images", figures.png),
)
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

    def run_entry(self, ctx: Context, entry: Entry, params: dict[str, str]) -> None:
        """Run one table entry with the expansion's parameters, when it applies."""
        if entry.when is not None and not entry.when(ctx):
            return
        self.run(entry.id.format(**params), entry.title.format(**params),
                 lambda: entry.fn(ctx, **params))

    def run_table(self, ctx: Context, table: Sequence[Entry | Group]) -> None:
        """Run every entry of `table` in order, expanding groups."""
        for item in table:
            if isinstance(item, Entry):
                self.run_entry(ctx, item, {})
                continue
            if item.when is not None and not item.when(ctx):
                continue
            for params in (item.each(ctx) if item.each is not None else [{}]):
                for entry in item.entries:
                    self.run_entry(ctx, entry, params)


@dataclass(frozen=True)
class Verification:
    checks: list[Check]
    signer_fingerprint: str | None
    """The key that signed the bundle, when the signature verifies (trusted or not)."""


def verify_tree(tree: BagTree | None, trust: Trust, *,
                expected_protocol_sha256: str | None = None,
                prelude: list[Check] | None = None, fail_fast: bool = False) -> Verification:
    """Run every check on a bag read into memory; return the report lines in order.

    fail_fast stops at the first failed check (the verdict is the same: rejected); the fuzz
    tests use it to try many tampered bags quickly."""
    ctx = Context(tree=tree, trust=trust, expected_protocol_sha256=expected_protocol_sha256)
    runner = Runner(fail_fast)
    runner.checks.extend(prelude or [])
    runner.run_table(ctx, TABLE)
    return Verification(runner.checks, ctx.signer_fingerprint)
