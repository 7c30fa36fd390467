"""The run's settings as environment.json records them: the torch threads against the protocol's
bound, and which forward ran and why."""

from __future__ import annotations

from typing import Any

from bundle import layout
from verify.context import Context
from verify.result import Failed


def layout_text(threads: dict[str, Any]) -> str:
    """How the run's forwards used more than one thread (environment.json threads.layout), as the
    check reports it; nothing for one thread or a record without a layout."""
    used, found = threads["used"], threads.get("layout")
    if used == 1 or found not in ("batches", "operators"):
        return ""
    return f", {used} batches at once, one thread each" if found == "batches" else ", one batch at a time"


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
    return f"{t['used']} of at most {bound} torch threads ({t['chosen_by']}){layout_text(t)}"


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
