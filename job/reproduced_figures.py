"""Every published figure recomputed from a reproducer's logits, and the figures that changed.

A full reproduction holds its own logits for every calibration and audit row. Written into a scratch
data directory as predictions tables (with the labels re-derived from the pinned data), they go
through the job's own stages: the temperature fit, both pools' metrics, the bootstrap and the
stability study. The report's checked tables (bundle.views.report.expected_tables) are what the
bundle publishes, at the precision it publishes them, so a figure "changed" when its table cell
differs: the attestation lists it as (figure, from, to)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bundle import layout
from bundle.views.report import expected_tables
from job.artifacts import Artifacts
from job.calibration import fit_temperature
from job.predictions import PoolOutput, predictions_table, read_logits
from job.protocol import CALIBRATION, Protocol
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
                labels: Mapping[str, NDArray[np.int64]], files: Mapping[str, bytes], data: Path) -> dict[str, Any]:
    """The records the job's stages write from these logits and labels, in the scratch folder `data`."""
    from job.bootstrap import bootstrap_record
    from job.pipeline import metrics_record, temperature_record
    from job.stability import stability_record

    art = Artifacts(data)
    for path in TABLE_INPUTS:
        art.write_bytes(path, files[path])
    for name, pool in recorded.items():
        full = pool.token_count if pool.full_token_count is None else pool.full_token_count
        out = PoolOutput(logits[name], pool.token_count, pool.truncated, pool.batch, full)
        art.write_table(layout.PREDICTIONS[name], predictions_table(
            pool.idx, pool.split_key, pool.text_sha256, labels[name], out))
    z32, y = read_logits(art.path(layout.PREDICTIONS[CALIBRATION]))
    f = protocol.fit
    fit = fit_temperature(z32.astype(np.float64), y, f.t_min, f.t_max, f.steps)
    docs: dict[str, Any] = {layout.POOLS_JSON: json.loads(files[layout.POOLS_JSON])}
    docs[layout.TEMPERATURE_JSON] = temperature_record(protocol, fit, len(y),
                                                       art.digest(layout.PREDICTIONS[CALIBRATION]))
    art.write_json(layout.TEMPERATURE_JSON, docs[layout.TEMPERATURE_JSON])
    docs[layout.METRICS_JSON] = metrics_record(protocol, art, fit.beta, docs[layout.TEMPERATURE_JSON])
    art.write_json(layout.METRICS_JSON, docs[layout.METRICS_JSON])
    docs[layout.BOOTSTRAP_JSON] = (bootstrap_record(protocol.bootstrap, protocol.sha256, data)
                                   if protocol.bootstrap is not None else None)
    docs[layout.STABILITY_JSON] = (stability_record(protocol.stability, protocol.fit, protocol.sha256, data)
                                   if protocol.stability is not None else None)
    return docs


def recomputed_changes(protocol: Protocol, recorded: Mapping[str, RecordedPool],
                       logits: Mapping[str, NDArray[np.float32]], labels: Mapping[str, NDArray[np.int64]],
                       files: Mapping[str, bytes], published: Mapping[str, Any]) -> dict[str, Any]:
    """{compared, changed, listed}: how many published figures were recomputed, how many differ at
    their published precision, and up to MAX_LISTED of those as {figure, from, to}.

    `recorded`: the bundle's pools; `logits`, `labels`: the reproducer's, per pool in pool order;
    `files`: the bundle's files by bag path; `published`: the bundle's parsed records by bag path."""
    with tempfile.TemporaryDirectory(prefix="reproduce-figures-") as tmp:
        mine = published_tables(_stage_docs(protocol, recorded, logits, labels, files, Path(tmp) / "data"))
    theirs = published_tables(published)
    changed = changed_figures(theirs, mine)
    return {"compared": len(theirs), "changed": len(changed), "listed": changed[:MAX_LISTED]}
