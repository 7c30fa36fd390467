"""A payload that a test wrote file by file (not through the job), read back as the job's stages
would have handed it on: its ledger (every file passed through job.publishing.ledger.Ledger again), the
predicate restated from its files, and the records the studies compute from its files."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.crate_graph import entities, stated_publication
from bundle.crate_terms import VOLATILE
from bundle.predicate import restated_predicate
from bundle.views.crate import Described
from bundle.views.figures import draw_figures, render_figures
from job.bootstrap import bootstrap_record
from job.predictions import Predictions
from job.protocol import AUDIT, CALIBRATION, BootstrapSpec, FitSpec, StabilitySpec
from job.publishing.dates import bagging_date
from job.publishing.ledger import Ledger
from job.publishing.seal import payload_files, seal
from job.rocrate import CRATE, Publication, crate_metadata
from job.stability import stability_record


def ledger_of(bag: Path) -> Ledger:
    """The ledger of the payload under bag/data/ as it is: every file rewritten with its own bytes
    through a Ledger (so JSON files are parsed and schema-checked as the job's writes are)."""
    ledger = Ledger(bag)
    for path in payload_files(bag):
        ledger.write_bytes(path, (bag / path).read_bytes())
    return ledger


def publication_from_crate(crate: Mapping[str, Any]) -> dict[str, Any]:
    """The licence, publisher, authors and contact the crate's root states (null or empty where
    none), read as every reader of the format reads them (bundle.crate_graph)."""
    return stated_publication(entities(crate))


def predicate_from_payload(bag: Path) -> dict[str, Any]:
    """bundle.predicate.restated_predicate of the records in bag/data/, the publication read
    back from the crate's root."""
    def doc(path: str) -> Any:
        return loads_strict((bag / path).read_bytes(), source=path)

    return restated_predicate(
        protocol_sha256=hashlib.sha256((bag / layout.PROTOCOL_JSON).read_bytes()).hexdigest(),
        resources=doc(layout.RESOURCES_JSON), temperature=doc(layout.TEMPERATURE_JSON),
        temperature_sha256=hashlib.sha256((bag / layout.TEMPERATURE_JSON).read_bytes()).hexdigest(),
        metrics=doc(layout.METRICS_JSON), publication=publication_from_crate(doc(layout.RO_CRATE_JSON)))


def seal_payload(bag: Path, *, predicate: Mapping[str, Any] | None = None, **options: Any) -> None:
    """job.publishing.seal.seal of the payload a test wrote under bag/data/; signed (private_key given)
    with `predicate`, by default the one restated from the payload."""
    ledger = ledger_of(bag)
    if options.get("private_key") is not None and predicate is None:
        predicate = predicate_from_payload(bag)
    options.setdefault("date", bagging_date())
    seal(bag, ledger, predicate=predicate, **options)


def predictions_of(data: Path, pool: str) -> Predictions:
    """job.predictions.Predictions of a pool's predictions file in the data folder `data`."""
    path = data / layout.data_name(layout.PREDICTIONS[pool])
    return Predictions.of_table(pool, pq.read_table(path), hashlib.sha256(path.read_bytes()).hexdigest())


def _sha256(data: Path, path: str) -> str:
    return hashlib.sha256((data / layout.data_name(path)).read_bytes()).hexdigest()


def bootstrap_from_files(spec: BootstrapSpec, protocol_sha256: str, data: Path) -> dict[str, Any]:
    """job.bootstrap.bootstrap_record of the records in the data folder `data`."""
    beta = float(loads_strict((data / layout.data_name(layout.TEMPERATURE_JSON)).read_bytes())["beta"])
    return bootstrap_record(spec, protocol_sha256, predictions_of(data, AUDIT), beta,
                            _sha256(data, layout.TEMPERATURE_JSON), _sha256(data, layout.METRICS_JSON))


def stability_from_files(spec: StabilitySpec, fit: FitSpec, protocol_sha256: str, data: Path) -> dict[str, Any]:
    """job.stability.stability_record of the records in the data folder `data`."""
    return stability_record(spec, fit, protocol_sha256, predictions_of(data, CALIBRATION), predictions_of(data, AUDIT),
                            _sha256(data, layout.TEMPERATURE_JSON))


def described_files(data: Path) -> list[str]:
    """The files a crate of the data folder `data` describes: every regular file under it except
    the crate itself and the files that vary between runs (VOLATILE), POSIX paths, sorted."""
    return sorted(rel for p in data.rglob("*")
                  if p.is_file() and (rel := p.relative_to(data).as_posix()) != CRATE and rel not in VOLATILE)


def crate_of(data: Path, *, signer_fingerprint: str | None, date_published: str,
             publication: Publication | None = None) -> dict[str, Any]:
    """job.rocrate.crate_metadata of the files and records in the data folder `data`."""
    def doc(path: str) -> Any:
        return loads_strict((data / layout.data_name(path)).read_bytes(), source=path)

    files = {rel: Described.of((data / rel).read_bytes()) for rel in described_files(data)}
    return crate_metadata(files, protocol=doc(layout.PROTOCOL_JSON), resources=doc(layout.RESOURCES_JSON),
                          environment=doc(layout.ENVIRONMENT_JSON), signer_fingerprint=signer_fingerprint,
                          date_published=date_published, publication=publication)


def crate_bytes_of(data: Path, *, signer_fingerprint: str | None, date_published: str,
                   publication: Publication | None = None) -> bytes:
    """Canonical JSON bytes of crate_of(...): the crate file the job would write for `data`."""
    return dumps(crate_of(data, signer_fingerprint=signer_fingerprint, date_published=date_published,
                          publication=publication))


def figures_of(data: Path, fresh: bool = False) -> dict[str, bytes]:
    """bundle.views.figures.render_figures of the metrics.json and audit logits in the data folder
    `data`: {path inside data/: PNG bytes}, what the run draws from its records; drawn now
    (draw_figures, not a remembered drawing) when `fresh`."""
    metrics = loads_strict((data / layout.data_name(layout.METRICS_JSON)).read_bytes(), source=layout.METRICS_JSON)
    audit = predictions_of(data, AUDIT)
    draw = draw_figures if fresh else render_figures
    return draw(metrics, audit.logits.astype(np.float64), audit.labels)
