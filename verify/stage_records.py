"""The stage records against the files: the five stages in order with their digests and times,
and the audit stage after the fit."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from bundle import layout
from verify.bag import safe_bag_path
from verify.context import Context
from verify.result import DigestMismatch, Failed

STAGE_ORDER = ["split", "calibration-inference", "fit", "audit-inference", "metrics"]
def _utc(value: str, where: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise Failed(f"{where} is {value[:40]!r}, not an ISO 8601 time.") from exc
    if moment.tzinfo is None:
        raise Failed(f"{where} is {value[:40]!r}, a time without its UTC offset.")
    return moment


def check_stage_times(stage_times: list[dict[str, Any]]) -> str:
    """The environment's stage times: every timed stage ends after it starts, and the five
    stages of STAGE_ORDER are timed in that order, each starting after the one before ended
    (other timed stages, such as loading the model, may fall between them)."""
    previous: tuple[str, datetime] | None = None
    order: list[str] = []
    for i, record in enumerate(stage_times):
        name = str(record["stage"])
        start = _utc(record["start"], f"environment.json stage_times[{i}] start")
        end = _utc(record["end"], f"environment.json stage_times[{i}] end")
        if end < start:
            raise Failed(f"environment.json says stage {name!r} ended before it started.")
        if name not in STAGE_ORDER:
            continue
        if previous is not None and start < previous[1]:
            raise Failed(f"environment.json says stage {name!r} started before stage "
                         f"{previous[0]!r} ended; the job runs them one after the other.")
        previous = (name, end)
        order.append(name)
    if order != [n for n in STAGE_ORDER if n in order]:
        raise Failed(f"environment.json times the stages in the order {order}, expected "
                     f"{STAGE_ORDER}.")
    return f"{len(order)} stage times in order"


def check_digest_order(stages: dict[str, Any]) -> None:
    """A digest a stage consumed that the run produced was produced by an earlier stage."""
    producer: dict[str, int] = {}
    for i, stage in enumerate(stages["stages"]):
        for digest in stage["produced"].values():
            producer.setdefault(digest, i)
    for i, stage in enumerate(stages["stages"]):
        for path, digest in stage["consumed"].items():
            if producer.get(digest, -1) >= i:
                later = stages["stages"][producer[digest]]["name"]
                raise Failed(f"stage {stage['name']!r} consumed {path} {digest[:16]}…, which "
                             f"stage {later!r} produced only later.")


def check_stage_records(stages: dict[str, Any], payload_sha: Callable[[str], str | None],
                        stage_times: list[dict[str, Any]] | None = None) -> str:
    names = [s["name"] for s in stages["stages"]]
    if names != STAGE_ORDER:
        raise Failed(f"stages.json lists {names}, expected {STAGE_ORDER} in that order.")
    check_digest_order(stages)
    times = check_stage_times(stage_times) if stage_times is not None else "no stage times"
    checked = 0
    for stage in stages["stages"]:
        for role in ("consumed", "produced"):
            for path, digest in stage[role].items():
                safe_bag_path(path, f"stages.json {stage['name']} {role}")
                if path == "stages.json":
                    raise Failed(f"stage {stage['name']!r} lists stages.json, which cannot hash "
                                 "itself.")
                actual = payload_sha(f"data/{path}")
                if actual is not None and actual != digest:
                    raise DigestMismatch(f"stage {stage['name']!r} {role} {path} with sha256 "
                                         f"{digest[:16]}…, the file in the bag hashes to "
                                         f"{actual[:16]}….", path=f"data/{path}",
                                         algorithm="sha256", expected=digest, found=actual)
                checked += actual is not None
    return (f"{len(names)} stages in order; {checked} recorded hashes equal the files; "
            f"{times}")


def check_audit_after_fit(stages: dict[str, Any], temperature_sha: str, audit_sha: str,
                          calibration_sha: str) -> str:
    by_name = {s["name"]: (i, s) for i, s in enumerate(stages["stages"])}
    if "fit" not in by_name or "audit-inference" not in by_name:
        raise Failed("stages.json lacks the fit or the audit-inference stage.")
    fit_i, fit = by_name["fit"]
    audit_i, audit = by_name["audit-inference"]
    if fit["produced"].get("temperature.json") != temperature_sha:
        raise Failed(f"the fit stage does not record producing temperature.json with sha256 "
                     f"{temperature_sha[:16]}….")
    if fit["consumed"].get("predictions/calibration.parquet") != calibration_sha:
        raise Failed("the fit stage does not record consuming predictions/calibration.parquet "
                     "as it is in the bag.")
    named = audit["consumed"].get("temperature.json")
    if named != temperature_sha:
        raise Failed(f"the audit-inference stage consumed temperature.json "
                     f"{str(named)[:16]}…, but the frozen temperature in the bag hashes to "
                     f"{temperature_sha[:16]}…; the audit did not run on this temperature.")
    if audit["produced"].get("predictions/audit.parquet") != audit_sha:
        raise Failed("the audit-inference stage does not record producing "
                     "predictions/audit.parquet as it is in the bag.")
    if audit_i < fit_i:
        raise Failed("the audit-inference stage ran before the fit stage.")
    for stage in stages["stages"][:audit_i]:
        for role in ("consumed", "produced"):
            if "predictions/audit.parquet" in stage[role]:
                raise Failed(f"stage {stage['name']!r}, before audit-inference, {role} "
                             "predictions/audit.parquet.")
            for path, digest in stage[role].items():
                if digest == audit_sha:
                    raise Failed(f"stage {stage['name']!r}, before audit-inference, {role} the "
                                 f"audit predictions {audit_sha[:16]}… under the name {path}.")
    for stage in stages["stages"][audit_i:]:
        for role in ("consumed", "produced"):
            for path, digest in stage[role].items():
                if digest == audit_sha and path != "predictions/audit.parquet":
                    raise Failed(f"stage {stage['name']!r} {role} the audit predictions "
                                 f"{audit_sha[:16]}… under another name, {path}.")
    return (f"fit produced temperature.json {temperature_sha[:12]}…, audit-inference consumed the "
            "same file and ran after it; nothing touched the audit pool before")


def stage_records(ctx: Context) -> str:
    """The five stages in order (records, digests, times); recorded hashes equal the files."""
    environment = ctx.docs.get(layout.ENVIRONMENT_JSON)  # invalid: json.environment fails
    return check_stage_records(ctx.doc(layout.STAGES_JSON), ctx.payload_sha,
                               environment["stage_times"] if environment is not None else None)


def audit_after_fit(ctx: Context) -> str:
    """Audit inference consumed the fit's temperature; nothing touched the audit pool before."""
    return check_audit_after_fit(
        ctx.doc(layout.STAGES_JSON), ctx.sha(layout.TEMPERATURE_JSON),
        ctx.sha(layout.AUDIT_PREDICTIONS), ctx.sha(layout.CALIBRATION_PREDICTIONS))
