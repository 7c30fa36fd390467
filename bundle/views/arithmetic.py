"""How an arithmetic record (data/environment.json `arithmetic`, an attestation's
`environment.arithmetic`) is named in words, the same by the job and by the verifier."""

from __future__ import annotations

from typing import Any


def arithmetic_words(record: dict[str, Any] | None) -> str:
    """One phrase naming a run's arithmetic: "AMD EPYC 9B14, ATen AVX512, oneDNN AVX2" (CPU model,
    ATen capability, oneDNN ISA, MKL's code path); "unrecorded arithmetic" for none."""
    if not record:
        return "unrecorded arithmetic"
    parts = [str(record.get("cpu_model") or record.get("cpu_vendor") or "unknown CPU")]
    if record.get("aten_capability"):
        parts.append(f"ATen {record['aten_capability']}")
    if record.get("onednn_isa"):
        parts.append(f"oneDNN {record['onednn_isa']}")
    mkl = record.get("mkl")
    if isinstance(mkl, dict) and mkl.get("path"):
        parts.append(f"MKL for {mkl['path']}")
    return ", ".join(parts)
