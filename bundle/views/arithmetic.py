"""How a reproduction's arithmetic is put in words, the same by the job and by the verifier: an
arithmetic record (data/environment.json `arithmetic`, an attestation's `environment.arithmetic`),
a difference or tolerance, and a group of batches judged by the CPU kinds that signed and re-ran it."""

from __future__ import annotations

from collections.abc import Mapping
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


def short_number(x: float) -> str:
    """A difference or tolerance as people write it: 1e-4, 5.1e-6, 0.75 (two significant digits)."""
    if x == 0 or 1e-3 <= abs(x) < 1e4:
        return format(x, ".2g")
    mantissa, exponent = format(x, ".1e").split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"


def suspicious(group: Mapping[str, Any]) -> bool:
    """A reproduction's batch group (an attestation's `batch_kinds`) re-run on the CPU kind that
    signed it whose logits are not all bit-identical."""
    return bool(group["same_kind"]) and group["level"] != "bit-identical"


def claimed_kinds(cluster: Mapping[str, Any] | None) -> list[str]:
    """The CPU kinds a bundle's `cluster` record (environment.json) says ran its batches, sorted;
    [] for a run in one process. They are the signer's word: nothing can check where a batch ran."""
    if not cluster:
        return []
    return sorted({str(w["cpu_kind"]) for w in cluster["workers"] if any(w["batches"].values())})


def claim_warning(level: str, claimed: list[str], measured_same: bool) -> str | None:
    """The warning a worker record cannot remove: the reproducer re-ran in its own process with the
    arithmetic it measured equal to the arithmetic the bundle records for its signer, and the logits
    are not bit-identical. Only the bundle's worker records (`claimed`, the signer's word) say the
    batches ran on some other kind; without them the same-kind groups would flag it. None when there
    is nothing to warn of: bit-identical, no worker records, or another arithmetic measured."""
    if level == "bit-identical" or not claimed or not measured_same:
        return None
    kinds = ", ".join(_short_kind(k) for k in claimed)
    return ("SUSPICIOUS: not bit-identical, though the reproducer measured the arithmetic the bundle records "
            f"for its signer; only the bundle's worker records, the signer's word that nothing checks, say "
            f"its batches ran on {kinds}")


def _short_kind(kind: str) -> str:
    """"AuthenticAMD | AMD EPYC 9B14 | AVX512" -> "AMD EPYC 9B14 AVX512" (vendor id left out)."""
    parts = [p.strip() for p in kind.split("|")]
    return " ".join(parts[1:]) if len(parts) == 3 else kind


def group_words(group: Mapping[str, Any]) -> str:
    """One batch group in words: "signed on X and re-run on the same kind: bit-identical (24 audit
    batches, 760 rows)", flagged when suspicious."""
    n = len(group["batches"])
    if group["same_kind"]:
        where = f"signed on {_short_kind(group['signed_on'])} and re-run on the same kind"
    else:
        where = f"signed on {_short_kind(group['signed_on'])}, re-run on {_short_kind(group['rerun_on'])}"
    count = f"{n} {group['pool']} batch{'es' * (n != 1)}, {group['rows']} rows"
    if group["level"] != "bit-identical":
        count += f", largest {short_number(group['largest_difference']['abs'])}"
    flag = "; SUSPICIOUS: not bit-identical on the kind that signed it" if suspicious(group) else ""
    return f"{where}: {group['level']} ({count}){flag}"
