"""`python -m job reproduce`: re-run a bundle's inference with the pinned resources and attest,
signed, which level the re-run reached: `bit-identical`, `equivalent` or `mismatch`.

Order: the bundle is verified (integrity), its protocol read, the resources checked against the
hashes the bundle records (before any inference), the pools and every row's inputs (idx, text hash,
label) re-derived from the pinned data, the recorded batches re-run (all of them, or whole batches
drawn from a seed), every row run compared (logits, token count, truncation), the batches run
grouped by the CPU kind that signed and the kind that re-ran each (job.batch_kinds), every published
figure recomputed from the reproducer's logits (full mode), and the attestation written
atomically. Exit 0 bit-identical or equivalent, 1 mismatch, 2 bad input."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from numpy.typing import NDArray

from bundle import layout
from bundle.keys import fingerprint
from bundle.views.arithmetic import claim_warning, claimed_kinds, group_words, short_number, suspicious
from job.arithmetic import arithmetic_record, same_arithmetic, short
from job.batch_kinds import Side, groups, reproducer_workers
from job.batching import Tokenized
from job.dataset import Rows, load_rows
from job.engines import Engine, open_engine
from job.environment import cpu_model, git_commit, package_version
from job.errors import JobError
from job.labelmap import LabelMap
from job.logit_compare import RowComparison, compare_rows, grade, predictions_changed
from job.protocol import Protocol
from job.publishing.attestation import (
    attestation_bytes,
    build_reproduction_statement,
    refuse_existing_attestation,
    write_attestation,
)
from job.publishing.signing_keys import load_private_key
from job.reproduced_figures import TABLE_INPUTS, recomputed_changes
from job.resources import Resources, check_resources
from job.row_inputs import INPUT_FIELDS, InputDifference, differing_fields, input_differences
from job.runtime import BATCHES, LAYOUTS, OPERATORS, Settings
from job.sharded import ShardOptions
from job.split import make_pools
from job.spot_sample import draw_batches
from job.tolerance_bounds import fit_of, reproduction_bounds
from job.verified_bundle import RecordedPool, VerifiedBundle, load_verified

POOLS = layout.REPRODUCTION_POOLS
SHOWN_DIFFERENCES = 10


@dataclass(frozen=True)
class ReproduceOptions:
    """What `python -m job reproduce` was asked to do, once the command line is parsed."""

    bundle: Path  # bag folder or .tar.gz; only read
    out: Path  # the attestation to write; must not exist
    signing_key: Path  # the reproducer's Ed25519 private key
    sample: int | None = None  # re-run whole batches drawn with `seed` until they hold this many rows
    seed: int | None = None
    progress: bool = True
    shard: ShardOptions | None = None  # re-run the batches on a Ray cluster (job.sharded)

    def __post_init__(self) -> None:
        if (self.sample is None) != (self.seed is None):
            raise JobError("--sample and --seed go together: pass both (a spot check of whole batches drawn "
                           "with seed S until they hold N rows) or neither (every row).")


@dataclass(frozen=True)
class PoolFinding:
    """What the re-run found for one pool's compared rows (positions in pool order)."""

    compared: list[int]
    batches: list[int]  # recorded batches re-run
    row_batches: NDArray[np.int64]  # each compared row's recorded batch
    identical: NDArray[np.bool_]
    ulps: NDArray[np.int64]
    abs: NDArray[np.float64]
    prediction_changed: NDArray[np.bool_]
    logits: NDArray[np.float32]  # the reproducer's logits of every row re-run (NaN elsewhere), pool order
    labels: NDArray[np.int64]  # every row's label as the pinned data gives it, pool order


@dataclass(frozen=True)
class Finding:
    """What the re-run found for the compared rows of every pool, and the per-row inputs checked."""

    pools: dict[str, PoolFinding]
    inputs_checked: dict[str, int]  # field -> rows checked, over both pools
    input_differences: list[InputDifference]
    cluster: dict[str, Any] | None = None  # the reproducer's workers and the batches each re-ran (sharded)
    thread_layout: str = OPERATORS  # how the re-run's forwards used its threads (job.runtime.ThreadChoice.layout)

    @property
    def rows(self) -> int:
        return sum(len(f.compared) for f in self.pools.values())

    @property
    def same(self) -> int:
        return sum(int(f.identical.sum()) for f in self.pools.values())

    @property
    def largest_abs(self) -> float:
        return max((float(f.abs.max(initial=0.0)) for f in self.pools.values()), default=0.0)

    @property
    def largest_ulps(self) -> int:
        return max((int(f.ulps.max(initial=0)) for f in self.pools.values()), default=0)

    def within(self, tolerance: float) -> int:
        return sum(int((f.abs <= tolerance).sum()) for f in self.pools.values())

    @property
    def predictions_changed(self) -> int:
        return sum(int(f.prediction_changed.sum()) for f in self.pools.values())


def bundle_protocol(bundle: VerifiedBundle) -> Protocol:
    """The protocol the bundle ran under (data/protocol.json, verified), not the repository's."""
    return Protocol.from_bytes(bundle.protocol_raw, bundle.json(layout.PROTOCOL_JSON))


def _sampled_batches(bundle: VerifiedBundle, n: int, seed: int) -> dict[str, list[int]]:
    """Pool -> the recorded batches a `--sample n --seed seed` re-runs (job.spot_sample.draw_batches)."""
    sizes = []
    for name in POOLS:
        counts = np.bincount(bundle.pool(name).batch)
        sizes.append((name, [int(c) for c in counts]))
    return draw_batches(sizes, n, seed)


def _derived_inputs(rows: Rows, positions: tuple[int, ...]) -> dict[str, Any]:
    """idx, text hash and label of a pool's rows as the pinned data gives them, pool order."""
    return {"idx": [int(rows.ids[p]) for p in positions], "text_sha256": [rows.text_sha256[p] for p in positions],
            "label": [int(rows.labels[p]) for p in positions]}


def _recorded_inputs(pool: RecordedPool) -> dict[str, Any]:
    recorded = {"idx": pool.idx.tolist(), "text_sha256": list(pool.text_sha256), "label": pool.label.tolist(),
                "token_count": pool.token_count.tolist(), "truncated": pool.truncated.tolist()}
    if pool.full_token_count is not None:  # bundles written before the column have none to compare
        recorded["full_token_count"] = pool.full_token_count.tolist()
    return recorded


def _rerun_pool(engine: Engine, s: Settings, label_map: LabelMap | None, rows: Rows, positions: tuple[int, ...],
                theirs: RecordedPool, batches: list[int], progress: bool, temperature_sha256: str
                ) -> tuple[PoolFinding, dict[str, int], list[InputDifference]]:
    """Re-run `batches` of one pool as recorded on `engine` (this process or a Ray cluster) and
    compare every row they hold: logits, token counts and truncation. `positions` are the pool's
    rows in the re-derived dataset, pool order; `temperature_sha256` is the bundle's frozen
    temperature, which a sharded engine sends with every audit batch."""
    plan = theirs.batches()
    order = [plan[b] for b in batches]
    needed = sorted(r for batch in order for r in batch)
    local = {r: i for i, r in enumerate(needed)}
    # The run's inputs for these rows: the same texts (and pairs), tokenised by the same rule and
    # with token type ids for a model with segment embeddings, batch by batch as they run.
    texts, pairs = rows.inputs([positions[r] for r in needed])
    tokens = Tokenized(engine.tokenizer, texts, s.max_length, pairs, segments=engine.segments)
    mine = {"token_count": {r: int(tokens.lengths[local[r]]) for r in needed},
            "truncated": {r: bool(tokens.truncated[local[r]]) for r in needed},
            "full_token_count": {r: int(tokens.full_lengths[local[r]]) for r in needed}}
    checked, differences = input_differences(theirs.name, needed, _recorded_inputs(theirs), mine)
    logits = np.full(theirs.logits.shape, np.nan, dtype=np.float32)
    if needed:
        label = f"{theirs.name} re-run" if progress else None
        ran = engine.run(theirs.name, tokens, [[local[r] for r in b] for b in order], label, temperature_sha256)
        logits[needed] = ran if label_map is None else label_map.reorder(ran)  # stored in dataset label order
    found = logits[needed]
    if not np.isfinite(found).all():
        raise JobError(f"The model produced non-finite logits for {theirs.name} rows; the resources or the "
                       "machine are broken, so nothing can be compared.")
    result = compare_rows(found, theirs.logits[needed])
    finding = PoolFinding(
        compared=needed, batches=batches, row_batches=np.asarray(theirs.batch[needed], dtype=np.int64),
        identical=result.identical, ulps=result.ulps, abs=result.abs,
        prediction_changed=predictions_changed(found, theirs.logits[needed]), logits=logits,
        labels=np.asarray([int(rows.labels[p]) for p in positions], dtype=np.int64))
    return finding, checked, differences


def recorded_batches(cluster: dict[str, Any] | None, ran: dict[str, list[int]]) -> dict[str, Any] | None:
    """A sharded engine's record with each worker's batches renamed from their place in the plan it
    was given (pool -> position in `ran[pool]`) to the bundle's recorded batch numbers."""
    if cluster is None:
        return None
    workers = [{**w, "batches": {pool: sorted(ran[pool][i] for i in bs) for pool, bs in w["batches"].items()}}
               for w in cluster["workers"]]
    return {**cluster, "workers": workers}


def rerun(bundle: VerifiedBundle, protocol: Protocol, resources: Resources, sample: dict[str, list[int]] | None,
          progress: bool, shard: ShardOptions | None = None) -> Finding:
    """Re-derive the pools and every row's inputs, re-run the recorded batches (all, or those of
    `sample`: pool -> batches) here or on the cluster `shard` names, and compare every row of the
    batches run with the bundle.

    idx, text hash and label are compared on every row of both pools (they need no inference);
    token counts and truncation on the rows tokenised for the batches run; logits on those rows."""
    s = rerun_settings(bundle.json(layout.ENVIRONMENT_JSON), protocol, shard)
    rows = load_rows([f.local for f in resources.dataset.files], resources.dataset_spec, protocol.dataset)
    pools = make_pools(protocol.prefix, rows.ids, protocol.split.pools)
    recorded = {name: bundle.pool(name) for name in POOLS}
    checked: dict[str, int] = {}
    differences: list[InputDifference] = []

    def count(found: tuple[dict[str, int], list[InputDifference]]) -> None:
        for field, rows_checked in found[0].items():
            checked[field] = checked.get(field, 0) + rows_checked
        differences.extend(found[1])

    for name in POOLS:
        theirs, positions = recorded[name], pools[name].positions
        if len(positions) != len(theirs.idx):
            raise JobError(f"The {name} pool re-derived from the dataset has {len(positions)} rows, the "
                           f"bundle's predictions {len(theirs.idx)}; the bundle is not of this protocol.")
        count(input_differences(name, list(range(len(positions))), _recorded_inputs(theirs),
                                _derived_inputs(rows, positions)))
    results: dict[str, PoolFinding] = {}
    ran: dict[str, list[int]] = {}
    temperature_sha256 = bundle.sha256(layout.TEMPERATURE_JSON)
    with open_engine(shard, bundle.protocol_raw, bundle.json(layout.RESOURCES_JSON), resources, s) as engine:
        for name in POOLS:
            batches = ran[name] = sorted(recorded[name].batches()) if sample is None else sample[name]
            results[name], counted, differ = _rerun_pool(engine, s, protocol.label_map, rows, pools[name].positions,
                                                         recorded[name], batches, progress, temperature_sha256)
            count((counted, differ))
        cluster = recorded_batches(engine.cluster(), ran)
    order_of = {f: i for i, f in enumerate(INPUT_FIELDS)}
    differences.sort(key=lambda d: (POOLS.index(d.pool), order_of[d.field]))
    return Finding(results, {f: checked[f] for f in INPUT_FIELDS if f in checked}, differences, cluster, s.layout)


def rerun_settings(signer: dict[str, Any], protocol: Protocol, shard: ShardOptions | None) -> Settings:
    """The re-run's settings, so that an honest re-run on the signer's kind of CPU is bit-identical.
    A bundle whose batches ran in the BATCHES layout ran each forward on one thread: the re-run does
    the same, here at this machine's thread count, on a cluster with workers of one thread (unless
    --worker-cpus asks for more). Otherwise (OPERATORS, a cluster's workers, bundles written before
    the layout was recorded) each forward ran on the recorded count of threads: the re-run uses that
    count (signer_threads), one batch at a time."""
    one_thread_each = signer_layout(signer) == BATCHES
    if one_thread_each and shard is None:
        return Settings.from_protocol(protocol.inference, layout=BATCHES)
    if one_thread_each:
        return Settings.from_protocol(protocol.inference, 1, layout=OPERATORS)
    return Settings.from_protocol(protocol.inference, signer_threads(signer, protocol.inference.torch_threads),
                                  layout=OPERATORS)


def signer_layout(signer: dict[str, Any]) -> str:
    """How the signer's forwards used their threads: `threads.layout` where environment.json
    records one (job.runtime.ThreadChoice), OPERATORS for a cluster's workers and for bundles
    written before the layout was recorded."""
    threads = signer.get("threads")
    if isinstance(signer.get("cluster"), dict) or not isinstance(threads, dict):
        return OPERATORS
    found = threads.get("layout", OPERATORS)
    return found if found in LAYOUTS else OPERATORS


def signer_threads(signer: dict[str, Any], bound: int) -> int | None:
    """The torch thread count the signer's batches ran at, for the re-run to use: the workers' one
    count on a cluster, else the run's recorded `threads.used`; None (the machine's default) when
    the bundle records none, several, or one outside the protocol's bound.

    On some CPUs the logits depend on it: MKL's sgemm on an Intel Xeon (AVX-512, AMX) splits the
    inner dimension of a short, deep product (the feed-forward output, 64 to 192 rows of 1,536)
    across threads, so 1 and 2 threads round differently (docs/PERFORMANCE.md). Re-running at the
    signer's count is what lets an honest re-run on the same kind of CPU be bit-identical."""
    cluster = signer.get("cluster")
    if isinstance(cluster, dict):
        counts = {w.get("threads") for w in cluster.get("workers", []) if any(w.get("batches", {}).values())}
    else:
        threads = signer.get("threads")
        counts = {threads.get("used")} if isinstance(threads, dict) else set()
    if len(counts) != 1:
        return None
    (count,) = counts
    return count if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= bound else None


def first_differences(finding: Finding, recorded_idx: dict[str, list[int]]) -> list[dict[str, Any]]:
    """The first rows whose logits differ, pool by pool in pool order: pool, idx and the row's largest difference."""
    out: list[dict[str, Any]] = []
    for name in POOLS:
        f = finding.pools[name]
        for i, pos in enumerate(f.compared):
            if not f.identical[i] and len(out) < SHOWN_DIFFERENCES:
                out.append({"pool": name, "idx": recorded_idx[name][pos], "ulps": int(f.ulps[i]),
                            "abs": float(f.abs[i])})
    return out


def environment(thread_layout: str) -> dict[str, Any]:
    """Where the re-run happened: versions, CPU, threads and how its forwards used them, image,
    commit and the arithmetic used."""
    import torch  # deferred: the reproducer's torch is loaded by the re-run; this only reads its thread count

    return {"python": platform.python_version(), "torch": package_version("torch"),
            "transformers": package_version("transformers"), "numpy": package_version("numpy"),
            "cpu_model": cpu_model(),
            "threads": int(torch.get_num_threads()), "thread_layout": thread_layout,
            "image": os.environ.get("CALIBRATION_IMAGE"),
            "git_commit": git_commit(), "arithmetic": arithmetic_record()}


def figures_of(bundle: VerifiedBundle, protocol: Protocol, logits: dict[str, NDArray[np.float32]],
               labels: dict[str, NDArray[np.int64]]) -> dict[str, Any]:
    """Every published figure of `bundle` recomputed from these logits and labels (pool -> pool order),
    and those that differ at their published precision (job.reproduced_figures)."""
    files = {path: bundle.files[path] for path in TABLE_INPUTS}
    published = {path: (bundle.json(path) if path in bundle.files else None)
                 for path in (layout.TEMPERATURE_JSON, layout.METRICS_JSON, layout.POOLS_JSON,
                              layout.BOOTSTRAP_JSON, layout.STABILITY_JSON)}
    return recomputed_changes(protocol, {n: bundle.pool(n) for n in POOLS}, logits, labels, files, published)


def figures(bundle: VerifiedBundle, protocol: Protocol, finding: Finding) -> dict[str, Any]:
    """Every published figure recomputed from the reproducer's logits and labels (full mode)."""
    return figures_of(bundle, protocol, {n: finding.pools[n].logits for n in POOLS},
                      {n: finding.pools[n].labels for n in POOLS})


def batch_kinds(finding: Finding, signer_environment: dict[str, Any], reproducer_arithmetic: dict[str, Any],
                tolerance: float) -> dict[str, Any]:
    """The predicate's `batch_kinds`: each pool's re-run batches grouped by the CPU kind that signed
    them and the one that re-ran them (job.batch_kinds), and the reproducer's workers when sharded."""
    signer = Side(signer_environment.get("cluster"), signer_environment.get("arithmetic"))
    reproducer = Side(finding.cluster, reproducer_arithmetic)
    found = [groups(n, f.row_batches, RowComparison(f.identical, f.ulps, f.abs), f.prediction_changed, signer,
                    reproducer, tolerance)
             for n, f in finding.pools.items()]
    return {"groups": [g for pool in found for g in pool], "workers": reproducer_workers(finding.cluster)}


def predicate(options: ReproduceOptions, protocol: Protocol, resources: Resources, finding: Finding,
              recorded_idx: dict[str, list[int]], reproducer: str, changed: dict[str, Any] | None,
              signer_environment: dict[str, Any]) -> dict[str, Any]:
    """The reproduction predicate (schemas/reproduction.schema.json $defs.predicate); `signer_environment`
    is the bundle's environment.json (its arithmetic and, for a sharded run, its cluster)."""
    tolerance, source = protocol.logit_tolerance
    sampled = options.sample is not None
    env = environment(finding.thread_layout)
    verdict = grade(finding.same == finding.rows, finding.largest_abs, tolerance, finding.predictions_changed,
                    bool(finding.input_differences))
    return {
        "verdict": verdict,
        "mode": "sample" if sampled else "full",
        "protocol_sha256": protocol.sha256,
        "resources": {role: [{"path": f.path, "sha256": f.sha256} for f in repo.files]
                      for role, repo in (("model", resources.model), ("dataset", resources.dataset))},
        "rows": {"compared": finding.rows, "identical": finding.same, "within_tolerance": finding.within(tolerance),
                 "predictions_changed": finding.predictions_changed,
                 "pools": {n: {"count": len(finding.pools[n].compared),
                               "idx": [recorded_idx[n][p] for p in finding.pools[n].compared] if sampled else "all"}
                           for n in POOLS}},
        "tolerance": {"abs": tolerance, "source": source},
        "largest_difference": {"ulps": finding.largest_ulps, "abs": finding.largest_abs},
        "first_differences": first_differences(finding, recorded_idx),
        "inputs": {"checked": finding.inputs_checked,
                   "differing": differing_fields(finding.input_differences),
                   "first": [d.record() for d in finding.input_differences[:SHOWN_DIFFERENCES]]},
        "figures": changed,
        "sample": ({"n": options.sample, "seed": options.seed, "generator": layout.REPRODUCTION_GENERATOR,
                    "draw": layout.REPRODUCTION_BATCH_DRAW,
                    "batches": {n: finding.pools[n].batches for n in POOLS}} if sampled else None),
        "environment": env,
        "signer_arithmetic": signer_environment.get("arithmetic"),
        "batch_kinds": batch_kinds(finding, signer_environment, env["arithmetic"], tolerance),
        "reproducer_fingerprint": reproducer,
    }


def attested_bounds(bundle: VerifiedBundle, protocol: Protocol) -> dict[str, Any]:
    """What `equivalent` can move for this bundle (job.tolerance_bounds), from its stored logits:
    the attestation states it beside its verdict, whatever that verdict is."""
    m = bundle.json(layout.METRICS_JSON)
    pools = {n: (bundle.pool(n).logits.astype(np.float64), bundle.pool(n).label) for n in POOLS}
    return reproduction_bounds(pools, m["pools"], m["beta"], *protocol.logit_tolerance, fit_of(protocol))


def reproduce(options: ReproduceOptions, resolve: Callable[[Protocol], Resources],
              key: Ed25519PrivateKey | None = None) -> int:
    """Verify, check resources, re-run, compare, recompute, attest; returns 0 bit-identical or
    equivalent, 1 mismatch.

    `resolve` gives the resources for the bundle's protocol (a lock or the cache); `key` is the
    reproducer's key when the caller has loaded it already (default: read options.signing_key).
    Raises JobError (or BundleError) on bad input; then no attestation exists at options.out."""
    refuse_existing_attestation(options.out)  # before anything is verified or run
    if not options.out.parent.is_dir():
        raise JobError(f"The folder {options.out.parent} for --out does not exist; create it first.")
    key = key if key is not None else load_private_key(options.signing_key)
    bundle = load_verified(options.bundle)
    protocol = bundle_protocol(bundle)
    resources = resolve(protocol)
    check_resources(bundle.json(layout.RESOURCES_JSON), resources)
    sample = None
    if options.sample is not None and options.seed is not None:
        sample = _sampled_batches(bundle, options.sample, options.seed)
    finding = rerun(bundle, protocol, resources, sample, options.progress, options.shard)
    changed = figures(bundle, protocol, finding) if sample is None else None
    recorded_idx = {n: bundle.pool(n).idx.tolist() for n in POOLS}
    signer = bundle.json(layout.ENVIRONMENT_JSON)
    doc = predicate(options, protocol, resources, finding, recorded_idx, fingerprint(key), changed, signer)
    doc["bounds"] = attested_bounds(bundle, protocol)
    statement = build_reproduction_statement(
        bundle.statement_sha256, {layout.PREDICTIONS[n]: bundle.sha256(layout.PREDICTIONS[n]) for n in POOLS}, doc)
    write_attestation(options.out, attestation_bytes(statement, key))
    print(summary(doc, options.out, signer.get("cluster")))
    return 1 if doc["verdict"] == "mismatch" else 0


def _where(doc: dict[str, Any]) -> str:
    """"on the signer's arithmetic" or "on another CPU" (or another code path), with both named."""
    signer, mine = doc["signer_arithmetic"], doc["environment"]["arithmetic"]
    signed_kinds = {g["signed_on"] for g in doc["batch_kinds"]["groups"]}
    if len(signed_kinds) > 1:
        return (f"signed on {len(signed_kinds)} CPU kinds (MIXED), reproduced on {short(mine)}; judged batch by "
                "batch against each batch's recorded kind:")
    if signer is None:
        return f"reproduced on {short(mine)} (the bundle does not name its arithmetic)"
    if same_arithmetic(signer, mine):
        return f"on the signer's arithmetic ({short(mine)})"
    return f"on another CPU or code path: signed on {short(signer)}, reproduced on {short(mine)}"


def summary(doc: dict[str, Any], out: Path, signer_cluster: dict[str, Any] | None = None) -> str:
    """What the re-run found, in words, for the terminal: the level reached, then where; the
    bundle's worker records (`signer_cluster`) are treated as claims, never removing a warning."""
    rows, worst, tol = doc["rows"], doc["largest_difference"], doc["tolerance"]["abs"]
    mode = doc["mode"] if doc["sample"] is None else f"sample of {doc['sample']['n']}, seed {doc['sample']['seed']}"
    figs = doc["figures"]
    if figs is None:
        fig_words = "published figures not recomputed (a sample)"
    elif figs["changed"] == 0:
        fig_words = f"published figures unchanged ({figs['compared']} recomputed)"
    else:
        listed = "; ".join(f"{c['figure']} {c['from']} -> {c['to']}" for c in figs["listed"][:5])
        fig_words = f"{figs['changed']} of {figs['compared']} published figures changed ({listed})"
    if doc["verdict"] == "bit-identical":
        head = (f"bit-identical: {rows['compared']} rows compared ({mode}), every float32 logit the bundle's "
                f"bit for bit; {fig_words}")
    elif doc["verdict"] == "equivalent":
        head = (f"equivalent: {rows['compared']} rows compared ({mode}), every logit within {short_number(tol)} "
                f"(largest {short_number(worst['abs'])}, {worst['ulps']} ulps), predictions unchanged; {fig_words}")
    else:
        head = f"MISMATCH: {'; '.join(mismatch_reasons(doc))}; {fig_words}"
    return "\n".join([head, _where(doc), *_kind_lines(doc), *_claim_lines(doc, signer_cluster),
                      f"attestation written to {out}"])


def _claim_lines(doc: dict[str, Any], signer_cluster: dict[str, Any] | None) -> list[str]:
    """The warning no worker record can remove (bundle.views.arithmetic.claim_warning), judged from
    the arithmetic this process measured against the signer's recorded one."""
    signer, mine = doc["signer_arithmetic"], doc["environment"]["arithmetic"]
    measured_same = doc["batch_kinds"]["workers"] is None and bool(signer) and same_arithmetic(signer, mine)
    warning = claim_warning(doc["verdict"], claimed_kinds(signer_cluster), measured_same)
    return [warning] if warning is not None else []


def _kind_lines(doc: dict[str, Any]) -> list[str]:
    """The batch-kind groups, one line each, when the batches ran on more than one pair of kinds
    or a same-kind group is not bit-identical (otherwise the line above says it all)."""
    found = doc["batch_kinds"]["groups"]
    pairs = {(g["signed_on"], g["rerun_on"]) for g in found}
    if len(pairs) < 2 and not any(suspicious(g) for g in found):
        return []
    return [f"  {group_words(g)}" for g in found]


def mismatch_reasons(doc: dict[str, Any]) -> list[str]:
    """Why a reproduction is a mismatch, most telling first: inputs, then predictions, then logits."""
    rows, worst, tol = doc["rows"], doc["largest_difference"], doc["tolerance"]["abs"]
    out = []
    for field, count in doc["inputs"]["differing"].items():
        first = next(d for d in doc["inputs"]["first"] if d["field"] == field) if any(
            d["field"] == field for d in doc["inputs"]["first"]) else None
        example = f" (first: {first['pool']} idx {first['idx']}: bundle {first['bundle']!r}, data {first['found']!r})" \
            if first else ""
        out.append(f"{count} rows' {field} differ from the pinned data{example}")
    if rows["predictions_changed"]:
        out.append(f"{rows['predictions_changed']} rows' predicted class changed")
    beyond = rows["compared"] - rows["within_tolerance"]
    if beyond:
        first = ", ".join(f"{d['pool']} idx {d['idx']}" for d in doc["first_differences"])
        out.append(f"{beyond} of {rows['compared']} rows differ beyond the tolerance {short_number(tol)} (largest "
                   f"{short_number(worst['abs'])} absolute, {worst['ulps']} ulps; first rows that differ: {first})")
    return out
