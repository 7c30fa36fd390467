"""The resources against the protocol's pins: the profile, every model and dataset file, and the
pools' dataset hash."""

from __future__ import annotations

from typing import Any

from bundle import layout
from verify.context import Context
from verify.result import Failed

FORMAL_UNPINNED_PINS = ("hub-lfs", "first-use")
"""How a file the protocol lists without a sha256 may be pinned in a formal run (the job's
rule, job/resources.py): by the hub's published LFS sha256 or on first use, never `none`."""


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


def resource_pins(ctx: Context) -> str:
    """The profile, the resources against the protocol's pins, the pools' dataset hash."""
    info = ctx.need(ctx.info, "bag.info")
    return check_resources(ctx.doc(layout.RESOURCES_JSON), ctx.doc(layout.PROTOCOL_JSON),
                           info[layout.INFO_PROFILE],
                           ctx.doc(layout.POOLS_JSON)["dataset_sha256"])
