"""Minimal, mutually consistent, schema-valid payload documents, for tests and documentation.

The figures are made up; the two predictions files are placeholders (not Parquet), because the
bundle layer treats them as opaque bytes. The derived files are minimal too: report.md is a short
text without the checked tables, the figures are 1x1 PNGs, and ro-crate-metadata.json lists every
other payload file with its sha256 and size (the job writes the full versions).
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path
from typing import Any

from bundle import layout
from bundle.canonical import dumps

REPO_PROTOCOL = Path(__file__).resolve().parent.parent / "provenance.json"


def _h(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _metrics(n: int, correct: int, confidence: float) -> dict[str, Any]:
    bins = [
        {
            "lower": k / 10,
            "upper": (k + 1) / 10,
            "count": 0,
            "accuracy": None,
            "mean_confidence": None,
        }
        for k in range(10)
    ]
    bins[9].update(count=n, accuracy=correct / n, mean_confidence=confidence)
    gap = abs(correct / n - confidence)
    return {
        "n": n,
        "correct": correct,
        "accuracy": correct / n,
        "mean_confidence": confidence,
        "nll": 0.25,
        "brier": 0.125,
        "ece": gap,
        "mce": gap,
        "bins": bins,
        "threshold": {"value": 0.9, "accepted": n, "wrong_accepted": n - correct},
    }


def example_documents(protocol: bytes, profile: str = "formal") -> dict[str, Any]:
    """{payload path: document} for every JSON payload file except data/protocol.json."""
    p = hashlib.sha256(protocol).hexdigest()
    rows = [
        {"idx": i, "split_key": _h(f"cycle7:{i}"), "text_sha256": _h(f"sentence {i}")}
        for i in range(6)
    ]
    rows.sort(key=lambda r: str(r["split_key"]))
    pools = {"explore": rows[:2], "calibration": rows[2:4], "audit": rows[4:]}
    files = {"model": [("config.json", 629)], "dataset": [("data/validation.parquet", 72813)]}
    resources: dict[str, Any] = {
        "profile": profile,
        "deviations": [] if profile == "formal" else ["An example."],
    }
    for part, entries in files.items():
        resources[part] = {
            "repo_id": f"example/{part}",
            "repo_type": part,
            "revision": "0" * 40,
            "source": "local",
            "files": [
                {
                    "path": path,
                    "size": size,
                    "sha256": _h(path),
                    "pinned_sha256": _h(path),
                    "pin": "protocol",
                    "matches_pin": True,
                }
                for path, size in entries
            ],
        }
    temperature = {
        "protocol_sha256": p,
        "pool": "calibration",
        "n": 2,
        "predictions_sha256": _h("cal"),
        "temperature": 1.25,
        "beta": 0.8,
        "t_min": 0.05,
        "t_max": 20.0,
        "steps": 1,
        "boundary": False,
        "boundary_side": None,
        "final_gradient": 0.001,
        "bracket": [0.05, 1.55],
        "nll_before": 0.3,
        "nll_after": 0.25,
    }
    temperature_sha256 = hashlib.sha256(dumps(temperature)).hexdigest()
    stage = {
        "name": "split",
        "protocol_sha256": p,
        "consumed": {},
        "produced": {"pools.json": _h("pools")},
    }
    docs: dict[str, Any] = {
        layout.RESOURCES_JSON: resources,
        layout.POOLS_JSON: {
            "protocol_sha256": p,
            "dataset_sha256": _h("dataset"),
            "prefix": "cycle7:",
            "pools": pools,
            "sizes": {k: len(v) for k, v in pools.items()},
        },
        layout.TEMPERATURE_JSON: temperature,
        layout.TRAJECTORY_JSON: {
            "protocol_sha256": p,
            "beta_min": 0.05,
            "beta_max": 20.0,
            "g_at_beta_min": -1.0,
            "g_at_beta_max": 2.0,
            "steps": [{"step": 1, "lo": 0.05, "hi": 20.0, "mid": 10.025, "g": 1.5}],
        },
        layout.METRICS_JSON: {
            "protocol_sha256": p,
            "temperature_sha256": temperature_sha256,
            "beta": 0.8,
            "temperature": 1.25,
            "argmax_unchanged": True,
            "pools": {
                "audit": {
                    "role": "evidence",
                    "predictions_sha256": _h("audit"),
                    "raw": _metrics(2, 1, 0.95),
                    "calibrated": _metrics(2, 1, 0.9),
                },
                "calibration": {
                    "role": "fit pool, not evidence",
                    "predictions_sha256": _h("cal"),
                    "raw": _metrics(2, 2, 0.95),
                    "calibrated": _metrics(2, 2, 0.92),
                },
            },
        },
        layout.STAGES_JSON: {"protocol_sha256": p, "stages": [stage]},
        layout.ENVIRONMENT_JSON: {
            "python": "3.11.7",
            "implementation": "CPython",
            "platform": "Linux-x86_64",
            "os": "Linux",
            "machine": "x86_64",
            "cpu_model": None,
            "logical_cores": 4,
            "packages": {"numpy": "2.0.0", "torch": None},
            "torch": {"threads": 4},
            "env": {"CALIBRATION_IMAGE": None},
            "image": None,
            "git_commit": None,
            "timings_s": {"split": 0.5},
            "stage_times": [
                {"stage": "split", "start": "2024-05-07T00:00:00Z", "end": "2024-05-07T00:00:01Z"}
            ],
            "peak_rss_mb": 100.0,
        },
    }
    sections = json.loads(protocol)
    if "bootstrap" in sections:
        docs[layout.BOOTSTRAP_JSON] = _bootstrap(p, temperature_sha256)
    if "stability" in sections:
        docs[layout.STABILITY_JSON] = _stability(p, temperature_sha256)
    return docs


def _bootstrap(p: str, temperature_sha256: str) -> dict[str, Any]:
    difference = {"point": -0.01, "lower": -0.02, "upper": 0.005, "verdict": "no claim"}
    return {
        "protocol_sha256": p,
        "pool": "audit",
        "n": 2,
        "predictions_sha256": _h("audit"),
        "temperature_sha256": temperature_sha256,
        "metrics_sha256": _h("metrics"),
        "beta": 0.8,
        "resamples": 10,
        "seed": 1,
        "rng": "numpy.random.Generator(numpy.random.PCG64(seed)).integers(0, n, size=(resamples, n))",
        "indices_sha256": _h("indices"),
        "statistic": "calibrated minus raw",
        "interval": {"level": 0.95, "quantiles": [0.025, 0.975], "method": "linear"},
        "differences": {"nll": difference},
    }


def _stability(p: str, temperature_sha256: str) -> dict[str, Any]:
    return {
        "protocol_sha256": p,
        "role": "descriptive only; never used to choose the temperature",
        "nesting": "first m rows of the calibration pool in pool order (ascending split key)",
        "calibration_predictions_sha256": _h("cal"),
        "audit_predictions_sha256": _h("audit"),
        "temperature_sha256": temperature_sha256,
        "calibration_n": 2,
        "audit_n": 2,
        "t_min": 0.05,
        "t_max": 20.0,
        "steps": 100,
        "audit_nll_raw": 0.3,
        "sizes": [
            {
                "m": 2,
                "temperature": 1.25,
                "beta": 0.8,
                "boundary": False,
                "boundary_side": None,
                "calibration_nll_after": 0.25,
                "audit_nll": 0.28,
            }
        ],
        "skipped_sizes": [32],
    }


def write_example_payload(
    bag: Path, *, protocol: bytes | None = None, profile: str = "formal"
) -> str:
    """Write a complete example payload under bag/data/; return the protocol's sha256."""
    protocol = REPO_PROTOCOL.read_bytes() if protocol is None else protocol
    data = Path(bag)
    (data / "data" / "predictions").mkdir(parents=True, exist_ok=True)
    (data / layout.PROTOCOL_JSON).write_bytes(protocol)
    for path, doc in example_documents(protocol, profile).items():
        (data / path).write_bytes(dumps(doc, source=path))
    for path in (layout.CALIBRATION_PREDICTIONS, layout.AUDIT_PREDICTIONS):
        (data / path).write_bytes(b"placeholder for " + path.encode() + b"\n")
    write_example_derived(data)
    return hashlib.sha256(protocol).hexdigest()


def tiny_png() -> bytes:
    """A valid 1x1 white greyscale PNG."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\xff")) + chunk(b"IEND", b""))


def write_example_derived(bag: Path) -> None:
    """Write placeholder figures and report.md, then a minimal crate over the payload (last)."""
    bag = Path(bag)
    for path in layout.FIGURES:
        (bag / path).parent.mkdir(parents=True, exist_ok=True)
        (bag / path).write_bytes(tiny_png())
    (bag / layout.REPORT_MD).write_bytes(
        b"# Example report\n\nA placeholder: the job writes the full report with its checked "
        b"tables.\n")
    (bag / layout.RO_CRATE_JSON).write_bytes(dumps(example_crate(bag)))


def example_crate(bag: Path) -> dict[str, Any]:
    """A minimal RO-Crate 1.2 document whose File entities are the payload under bag/data/."""
    data = Path(bag) / layout.DATA_DIR
    crate = layout.RO_CRATE_JSON.removeprefix("data/")
    files = sorted(p.relative_to(data).as_posix() for p in data.rglob("*")
                   if p.is_file() and p.relative_to(data).as_posix() != crate)
    graph: list[dict[str, Any]] = [
        {"@id": crate, "@type": "CreativeWork",
         "conformsTo": {"@id": "https://w3id.org/ro/crate/1.2"}, "about": {"@id": "./"}},
        {"@id": "./", "@type": "Dataset", "name": "Example payload",
         "description": "An example bundle payload.", "datePublished": "2024-05-07",
         "license": {"@id": "#license-not-stated"},
         "hasPart": [{"@id": f} for f in files]},
        {"@id": "#license-not-stated", "@type": "CreativeWork", "name": "No license stated"},
    ]
    for rel in files:
        raw = (data / rel).read_bytes()
        graph.append({"@id": rel, "@type": "File", "name": rel,
                      "contentSize": str(len(raw)), "sha256": hashlib.sha256(raw).hexdigest()})
    return {"@context": "https://w3id.org/ro/crate/1.2/context", "@graph": graph}
