"""The calibration-size stability study (data/stability.json) recomputed: each nested subset of
the calibration pool re-fitted by the verifier's own method, and the NLLs recomputed."""

from __future__ import annotations

from typing import Any

from bundle import layout
from verify import numerics, refit
from verify.context import Context
from verify.numerics import F64, I64
from verify.protocol_checks import bounded_dimensions
from verify.result import Failed

TOL = 1e-9
REL_TOL = 1e-6


def check(doc: dict[str, Any], protocol: dict[str, Any], cal: tuple[F64, I64],
          audit: tuple[F64, I64], shas: dict[str, str], main_temperature: float) -> str:
    spec, fit = protocol["stability"], protocol["fit"]
    zc, yc = cal
    za, ya = audit
    problems = []
    header = (("calibration_predictions_sha256", shas["calibration"]),
              ("audit_predictions_sha256", shas["audit"]),
              ("temperature_sha256", shas["temperature"]), ("calibration_n", len(yc)),
              ("audit_n", len(ya)), ("t_min", fit["t_min"]), ("t_max", fit["t_max"]),
              ("steps", fit["steps"]))
    for key, want in header:
        if doc[key] != want:
            problems.append(f"{key} is {str(doc[key])[:20]!r}, expected {str(want)[:20]!r}")
    raw = numerics.mean_nll(za, ya, 1.0)
    if not abs(doc["audit_nll_raw"] - raw) <= TOL:
        problems.append(f"audit_nll_raw is {doc['audit_nll_raw']!r}, recomputed {raw!r}")
    sizes = sorted(spec["sizes"])
    fitted = [m for m in sizes if m <= len(yc)]
    skipped = [m for m in sizes if m > len(yc)]
    if [s["m"] for s in doc["sizes"]] != fitted or doc["skipped_sizes"] != skipped:
        problems.append(f"sizes {[s['m'] for s in doc['sizes']]} skipped {doc['skipped_sizes']}, "
                        f"the protocol's {sizes} on {len(yc)} rows give {fitted} skipped "
                        f"{skipped}")
    if problems:
        raise Failed("stability.json: " + "; ".join(problems[:3]) + ".")
    for entry in doc["sizes"]:
        m = entry["m"]
        z, y = zc[:m], yc[:m]
        r = refit.refit_temperature(z, y, fit["t_min"], fit["t_max"])
        side = entry["boundary_side"] if entry["boundary"] else None
        where = f"m = {m}"
        if side != r.boundary_side or entry["boundary"] != (entry["boundary_side"] is not None):
            problems.append(f"{where}: boundary {entry['boundary']}/{entry['boundary_side']!r}, "
                            f"the re-fit finds {r.boundary_side!r}")
        rel = abs(entry["temperature"] - r.temperature) / r.temperature
        if not rel <= REL_TOL:
            problems.append(f"{where}: temperature {entry['temperature']!r}, re-fit "
                            f"{r.temperature!r} (relative difference {rel:.1e})")
        if not abs(entry["temperature"] - 1.0 / entry["beta"]) <= 4e-16 * entry["temperature"]:
            problems.append(f"{where}: temperature is not 1/beta")
        after = numerics.mean_nll(z, y, entry["beta"])
        if not abs(entry["calibration_nll_after"] - after) <= TOL:
            problems.append(f"{where}: calibration_nll_after {entry['calibration_nll_after']!r}, "
                            f"recomputed {after!r}")
        audit_nll = numerics.mean_nll(za, ya, entry["beta"])
        if not abs(entry["audit_nll"] - audit_nll) <= TOL:
            problems.append(f"{where}: audit_nll {entry['audit_nll']!r}, recomputed {audit_nll!r}")
        if m == len(yc) and not abs(entry["temperature"] - main_temperature) <= (
                1e-12 * main_temperature):
            problems.append(f"{where} is the whole pool, yet its temperature "
                            f"{entry['temperature']!r} differs from temperature.json's "
                            f"{main_temperature!r}")
    if problems:
        raise Failed("stability differs from the logits: " + "; ".join(problems[:3]) + ".")
    temps = ", ".join(f"m={e['m']}: T={e['temperature']:.4f}" for e in doc["sizes"])
    return (f"{len(doc['sizes'])} nested subsets re-fitted by golden section + Newton within "
            f"{REL_TOL:g}; NLLs within {TOL:g} ({temps or 'none fitted'})")


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def wanted(ctx: Context) -> bool:
    """Whether the protocol asks for the stability study or the bag holds its record."""
    return ctx.wants_section("stability")


def refits(ctx: Context) -> str:
    """Each nested subset re-fitted, NLLs recomputed, sizes and skipped sizes per protocol."""
    bounded_dimensions(ctx.doc(layout.PROTOCOL_JSON))  # at most MAX_STABILITY_SIZES re-fits
    return check(ctx.doc(layout.STABILITY_JSON), ctx.doc(layout.PROTOCOL_JSON),
                 (ctx.table("calibration").z, ctx.table("calibration").y),
                 (ctx.table("audit").z, ctx.table("audit").y), ctx.study_inputs(),
                 ctx.doc(layout.TEMPERATURE_JSON)["temperature"])
