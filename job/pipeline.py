"""The formal run, stage by stage, as the protocol orders it:
split -> calibration inference -> fit -> temperature frozen -> audit inference -> metrics -> sealed bundle."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bundle import layout
from bundle.predicate import restated_predicate
from bundle.views.figures import render_figures
from bundle.views.report import report_markdown as render_report
from job.arithmetic import arithmetic_record
from job.artifacts import Artifacts
from job.batching import Tokenized
from job.bootstrap import bootstrap_record
from job.calibration import TemperatureFit, fit_temperature, softmax
from job.dataset import Rows, Strings, load_rows, take
from job.engines import Engine, LocalEngine, open_engine
from job.environment import PeakRss, StageClock, environment_record
from job.errors import JobError
from job.estimators import estimators_record
from job.forward_check import check_packed_forward
from job.inference import pool_output
from job.labelmap import LabelMap
from job.metrics import compute_metrics
from job.perclass import class_warnings, per_class
from job.plausibility import below_chance, run_warnings, truncation_summary
from job.predictions import PoolOutput, Predictions, predictions_table
from job.process import configure_sharded_driver, release_free_memory
from job.protocol import AUDIT, Protocol
from job.protocol import CALIBRATION as CAL
from job.publishing.ledger import Ledger
from job.resources import Resources
from job.rocrate import Publication, crate_bytes
from job.runtime import Settings
from job.split import Pool, make_pools
from job.stability import stability_record
from job.tolerance_bounds import fit_of, reproduction_bounds

if TYPE_CHECKING:
    from job.sharded import ShardOptions


@dataclass(frozen=True)
class RunResult:
    """What a finished execute() hands its caller: the records it wrote, as written, and the
    ledger of every payload file's digests taken as it was written (what job.publishing.seal.seal seals)."""

    temperature: dict[str, Any]  # data/temperature.json
    metrics: dict[str, Any]  # data/metrics.json
    bootstrap: dict[str, Any] | None  # data/bootstrap.json; None when the protocol has no bootstrap
    stability: dict[str, Any] | None  # data/stability.json; None when the protocol has no such study
    predicate: dict[str, Any]  # what the bundle signs (bundle.predicate.restated_predicate)
    ledger: Ledger


def pools_record(protocol: Protocol, resources: Resources, rows: Rows, pools: dict[str, Pool]) -> dict[str, Any]:
    members: dict[str, list[dict[str, Any]]] = {
        name: [{"idx": int(rows.ids[p]), "split_key": k, "text_sha256": rows.text_sha256[p]}
               for p, k in zip(pool.positions, pool.keys, strict=True)]
        for name, pool in pools.items()
    }
    seen: set[int] = set()
    for entries in members.values():
        ids = {int(e["idx"]) for e in entries}
        if seen & ids:
            raise JobError("The pools overlap; the split rule must give disjoint pools.")
        seen |= ids
    return {
        "protocol_sha256": protocol.sha256,
        "dataset_sha256": resources.dataset.files[0].sha256,
        "prefix": protocol.prefix,
        "pools": members,
        "sizes": {name: len(pool.positions) for name, pool in pools.items()},
    }


def check_finite(out: PoolOutput, pool: str) -> None:
    bad = ~np.isfinite(out.logits).all(axis=1)
    if bad.any():
        raise JobError(f"The model produced non-finite logits for {int(bad.sum())} {pool} rows; "
                       "the weights or the inputs are broken, so no temperature can be fitted.")


def _infer(engine: Engine, rows: Rows, pool: Pool, s: Settings, progress: bool,
           label_map: LabelMap | None = None, temperature_sha256: str | None = None) -> PoolOutput:
    """The pool's logits in dataset label order. Rows are tokenised batch by batch as they run
    (job.batching.Tokenized), so a pool's token ids are never all held at once."""
    texts, pairs = rows.inputs(pool.positions)
    tokens = Tokenized(engine.tokenizer, texts, s.max_length, pairs, segments=engine.segments)
    out = pool_output(tokens, pool.keys, s, lambda plan: engine.run(
        pool.name, tokens, plan, f"{pool.name} inference" if progress else None, temperature_sha256))
    check_finite(out, pool.name)
    return out if label_map is None else label_map.apply(out)


def pool_rows(rows: Rows, pool: Pool) -> tuple[Rows, Pool]:
    """The pool's own rows, in the pool's order, and the pool renumbered to them: all that its
    inference, its predictions table and the forward check read, so the dataset's other rows can go."""
    return rows.take(pool.positions), Pool(pool.name, tuple(range(len(pool.positions))), Strings(pool.keys))


def load_dataset_rows(protocol: Protocol, resources: Resources) -> Rows:
    """The dataset's rows from every pinned data file, in listed order, read as the protocol says."""
    return load_rows([f.local for f in resources.dataset.files], resources.dataset_spec, protocol.dataset)


def check_model_fits(protocol: Protocol, resources: Resources) -> None:
    """Before any inference: the model's config names its outputs as the protocol's label map says."""
    if protocol.label_map is not None:
        protocol.label_map.check_config(resources.model.local("config.json"))


def _table(rows: Rows, pool: Pool, out: PoolOutput) -> Any:
    pos = list(pool.positions)
    return predictions_table(rows.ids[pos], pool.keys, take(rows.text_sha256, pos),
                             rows.labels[pos], out)


def temperature_record(protocol: Protocol, fit: TemperatureFit, n: int, predictions_sha256: str) -> dict[str, Any]:
    f = protocol.fit
    return {
        "protocol_sha256": protocol.sha256, "pool": CAL, "n": n, "predictions_sha256": predictions_sha256,
        "temperature": fit.temperature, "beta": fit.beta, "t_min": f.t_min,
        "t_max": f.t_max, "steps": f.steps, "boundary": fit.boundary,
        "boundary_side": fit.boundary_side, "final_gradient": fit.final_gradient,
        "bracket": list(fit.bracket), "nll_before": fit.nll_before, "nll_after": fit.nll_after,
    }


def trajectory_record(protocol: Protocol, fit: TemperatureFit) -> dict[str, Any]:
    return {
        "protocol_sha256": protocol.sha256,
        "beta_min": protocol.fit.beta_min, "beta_max": protocol.fit.beta_max,
        "g_at_beta_min": fit.g_at_beta_min, "g_at_beta_max": fit.g_at_beta_max,
        "steps": [{"step": s.step, "lo": s.lo, "hi": s.hi, "mid": s.mid, "g": s.g} for s in fit.steps],
    }


def metrics_record(protocol: Protocol, predictions: Mapping[str, Predictions], beta: float,
                   temperature: dict[str, Any], temperature_sha256: str) -> dict[str, Any]:
    """Raw and calibrated metrics of both pools, computed from the float32 logits as written; the
    warnings the audit accuracy and the fitted temperature call for; each pool's truncation.
    `predictions`: both pools' records by pool name."""
    pools: dict[str, Any] = {}
    unchanged = True
    logits = {name: predictions[name].logits.astype(np.float64) for name in (AUDIT, CAL)}
    for name, role in ((AUDIT, "evidence"), (CAL, "fit pool, not evidence")):
        pred = predictions[name]
        z = logits[name]
        unchanged &= bool((softmax(beta * z).argmax(axis=1) == z.argmax(axis=1)).all())
        pools[name] = {
            "role": role, "predictions_sha256": pred.sha256,
            "raw": compute_metrics(z, pred.labels, 1.0, protocol.threshold),
            "calibrated": compute_metrics(z, pred.labels, beta, protocol.threshold),
        }
    audit = pools[AUDIT]["raw"]
    max_length = protocol.inference.max_length
    classes = {name: per_class(logits[name], predictions[name].labels) for name in (AUDIT, CAL)}
    tau, source = protocol.logit_tolerance
    bounds = reproduction_bounds({name: (logits[name], predictions[name].labels) for name in (AUDIT, CAL)},
                                 pools, beta, tau, source, fit_of(protocol))
    record = {"protocol_sha256": protocol.sha256, "temperature_sha256": temperature_sha256,
              "beta": beta, "temperature": 1.0 / beta, "argmax_unchanged": unchanged, "pools": pools,
              "warnings": (run_warnings(audit["accuracy"], len(protocol.resources.dataset.labels), temperature)
                           + class_warnings(classes[AUDIT])),
              "per_class": classes, "reproduction_bounds": bounds,
              "truncation": {name: truncation_summary(predictions[name].full_token_count,
                                                      predictions[name].truncated, max_length)
                             for name in (AUDIT, CAL)}}
    if protocol.estimators:
        boot = protocol.bootstrap
        record["estimators"] = estimators_record(
            protocol.estimators, AUDIT, logits[AUDIT], predictions[AUDIT].labels,
            beta, boot.resamples if boot else 0, boot.seed if boot else 0)
    return record


def as_written(doc: Any) -> Any:
    """`doc` with every object's keys in the order its canonical JSON file holds them (sorted), so
    that a view iterating over a record in memory reads it as it would read the file."""
    if isinstance(doc, Mapping):
        return {key: as_written(doc[key]) for key in sorted(doc)}
    if isinstance(doc, list | tuple):
        return [as_written(v) for v in doc]
    return doc


def stage(protocol: Protocol, name: str, consumed: dict[str, str], produced: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "protocol_sha256": protocol.sha256, "consumed": consumed, "produced": produced}


def execute(protocol: Protocol, resources: Resources, data_dir: Path, progress: bool = True, *,
            signer_fingerprint: str | None = None, date_published: str | None = None,
            publication: Publication | None = None, threads: int | None = None,
            shard: ShardOptions | None = None) -> RunResult:
    """Run every stage into data_dir and return the records written. Signing and publishing happen elsewhere.

    signer_fingerprint: the key that will sign the bundle (recorded in ro-crate-metadata.json);
    date_published: the crate's datePublished (default job.publishing.dates.bagging_date());
    publication: the crate's licence, publisher and authors (default job.rocrate.Publication());
    threads: torch threads, within the protocol's torch_threads (default: job.runtime.ThreadChoice's);
    shard: run both pools' batches on a Ray cluster (job.sharded) instead of in this process."""
    art = Artifacts(data_dir)
    clock = StageClock()
    stages: list[dict[str, Any]] = []
    # On a cluster the workers run the model, each with --worker-cpus threads: that is the run's
    # thread count (environment.json `threads`, checked against the torch the workers report).
    s = Settings.from_protocol(protocol.inference, shard.worker_cpus if shard is not None and
                               shard.worker_cpus is not None else threads)
    cal_pred, audit_pred = layout.PREDICTIONS[CAL], layout.PREDICTIONS[AUDIT]
    if shard is not None:
        configure_sharded_driver()  # before the first table is read: the driver's memory stays flat in the split
    with PeakRss() as rss, contextlib.ExitStack() as stack:
        with clock.stage("split"):
            art.write_bytes(layout.PROTOCOL_JSON, protocol.raw)
            art.write_json(layout.RESOURCES_JSON, resources.record())
            rows = load_dataset_rows(protocol, resources)
            pools = make_pools(protocol.split.prefix, rows.ids, protocol.split.pools)
            art.write_json(layout.POOLS_JSON, pools_record(protocol, resources, rows, pools))
            # What the report shows of pools.json: its per-row members are not kept past the split.
            pool_sizes = {"sizes": {name: len(pool.positions) for name, pool in pools.items()}}
            stages.append(stage(protocol, "split", art.pick(layout.PROTOCOL_JSON, layout.RESOURCES_JSON),
                                art.pick(layout.POOLS_JSON)))
            # Past the split only the inferred pools' rows are read, each until its stage is done.
            cal_rows, cal_pool = pool_rows(rows, pools[CAL])
            audit_rows, audit_pool = pool_rows(rows, pools[AUDIT])
            del rows, pools
            release_free_memory()  # the data files' tables, the pools record and the unused rows, before the weights
        with clock.stage("load-model"):
            check_model_fits(protocol, resources)
            engine = stack.enter_context(open_engine(shard, protocol.raw, resources.record(), resources, s))
            torch_info = engine.torch_info
            arithmetic = arithmetic_record()  # after the engine set up torch (this process; workers: cluster)
        with clock.stage("calibration-inference"):
            cal_out = _infer(engine, cal_rows, cal_pool, s, progress, protocol.label_map)
            cal_table = _table(cal_rows, cal_pool, cal_out)
            cal = Predictions.of_table(CAL, cal_table, art.write_table(cal_pred, cal_table))
            del cal_out, cal_table
            stages.append(stage(protocol, "calibration-inference",
                                art.pick(layout.PROTOCOL_JSON, layout.RESOURCES_JSON, layout.POOLS_JSON),
                                art.pick(cal_pred)))
        with clock.stage("fit"):
            f = protocol.fit
            fit = fit_temperature(cal.logits.astype(np.float64), cal.labels, f.t_min, f.t_max, f.steps)
            temperature = temperature_record(protocol, fit, len(cal.labels), cal.sha256)
            trajectory = trajectory_record(protocol, fit)
            temperature_sha256 = art.write_json(layout.TEMPERATURE_JSON, temperature)
            art.write_json(layout.TRAJECTORY_JSON, trajectory)
            art.freeze(layout.TEMPERATURE_JSON)
            stages.append(stage(protocol, "fit", art.pick(cal_pred),
                                art.pick(layout.TEMPERATURE_JSON, layout.TRAJECTORY_JSON)))
        with clock.stage("audit-inference"):
            if not art.unchanged(layout.TEMPERATURE_JSON):
                raise JobError("temperature.json changed before the audit; the run is void, start it again.")
            audit_out = _infer(engine, audit_rows, audit_pool, s, progress, protocol.label_map, temperature_sha256)
            audit_table = _table(audit_rows, audit_pool, audit_out)
            audit = Predictions.of_table(AUDIT, audit_table, art.write_table(audit_pred, audit_table))
            # The largest pool's texts and hashes, before the studies:
            del audit_rows, audit_pool, audit_out, audit_table
            release_free_memory()
            stages.append(stage(protocol, "audit-inference",
                                art.pick(layout.PROTOCOL_JSON, layout.RESOURCES_JSON, layout.POOLS_JSON,
                                         layout.TEMPERATURE_JSON),
                                art.pick(audit_pred)))
        # After both pools, not before: transformers' modeling stack (~80 MB resident) then never sits
        # under a pool's activations. A mismatch still stops the run before anything is sealed.
        with clock.stage("forward-check"):
            forward_check = engine.forward_check(list(cal_rows.texts), list(cal_pool.keys))
            del cal_rows, cal_pool
            cluster = engine.cluster()
            stack.close()  # a cluster's workers are not needed past this point
        with clock.stage("metrics"):
            metrics = metrics_record(protocol, {CAL: cal, AUDIT: audit}, fit.beta, temperature, temperature_sha256)
            metrics_sha256 = art.write_json(layout.METRICS_JSON, metrics)
            stages.append(stage(protocol, "metrics", art.pick(layout.TEMPERATURE_JSON, cal_pred, audit_pred),
                                art.pick(layout.METRICS_JSON)))
        # Pre-registered studies on the frozen artifacts: descriptive, never fed back into the fit.
        bootstrap = stability = None
        if protocol.bootstrap is not None:
            with clock.stage("bootstrap"):
                bootstrap = bootstrap_record(protocol.bootstrap, protocol.sha256, audit, fit.beta,
                                             temperature_sha256, metrics_sha256)
                art.write_json(layout.BOOTSTRAP_JSON, bootstrap)
                release_free_memory()
        if protocol.stability is not None:
            with clock.stage("stability"):
                stability = stability_record(protocol.stability, protocol.fit, protocol.sha256, cal, audit,
                                             temperature_sha256)
                art.write_json(layout.STABILITY_JSON, stability)
        art.write_json(layout.STAGES_JSON, {"protocol_sha256": protocol.sha256, "stages": stages})
    thread_record = None if s.thread_choice is None else s.thread_choice.record()
    environment = environment_record(torch_info, clock, rss.mb, forward_check, thread_record, arithmetic,
                                     engine.forward_choice)
    if cluster is not None:
        environment["cluster"] = cluster
    art.write_json(layout.ENVIRONMENT_JSON, environment)
    # Views of the records above, as written: figures, the report, then the crate (last: it describes all).
    figures = render_figures(metrics, audit.logits.astype(np.float64), audit.labels)
    for rel, png in figures.items():
        art.write_bytes(f"{layout.DATA_DIR}/{rel}", png)
    del cal, audit
    resources_doc = resources.record()
    docs = {layout.PROTOCOL_JSON: protocol.doc, layout.RESOURCES_JSON: resources_doc,
            layout.POOLS_JSON: pool_sizes, layout.TEMPERATURE_JSON: temperature, layout.TRAJECTORY_JSON: trajectory,
            layout.METRICS_JSON: metrics, layout.ENVIRONMENT_JSON: environment, layout.BOOTSTRAP_JSON: bootstrap,
            layout.STABILITY_JSON: stability}
    report = render_report({path: as_written(doc) for path, doc in docs.items()}, protocol.sha256, sorted(figures))
    art.write_bytes(layout.REPORT_MD, report.encode("utf-8"))
    if date_published is None:
        from job.publishing.dates import bagging_date
        date_published = bagging_date()
    publication = publication or Publication()
    written = {layout.data_name(path): facts for path, facts in art.ledger.items()}
    art.write_bytes(layout.RO_CRATE_JSON, crate_bytes(written, protocol=protocol.doc, resources=resources_doc,
                                                      environment=environment, signer_fingerprint=signer_fingerprint,
                                                      date_published=date_published, publication=publication))
    predicate = restated_predicate(protocol_sha256=protocol.sha256, resources=resources_doc,
                                   temperature=temperature, temperature_sha256=temperature_sha256, metrics=metrics,
                                   publication=publication.record())
    release_free_memory()  # the views' transient buffers, before sealing
    return RunResult(temperature=temperature, metrics=metrics, bootstrap=bootstrap, stability=stability,
                     predicate=predicate, ledger=art.ledger)


def smoke(protocol: Protocol, resources: Resources) -> dict[str, Any]:
    """The first rows of the calibration pool through the whole chain; raises JobError on any break."""
    s = Settings.from_protocol(protocol.inference)
    rows = load_dataset_rows(protocol, resources)
    check_model_fits(protocol, resources)
    pools = make_pools(protocol.split.prefix, rows.ids, protocol.split.pools)
    full = pools[protocol.split.smoke_pool]
    n = protocol.split.smoke_rows
    pool = Pool(full.name, full.positions[:n], full.keys[:n])
    engine = LocalEngine(resources, s)
    model = engine.model
    tokenizer = model.tokenizer
    sample = rows.texts[pool.positions[0]]
    unk = tokenizer.unk_token_id
    if unk is not None and unk in tokenizer(sample)["input_ids"]:
        raise JobError("The tokenizer maps words of a plain sentence to [UNK]; load it from the model "
                       "directory so that its vocabulary is used.")
    out = _infer(engine, rows, pool, s, progress=False, label_map=protocol.label_map)
    k = len(resources.dataset_spec["labels"])
    if out.logits.shape != (n, k):
        raise JobError(f"The model's logits have shape {list(out.logits.shape)}, expected [{n}, {k}]; "
                       "the classifier does not match the dataset's labels.")
    probs = softmax(out.logits.astype(np.float64))
    if not np.allclose(probs.sum(axis=1), 1.0, atol=1e-12):
        raise JobError("Probabilities do not sum to 1; the logits are broken.")
    labels = rows.labels[list(pool.positions)]
    forward_check = check_packed_forward(model, resources.model, s, [rows.texts[p] for p in pool.positions],
                                         pool.keys)
    correct = int((out.logits.argmax(axis=1) == labels).sum())
    return {"rows": n, "shape": list(out.logits.shape), "finite": True,
            "max_prob_sum_error": float(np.abs(probs.sum(axis=1) - 1).max()),
            "correct": correct, "accuracy": correct / n, "chance": 1.0 / k,
            "warning": below_chance(correct / n, k),
            "tokens": int(out.token_count.sum()), "forward_check": forward_check}
