"""The formal run, stage by stage, as the protocol orders it:
split -> load the model -> calibration inference -> fit (temperature frozen) -> audit inference ->
forward check -> metrics -> studies; then the environment, the views (figures, report) and the crate.
execute() reads as that list, one small function per stage; the records each stage writes are
built by job.records. Sealing and signing happen in job.run."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bundle import layout
from bundle.predicate import restated_predicate
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
from job.forward_check import check_packed_forward
from job.inference import pool_output
from job.labelmap import LabelMap
from job.plausibility import below_chance
from job.predictions import PoolOutput, Predictions, predictions_table
from job.process import configure_sharded_driver, release_free_memory
from job.protocol import AUDIT, Protocol
from job.protocol import CALIBRATION as CAL
from job.publishing.dates import bagging_date
from job.publishing.ledger import Ledger
from job.records import metrics_record, pools_record, stage_record, temperature_record, trajectory_record
from job.resources import Resources
from job.rocrate import Publication, crate_bytes
from job.runtime import OPERATORS, Settings
from job.sharded import ShardOptions
from job.split import Pool, make_pools
from job.stability import stability_record

__all__ = ["RunResult", "execute", "run_settings", "smoke"]


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


def as_written(doc: Any) -> Any:
    """`doc` with every object's keys in the order its canonical JSON file holds them (sorted), so
    that a view iterating over a record in memory reads it as it would read the file."""
    if isinstance(doc, Mapping):
        return {key: as_written(doc[key]) for key in sorted(doc)}
    if isinstance(doc, list | tuple):
        return [as_written(v) for v in doc]
    return doc


def run_settings(protocol: Protocol, threads: int | None = None, shard: ShardOptions | None = None) -> Settings:
    """The run's inference settings: the one place its thread count is chosen (raises JobError on a
    bad --threads). Here, the BATCHES layout: as many batches at once as threads, each forward on
    one. On a cluster the workers run the model, each its batches one at a time with --worker-cpus
    threads (the OPERATORS layout): that is the run's thread count (environment.json `threads`,
    checked against the torch the workers report)."""
    if shard is None:
        return Settings.from_protocol(protocol.inference, threads)
    workers = shard.worker_cpus if shard.worker_cpus is not None else threads
    return Settings.from_protocol(protocol.inference, workers, layout=OPERATORS)


@dataclass
class _Run:
    """What every stage of one execute() shares: its inputs, where it writes, its clock, the stage
    records so far, and the pools' rows, each held only until the last stage that reads it."""

    protocol: Protocol
    resources: Resources
    recorded: dict[str, Any]  # data/resources.json, built once
    settings: Settings
    progress: bool
    art: Artifacts
    clock: StageClock = field(default_factory=StageClock)
    stages: list[dict[str, Any]] = field(default_factory=list)
    inputs: dict[str, tuple[Rows, Pool]] = field(default_factory=dict)  # pool -> its rows, renumbered

    def record_stage(self, name: str, consumed: tuple[str, ...], produced: tuple[str, ...]) -> None:
        self.stages.append(stage_record(self.protocol, name, self.art.pick(*consumed), self.art.pick(*produced)))


@dataclass(frozen=True)
class _Fit:
    """What the fit stage hands on: the fit and its two records, and the frozen temperature's sha256."""

    fit: TemperatureFit
    temperature: dict[str, Any]
    trajectory: dict[str, Any]
    sha256: str


def execute(protocol: Protocol, resources: Resources, data_dir: Path, progress: bool = True, *,
            signer_fingerprint: str | None = None, date_published: str | None = None,
            publication: Publication | None = None, threads: int | None = None,
            shard: ShardOptions | None = None, settings: Settings | None = None) -> RunResult:
    """Run every stage into data_dir and return the records written. Signing and publishing happen elsewhere.

    signer_fingerprint: the key that will sign the bundle (recorded in ro-crate-metadata.json);
    date_published: the crate's datePublished (default job.publishing.dates.bagging_date());
    publication: the crate's licence, publisher and authors (default job.rocrate.Publication());
    threads: torch threads, within the protocol's torch_threads (default: job.runtime.ThreadChoice's);
    shard: run both pools' batches on a Ray cluster (job.sharded) instead of in this process;
    settings: the run's settings when the caller has chosen them already (run_settings), else
    chosen here from `threads` and `shard`."""
    run = _Run(protocol, resources, resources.record(), settings or run_settings(protocol, threads, shard),
               progress, Artifacts(data_dir))
    if shard is not None:
        configure_sharded_driver()  # before the first table is read: the driver's memory stays flat in the split
    with PeakRss() as rss, contextlib.ExitStack() as stack:
        pool_sizes = _split(run)
        engine, arithmetic = _load_model(run, stack, shard)
        cal = _calibration_inference(run, engine)
        fitted = _fit(run, cal)
        audit = _audit_inference(run, engine, fitted.sha256)
        forward_check, cluster = _forward_check(run, engine, stack)
        metrics, metrics_sha256 = _metrics(run, cal, audit, fitted)
        bootstrap, stability = _studies(run, cal, audit, fitted, metrics_sha256)
        run.art.write_json(layout.STAGES_JSON, {"protocol_sha256": protocol.sha256, "stages": run.stages})
    environment = _environment(run, engine, rss.mb, forward_check, arithmetic, cluster)
    figures = _figures(run, metrics, audit)
    del cal, audit
    docs = {layout.PROTOCOL_JSON: protocol.doc, layout.RESOURCES_JSON: run.recorded,
            layout.POOLS_JSON: pool_sizes, layout.TEMPERATURE_JSON: fitted.temperature,
            layout.TRAJECTORY_JSON: fitted.trajectory, layout.METRICS_JSON: metrics,
            layout.ENVIRONMENT_JSON: environment, layout.BOOTSTRAP_JSON: bootstrap, layout.STABILITY_JSON: stability}
    _report(run, docs, figures)
    publication = publication or Publication()
    _crate(run, environment, signer_fingerprint, date_published or bagging_date(), publication)
    predicate = restated_predicate(protocol_sha256=protocol.sha256, resources=run.recorded,
                                   temperature=fitted.temperature, temperature_sha256=fitted.sha256,
                                   metrics=metrics, publication=publication.record())
    release_free_memory()  # the views' transient buffers, before sealing
    return RunResult(temperature=fitted.temperature, metrics=metrics, bootstrap=bootstrap, stability=stability,
                     predicate=predicate, ledger=run.art.ledger)


def _split(run: _Run) -> dict[str, Any]:
    """split: the protocol and resources written, the pools drawn and written; past it only the
    inferred pools' rows are held, each until its last stage. Returns what the report shows of
    pools.json (its sizes: the per-row members are not kept past the split)."""
    protocol, art = run.protocol, run.art
    with run.clock.stage("split"):
        art.write_bytes(layout.PROTOCOL_JSON, protocol.raw)
        art.write_json(layout.RESOURCES_JSON, run.recorded)
        rows = load_dataset_rows(protocol, run.resources)
        pools = make_pools(protocol.split.prefix, rows.ids, protocol.split.pools)
        art.write_json(layout.POOLS_JSON, pools_record(protocol, run.resources, rows, pools))
        run.record_stage("split", (layout.PROTOCOL_JSON, layout.RESOURCES_JSON), (layout.POOLS_JSON,))
        run.inputs = {name: pool_rows(rows, pools[name]) for name in (CAL, AUDIT)}
        sizes = {"sizes": {name: len(pool.positions) for name, pool in pools.items()}}
        del rows, pools
        release_free_memory()  # the data files' tables, the pools record and the unused rows, before the weights
    return sizes


def _load_model(run: _Run, stack: contextlib.ExitStack, shard: ShardOptions | None) -> tuple[Engine, dict[str, Any]]:
    """load-model: the model checked against the label map, then loaded here or on the cluster's
    workers for the rest of `stack`; and the arithmetic this process measured once torch is set up."""
    with run.clock.stage("load-model"):
        check_model_fits(run.protocol, run.resources)
        engine = stack.enter_context(open_engine(shard, run.protocol.raw, run.recorded, run.resources,
                                                 run.settings))
        return engine, arithmetic_record()  # after the engine set up torch (this process; workers: cluster)


def _calibration_inference(run: _Run, engine: Engine) -> Predictions:
    """calibration-inference: the calibration pool's predictions written (its rows stay for the forward check)."""
    with run.clock.stage("calibration-inference"):
        rows, pool = run.inputs[CAL]
        cal = _predict(run, engine, rows, pool, None)
        run.record_stage("calibration-inference", (layout.PROTOCOL_JSON, layout.RESOURCES_JSON, layout.POOLS_JSON),
                         (layout.PREDICTIONS[CAL],))
    return cal


def _fit(run: _Run, cal: Predictions) -> _Fit:
    """fit: the temperature fitted on the calibration logits as written, its records written and frozen."""
    art, f = run.art, run.protocol.fit
    with run.clock.stage("fit"):
        fit = fit_temperature(cal.logits.astype(np.float64), cal.labels, f.t_min, f.t_max, f.steps)
        temperature = temperature_record(run.protocol, fit, len(cal.labels), cal.sha256)
        trajectory = trajectory_record(run.protocol, fit)
        sha256 = art.write_json(layout.TEMPERATURE_JSON, temperature)
        art.write_json(layout.TRAJECTORY_JSON, trajectory)
        art.freeze(layout.TEMPERATURE_JSON)
        run.record_stage("fit", (layout.PREDICTIONS[CAL],), (layout.TEMPERATURE_JSON, layout.TRAJECTORY_JSON))
    return _Fit(fit, temperature, trajectory, sha256)


def _audit_inference(run: _Run, engine: Engine, temperature_sha256: str) -> Predictions:
    """audit-inference: only under the frozen temperature, the audit pool's predictions written;
    its rows (the largest pool's texts and hashes) go before the studies."""
    with run.clock.stage("audit-inference"):
        if not run.art.unchanged(layout.TEMPERATURE_JSON):
            raise JobError("temperature.json changed before the audit; the run is void, start it again.")
        rows, pool = run.inputs.pop(AUDIT)
        audit = _predict(run, engine, rows, pool, temperature_sha256)
        del rows, pool
        release_free_memory()
        run.record_stage("audit-inference", (layout.PROTOCOL_JSON, layout.RESOURCES_JSON, layout.POOLS_JSON,
                                             layout.TEMPERATURE_JSON), (layout.PREDICTIONS[AUDIT],))
    return audit


def _predict(run: _Run, engine: Engine, rows: Rows, pool: Pool, temperature_sha256: str | None) -> Predictions:
    """One pool inferred and its predictions table written; only its record is kept."""
    out = _infer(engine, rows, pool, run.settings, run.progress, run.protocol.label_map, temperature_sha256)
    table = _table(rows, pool, out)
    return Predictions.of_table(pool.name, table, run.art.write_table(layout.PREDICTIONS[pool.name], table))


def _forward_check(run: _Run, engine: Engine, stack: contextlib.ExitStack
                   ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """forward-check, after both pools, not before: transformers' modeling stack (~80 MB resident)
    then never sits under a pool's activations, and a mismatch still stops the run before anything
    is sealed. Returns the check's record and the cluster's (None in this process); a cluster's
    workers end here, since nothing past this point needs them."""
    with run.clock.stage("forward-check"):
        rows, pool = run.inputs.pop(CAL)
        forward_check = engine.forward_check(list(rows.texts), list(pool.keys))
        del rows, pool
        cluster = engine.cluster()
        stack.close()
    return forward_check, cluster


def _metrics(run: _Run, cal: Predictions, audit: Predictions, fitted: _Fit) -> tuple[dict[str, Any], str]:
    """metrics: both pools' metrics from the predictions as written, under the frozen temperature."""
    with run.clock.stage("metrics"):
        metrics = metrics_record(run.protocol, {CAL: cal, AUDIT: audit}, fitted.fit.beta, fitted.temperature,
                                 fitted.sha256)
        sha256 = run.art.write_json(layout.METRICS_JSON, metrics)
        run.record_stage("metrics", (layout.TEMPERATURE_JSON, layout.PREDICTIONS[CAL], layout.PREDICTIONS[AUDIT]),
                         (layout.METRICS_JSON,))
    return metrics, sha256


def _studies(run: _Run, cal: Predictions, audit: Predictions, fitted: _Fit, metrics_sha256: str
             ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The pre-registered studies on the frozen artifacts (bootstrap, stability), each when the
    protocol asks for it: descriptive, never fed back into the fit."""
    protocol, bootstrap, stability = run.protocol, None, None
    if protocol.bootstrap is not None:
        with run.clock.stage("bootstrap"):
            bootstrap = bootstrap_record(protocol.bootstrap, protocol.sha256, audit, fitted.fit.beta, fitted.sha256,
                                         metrics_sha256)
            run.art.write_json(layout.BOOTSTRAP_JSON, bootstrap)
            release_free_memory()
    if protocol.stability is not None:
        with run.clock.stage("stability"):
            stability = stability_record(protocol.stability, protocol.fit, protocol.sha256, cal, audit, fitted.sha256)
            run.art.write_json(layout.STABILITY_JSON, stability)
    return bootstrap, stability


def _environment(run: _Run, engine: Engine, peak_mb: float, forward_check: dict[str, Any] | None,
                 arithmetic: dict[str, Any], cluster: dict[str, Any] | None) -> dict[str, Any]:
    """environment.json: where and how the run ran, its stages' times and its peak memory."""
    choice = run.settings.thread_choice
    environment = environment_record(engine.torch_info, run.clock, peak_mb, forward_check,
                                     None if choice is None else choice.record(), arithmetic, engine.forward_choice)
    if cluster is not None:
        environment["cluster"] = cluster
    run.art.write_json(layout.ENVIRONMENT_JSON, environment)
    return environment


def _figures(run: _Run, metrics: dict[str, Any], audit: Predictions) -> list[str]:
    """The figures, a view of the metrics and the audit logits as written; their names in data/."""
    from bundle.views.figures import render_figures  # deferred: matplotlib (about 1 s) only for a run's drawing

    figures = render_figures(metrics, audit.logits.astype(np.float64), audit.labels)
    for rel, png in figures.items():
        run.art.write_bytes(f"{layout.DATA_DIR}/{rel}", png)
    return sorted(figures)


def _report(run: _Run, docs: dict[str, Any], figures: list[str]) -> None:
    """report.md, a view of the records as written (`docs`: bag path -> record)."""
    report = render_report({path: as_written(doc) for path, doc in docs.items()}, run.protocol.sha256, figures)
    run.art.write_bytes(layout.REPORT_MD, report.encode("utf-8"))


def _crate(run: _Run, environment: dict[str, Any], signer_fingerprint: str | None, date_published: str,
           publication: Publication) -> None:
    """ro-crate-metadata.json, last: it describes every file written before it."""
    written = {layout.data_name(path): facts for path, facts in run.art.ledger.items()}
    run.art.write_bytes(layout.RO_CRATE_JSON, crate_bytes(
        written, protocol=run.protocol.doc, resources=run.recorded, environment=environment,
        signer_fingerprint=signer_fingerprint, date_published=date_published, publication=publication))


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
