"""Every published figure recomputed from a reproducer's logits, and the figures that changed.

A full reproduction holds its own logits for every calibration and audit row. As predictions tables
(with the labels re-derived from the pinned data) they go, in memory, through the job's own stages:
the temperature fit, both pools' metrics, the bootstrap and the stability study. The report's
checked tables (bundle.views.report.expected_tables) are what the bundle publishes, at the precision
it publishes them, so a figure "changed" when its table cell differs: the attestation lists it as
(figure, from, to)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bundle import layout
from bundle.canonical import dumps
from bundle.schemas import validate
from bundle.views.report import expected_tables
from job.bootstrap import bootstrap_record
from job.calibration import fit_temperature
from job.predictions import PoolOutput, Predictions, predictions_bytes, predictions_table
from job.protocol import AUDIT, CALIBRATION, Protocol
from job.records import metrics_record, temperature_record
from job.stability import stability_record
from job.verified_bundle import RecordedPool

MAX_LISTED = 50
"""At most this many changed figures are listed (all are counted)."""
TABLE_INPUTS = (layout.PROTOCOL_JSON, layout.POOLS_JSON, layout.RESOURCES_JSON)
"""Bundle files the stages read unchanged."""


def published_tables(docs: Mapping[str, Any]) -> dict[str, str]:
    """"table/row/column" -> cell of every checked table of the report written from `docs`."""
    return {f"{table}/{row}/{column}": value
            for table, rows in expected_tables(docs).items()
            for row, columns in rows.items() for column, value in columns.items()}


def changed_figures(before: Mapping[str, str], after: Mapping[str, str]) -> list[dict[str, str]]:
    """[{figure, from, to}] for every figure whose published cell differs, in table order."""
    return [{"figure": name, "from": before.get(name, "absent"), "to": after.get(name, "absent")}
            for name in [*before, *(k for k in after if k not in before)]
            if before.get(name) != after.get(name)]


def _stage_docs(protocol: Protocol, recorded: Mapping[str, RecordedPool], logits: Mapping[str, NDArray[np.float32]],
                labels: Mapping[str, NDArray[np.int64]], files: Mapping[str, bytes]) -> dict[str, Any]:
    """The records the job's stages write from these logits and labels, computed in memory as the
    run computes them (each record names the sha256 of the bytes its inputs would be written as)."""
    predictions: dict[str, Predictions] = {}
    for name, pool in recorded.items():
        full = pool.token_count if pool.full_token_count is None else pool.full_token_count
        out = PoolOutput(logits[name], pool.token_count, pool.truncated, pool.batch, full)
        table = predictions_table(pool.idx, pool.split_key, pool.text_sha256, labels[name], out)
        predictions[name] = Predictions.of_table(name, table, hashlib.sha256(predictions_bytes(table)).hexdigest())
    cal, audit = predictions[CALIBRATION], predictions[AUDIT]
    f = protocol.fit
    fit = fit_temperature(cal.logits.astype(np.float64), cal.labels, f.t_min, f.t_max, f.steps)
    docs: dict[str, Any] = {layout.POOLS_JSON: json.loads(files[layout.POOLS_JSON])}
    temperature = temperature_record(protocol, fit, len(cal.labels), cal.sha256)
    temperature_sha256 = _sha256_of(layout.TEMPERATURE_JSON, temperature)
    metrics = metrics_record(protocol, predictions, fit.beta, temperature, temperature_sha256)
    docs[layout.TEMPERATURE_JSON], docs[layout.METRICS_JSON] = temperature, metrics
    docs[layout.BOOTSTRAP_JSON] = (bootstrap_record(protocol.bootstrap, protocol.sha256, audit, fit.beta,
                                                    temperature_sha256, _sha256_of(layout.METRICS_JSON, metrics))
                                   if protocol.bootstrap is not None else None)
    docs[layout.STABILITY_JSON] = (stability_record(protocol.stability, protocol.fit, protocol.sha256, cal, audit,
                                                    temperature_sha256)
                                   if protocol.stability is not None else None)
    return docs


def _sha256_of(path: str, doc: Mapping[str, Any]) -> str:
    """The sha256 of `doc` written as the payload file `path` (schema-checked canonical JSON)."""
    validate(doc, layout.PAYLOAD_SCHEMAS[path])
    return hashlib.sha256(dumps(doc)).hexdigest()


def recomputed_changes(protocol: Protocol, recorded: Mapping[str, RecordedPool],
                       logits: Mapping[str, NDArray[np.float32]], labels: Mapping[str, NDArray[np.int64]],
                       files: Mapping[str, bytes], published: Mapping[str, Any]) -> dict[str, Any]:
    """{compared, changed, listed}: how many published figures were recomputed, how many differ at
    their published precision, and up to MAX_LISTED of those as {figure, from, to}.

    `recorded`: the bundle's pools; `logits`, `labels`: the reproducer's, per pool in pool order;
    `files`: the bundle's files by bag path; `published`: the bundle's parsed records by bag path."""
    mine = published_tables(_stage_docs(protocol, recorded, logits, labels, files))
    theirs = published_tables(published)
    changed = changed_figures(theirs, mine)
    return {"compared": len(theirs), "changed": len(changed), "listed": changed[:MAX_LISTED]}
