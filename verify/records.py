"""Cross-checks between the payload records: one protocol everywhere, resources against the
protocol's pins, stage records against the files, and the audit stage after the fit."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from bundle import layout
from verify import limits
from verify.bag import safe_bag_path
from verify.context import Context
from verify.result import DigestMismatch, Failed, ValueMismatch

STAGE_ORDER = ["split", "calibration-inference", "fit", "audit-inference", "metrics"]
FORMAL_UNPINNED_PINS = ("hub-lfs", "first-use")
"""How a file the protocol lists without a sha256 may be pinned in a formal run (the job's
rule, job/resources.py): by the hub's published LFS sha256 or on first use, never `none`."""


def check_protocol_everywhere(protocol_sha: str, named: dict[str, str]) -> str:
    """`named` maps a place (record, field) to the protocol sha256 it names."""
    wrong = {where: value for where, value in named.items() if value != protocol_sha}
    if wrong:
        where, value = next(iter(wrong.items()))
        raise ValueMismatch(f"{where} names protocol {str(value)[:16]}…, but data/protocol.json "
                            f"hashes to {protocol_sha[:16]}… ({len(wrong)} place(s) disagree).",
                            file=where, field="protocol_sha256", expected=protocol_sha,
                            found=str(value))
    return f"sha256 {protocol_sha[:16]}… named by all {len(named)} records"


def check_resources(resources: dict[str, Any], protocol: dict[str, Any], bag_profile: str,
                    pools_dataset_sha: str) -> str:
    if resources["profile"] != bag_profile:
        raise Failed(f"bag-info.txt says Profile {bag_profile!r}, resources.json says "
                     f"{resources['profile']!r}.")
    formal_problems = []
    for kind in ("model", "dataset"):
        used, pinned = resources[kind], protocol["resources"][kind]
        if "revision_checked_by_hub" in used and used["revision_checked_by_hub"] != (used["source"] == "hub"):
            raise Failed(f"resources.json says the {kind} revision was checked by a hub "
                         f"{used['revision_checked_by_hub']}, but its source is {used['source']!r}; only files "
                         "from the hub are checked at their revision.")
        if used["repo_id"] != pinned["repo_id"] or used["repo_type"] != pinned["repo_type"]:
            formal_problems.append(f"{kind} is {used['repo_id']!r}, the protocol pins "
                                   f"{pinned['repo_id']!r}")
        if used["revision"] != pinned["revision"]:
            formal_problems.append(f"{kind} revision {used['revision'][:12]} is not the pinned "
                                   f"{pinned['revision'][:12]}")
        pins = {f["path"]: f for f in pinned["files"]}
        files = {f["path"]: f for f in used["files"]}
        if len(files) != len(used["files"]):
            raise Failed(f"resources.json lists a {kind} file twice.")
        same_repo = (used["repo_id"] == pinned["repo_id"]
                     and used["revision"] == pinned["revision"])
        for path, f in files.items():
            pin = pins.get(path) if same_repo else None
            if pin is not None and pin["sha256"] is not None and (
                    f["pin"] != "protocol" or f["pinned_sha256"] != pin["sha256"]):
                raise Failed(f"resources.json {kind} file {path!r} records pin {f['pin']!r} "
                             f"{str(f['pinned_sha256'])[:16]}…, the protocol pins "
                             f"{pin['sha256'][:16]}….")
            if f["pinned_sha256"] is not None and f["matches_pin"] != (
                    f["sha256"] == f["pinned_sha256"]):
                raise Failed(f"resources.json {kind} file {path!r} says matches_pin "
                             f"{f['matches_pin']}, but sha256 {f['sha256'][:16]}… vs pin "
                             f"{f['pinned_sha256'][:16]}… says otherwise.")
            if f["pinned_sha256"] is None and f["matches_pin"]:
                raise Failed(f"resources.json {kind} file {path!r} matches_pin is true without a "
                             "pin.")
            formal_problems.extend(_formal_pin_problems(kind, path, f, pin))
        for path, pin in pins.items():
            f = files.get(path)
            if f is None:
                formal_problems.append(f"{kind} file {path!r} is not listed")
            elif f["size"] != pin["size"] or (pin["sha256"] is not None
                                              and f["sha256"] != pin["sha256"]):
                formal_problems.append(f"{kind} file {path!r} differs from its pin")
    dataset_hashes = {f["sha256"] for f in resources["dataset"]["files"]}
    if pools_dataset_sha not in dataset_hashes:
        raise Failed(f"pools.json names dataset {pools_dataset_sha[:16]}…, which is not a dataset "
                     "file in resources.json.")
    if resources["profile"] == "formal":
        if formal_problems or resources["deviations"]:
            why = formal_problems[0] if formal_problems else "deviations are listed"
            raise Failed(f"the profile is 'formal' but {why}; a formal run uses exactly the "
                         "protocol's pinned files.")
        return "profile formal: every file is the protocol's pinned file at its revision"
    if not resources["deviations"]:
        raise Failed("the profile is 'other' but no deviation is given; each must be stated.")
    return (f"profile other, {len(resources['deviations'])} deviation(s) stated; pins recorded "
            "consistently")


def _formal_pin_problems(kind: str, path: str, f: dict[str, Any],
                         pin: dict[str, Any] | None) -> list[str]:
    """Why the used file `f` keeps a run from being formal: it is not a file the protocol lists,
    or it is not pinned the way the protocol's entry requires, or it does not match its pin."""
    if pin is None:
        return [f"{kind} file {path!r} is not a file the protocol lists at its revision"]
    allowed = ("protocol",) if pin["sha256"] is not None else FORMAL_UNPINNED_PINS
    if f["pin"] not in allowed:
        return [(f"{kind} file {path!r} is pinned {f['pin']!r}, a formal run pins it by "
                 f"{' or '.join(allowed)}")]
    if not f["matches_pin"] or f["pinned_sha256"] is None:
        return [f"{kind} file {path!r} does not match its pin"]
    return []


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


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def protocol_hash(ctx: Context) -> str:
    """bag-info.txt, every record, every stage and the predicate name the sha256 of data/protocol.json."""
    sha = ctx.sha(layout.PROTOCOL_JSON)
    named: dict[str, str] = {}
    info = ctx.need(ctx.info, "bag.info")
    named["bag-info.txt Protocol-SHA256"] = info[layout.INFO_PROTOCOL_SHA256]
    for path in (layout.POOLS_JSON, layout.TEMPERATURE_JSON, layout.TRAJECTORY_JSON,
                 layout.METRICS_JSON, layout.STAGES_JSON):
        named[f"{path} protocol_sha256"] = ctx.doc(path)["protocol_sha256"]
    for path in layout.PROTOCOL_SECTION_PAYLOAD.values():
        if path in ctx.docs or (ctx.tree is not None and path in ctx.tree.files):
            named[f"{path} protocol_sha256"] = ctx.doc(path)["protocol_sha256"]
    for stage in ctx.doc(layout.STAGES_JSON)["stages"]:
        named[f"stages.json stage {stage['name']!r}"] = stage["protocol_sha256"]
    named["the signed predicate"] = ctx.doc("predicate")["protocol_sha256"]
    return check_protocol_everywhere(sha, named)


def has_pre_registered_protocol(ctx: Context) -> bool:
    """Whether the user gave a pre-registered protocol (--protocol)."""
    return ctx.expected_protocol_sha256 is not None


def pre_registered(ctx: Context) -> str:
    """data/protocol.json is byte-identical to the pre-registered protocol."""
    pinned = ctx.need(ctx.expected_protocol_sha256, "input.pre-registered-protocol")
    sha = ctx.sha(layout.PROTOCOL_JSON)
    if sha != pinned:
        raise DigestMismatch(f"data/protocol.json hashes to {sha[:16]}…, the pre-registered "
                             f"protocol to {pinned[:16]}….", path=layout.PROTOCOL_JSON,
                             algorithm="sha256", expected=pinned, found=sha)
    return f"data/protocol.json is the pre-registered protocol ({sha[:16]}…)"


def resource_pins(ctx: Context) -> str:
    """The profile, the resources against the protocol's pins, the pools' dataset hash."""
    info = ctx.need(ctx.info, "bag.info")
    return check_resources(ctx.doc(layout.RESOURCES_JSON), ctx.doc(layout.PROTOCOL_JSON),
                           info[layout.INFO_PROFILE],
                           ctx.doc(layout.POOLS_JSON)["dataset_sha256"])


def stage_records(ctx: Context) -> str:
    """The five stages in order (records, digests, times); recorded hashes equal the files."""
    environment = ctx.docs.get(layout.ENVIRONMENT_JSON)  # invalid: json.environment fails
    return check_stage_records(ctx.doc(layout.STAGES_JSON), ctx.payload_sha,
                               environment["stage_times"] if environment is not None else None)


def protocol_bounds(ctx: Context) -> str:
    """The protocol's rows, classes, steps and resamples are within the verifier's bounds."""
    try:
        dims = limits.dimensions(ctx.doc(layout.PROTOCOL_JSON))
    except limits.ProtocolOutOfBounds as exc:
        raise Failed(f"{exc}; the verifier refuses a bundle it cannot check in bounded time and "
                     "memory (FORMAT.md, Limits).") from exc
    return (f"{dims.rows:,} rows, {dims.classes} classes, {dims.steps} steps, "
            f"{dims.resamples:,} resamples: within the verifier's bounds")


def audit_after_fit(ctx: Context) -> str:
    """Audit inference consumed the fit's temperature; nothing touched the audit pool before."""
    return check_audit_after_fit(
        ctx.doc(layout.STAGES_JSON), ctx.sha(layout.TEMPERATURE_JSON),
        ctx.sha(layout.AUDIT_PREDICTIONS), ctx.sha(layout.CALIBRATION_PREDICTIONS))


def check_threads(environment: dict[str, Any], protocol: dict[str, Any]) -> str:
    """The run's thread count keeps to the protocol: environment.json's `threads` names the
    protocol's torch_threads as its bound, used lies within it and is the count torch reported, and
    a count chosen by physical cores is the least of the bound, the cores and the CPU quota."""
    t, bound = environment["threads"], protocol["inference"]["torch_threads"]
    reported = environment["torch"].get("num_threads")
    if t["protocol_bound"] != bound:
        raise Failed(f"environment.json says the protocol allowed {t['protocol_bound']} torch threads, "
                     f"but protocol.json's torch_threads is {bound}.")
    if not 1 <= t["used"] <= bound:
        raise Failed(f"environment.json says the run used {t['used']} torch threads, outside the "
                     f"protocol's 1..{bound}.")
    if reported != t["used"]:
        raise Failed(f"environment.json says the run chose {t['used']} torch threads, but torch reported "
                     f"{reported}.")
    if t["chosen_by"] == "physical cores":
        default = min(bound, t["physical_cores"], t["cpu_quota"] or t["physical_cores"])
        if t["used"] != default:
            raise Failed(f"environment.json says the run used {t['used']} torch threads for "
                         f"{t['physical_cores']} physical cores (quota {t['cpu_quota']}) under a bound of "
                         f"{bound}; that rule gives {default}.")
    return f"{t['used']} of at most {bound} torch threads ({t['chosen_by']})"


def has_thread_choice(ctx: Context) -> bool:
    """Runs since the thread count became a run setting record it; earlier format-1 bundles do not."""
    environment = ctx.docs.get(layout.ENVIRONMENT_JSON)
    return isinstance(environment, dict) and "threads" in environment


def threads(ctx: Context) -> str:
    """The run's torch threads against the protocol's bound (environment.json `threads`)."""
    return check_threads(ctx.doc(layout.ENVIRONMENT_JSON), ctx.doc(layout.PROTOCOL_JSON))


PACKED_FORWARD, TRANSFORMERS_FORWARD, FALLBACK = "packed-distilbert", "transformers", "fallback: "


def check_forward_choice(environment: dict[str, Any]) -> str:
    """environment.json's `forward_choice` agrees with the rest of the record: the packed forward
    comes with its forward_check (the job writes one whenever that forward ran), transformers'
    forward with none and a reason that says it is a fallback."""
    choice = environment["forward_choice"]
    checked = "forward_check" in environment
    if choice["name"] == PACKED_FORWARD and not checked:
        raise Failed("environment.json says the packed forward ran but holds no forward_check; every run of "
                     "that forward checks it against transformers' forward.")
    if choice["name"] == TRANSFORMERS_FORWARD:
        if checked:
            raise Failed("environment.json says transformers' forward ran but holds a forward_check of the "
                         "packed forward.")
        if not choice["reason"].startswith(FALLBACK):
            raise Failed(f"environment.json's forward_choice names transformers' forward with the reason "
                         f"{choice['reason']!r}, which does not start with {FALLBACK!r}.")
    return f"{choice['name']} ({choice['reason']})"


def has_forward_choice(ctx: Context) -> bool:
    """Runs since the forward's choice was recorded have it; earlier bundles do not."""
    environment = ctx.docs.get(layout.ENVIRONMENT_JSON)
    return isinstance(environment, dict) and "forward_choice" in environment


def forward_choice(ctx: Context) -> str:
    """Which forward ran and why (environment.json `forward_choice`), against its forward_check."""
    return check_forward_choice(ctx.doc(layout.ENVIRONMENT_JSON))
