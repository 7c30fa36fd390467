"""Verify a sweep directory (bundle/FORMAT.md "Sweeps"): the signed plan and index, the index
covering exactly the plan, every member bundle verified in parallel processes against its planned
protocol, the index's summaries equal to the members' records, and the views rendered again.

The verdict is one table: the sweep's checks (SWEEP_CHECKS, in order), then one row per planned
member. Exit 0 only when every check passes and every planned member is done and verified; a
member the index reports as failed is shown as a reported failure, and the sweep does not pass."""

from __future__ import annotations

import binascii
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bundle import layout, limits
from bundle.canonical import loads_strict
from bundle.errors import CanonicalJSONError, SignatureThresholdError
from bundle.userfile import read_user_file
from verify import schemacheck, signature
from verify.api import verify_path
from verify.context import Attestation, Trust
from verify.result import EXIT_FAILED, EXIT_OK, Check, Failed, InputError

SWEEP_CHECKS: Final = (
    ("sweep.plan", "the plan is a DSSE envelope signed by a trusted key over a sweep-plan statement"),
    ("sweep.file", "sweep.json is the sweep file the plan names"),
    ("sweep.index", "the index is a DSSE envelope signed by a trusted key over a sweep-index statement"),
    ("sweep.index-plan", "the index names this plan and lists every planned member exactly once, in order"),
    ("sweep.members-folder", "members/ holds exactly one bundle folder per done member, nothing else"),
    ("sweep.members", "every done member's bundle verifies with its planned protocol, statement and summary"),
    ("sweep.views", "sweep.md and the figures are the rendering of the index"),
    ("sweep.reproductions", "every --reproduction names a done member and passes with its bundle"),
    ("sweep.complete", "every planned member is done"),
)
"""The sweep's checks, in the order they run; verify/README.md ("Sweeps") lists them."""

MAX_SWEEP_FILE_BYTES: Final = limits.MAX_FILE_BYTES
"""sweep.json is only hashed, never parsed here; one larger than any one file may be is refused unread."""
MAX_PROCESSES: Final = 4
"""Members are verified in at most this many processes, each holding one bundle at a time."""


def is_sweep(path: Path) -> bool:
    """True when `path` is a folder holding a sweep plan (a sweep directory, not a bag)."""
    return path.is_dir() and not path.is_symlink() and (path / layout.SWEEP_PLAN).is_file()


@dataclass(frozen=True)
class MemberResult:
    """One planned member's row: what the index says and what verifying its bundle found."""

    name: str
    status: str  # done | failed | missing (the index lists no such member)
    verified: bool
    detail: str


@dataclass
class SweepOutcome:
    path: str
    checks: list[Check]
    members: list[MemberResult]
    seconds: float
    exit_code: int
    notes: list[str] = field(default_factory=list)


@dataclass
class _State:
    plan: dict[str, Any] | None = None  # the plan's predicate
    plan_sha256: str | None = None
    index: dict[str, Any] | None = None  # the index's predicate
    rows: dict[str, MemberResult] = field(default_factory=dict)
    attested: dict[str, list[Attestation]] = field(default_factory=dict)  # member -> its attestations
    unmatched: list[str] = field(default_factory=list)  # attestations that name no done member


def _statement(path: Path, what: str, predicate_type: str, schema: str,
               keys: list[tuple[Ed25519PublicKey, str]], threshold: int, cap: int
               ) -> tuple[dict[str, Any], dict[str, str], str]:
    """(predicate, subject name -> sha256, statement sha256) of the signed record at `path`, which
    at least `threshold` of the distinct trusted `keys` must have signed. A file over `cap` bytes
    (the format's bound for it) is refused unread; the statement is parsed only once authenticated."""
    if not path.is_file() or path.is_symlink():
        raise Failed(f"the sweep has no {path.name}; {what} is missing.")
    try:
        data = read_user_file(path, f"sweep's {what}", cap, InputError)
    except InputError as exc:
        raise Failed(f"{path.name} is {path.stat().st_size:,} bytes, over the {cap:,} the format allows "
                     f"for this {what}; it was not read.") from exc
    env = signature.parse_envelope(data, path.name)
    try:
        env.verify([key for key, _ in keys], threshold)
    except SignatureThresholdError as exc:
        if exc.verified == 0:
            raise Failed(f"{path.name} is not signed by a trusted key; it was changed after signing or "
                         "another key signed it.") from exc
        raise Failed(f"{path.name} is signed by {exc.verified} of the trusted keys, fewer than the "
                     f"threshold of {threshold}.") from exc
    try:
        statement = loads_strict(env.payload, source=f"The {what}")
    except CanonicalJSONError as exc:
        raise Failed(str(exc)) from exc
    if (not isinstance(statement, dict) or statement.get("_type") != layout.STATEMENT_TYPE
            or statement.get("predicateType") != predicate_type):
        raise Failed(f"{path.name} does not hold an in-toto Statement v1 of type {predicate_type}.")
    schemacheck.validate(statement.get("predicate"), schema, f"the {what}'s predicate")
    digests, _notes = signature.subject_digests(statement.get("subject"))
    return statement["predicate"], {n: d["sha256"] for n, d in digests.items()}, hashlib.sha256(env.payload).hexdigest()


def _check_plan(root: Path, st: _State, keys: list[tuple[Ed25519PublicKey, str]], threshold: int) -> str:
    predicate, subjects, digest = _statement(root / layout.SWEEP_PLAN, "plan", layout.SWEEP_PLAN_PREDICATE_TYPE,
                                             "sweep-plan", keys, threshold, layout.SWEEP_MAX_PLAN_BYTES)
    names = [m["name"] for m in predicate["members"]]
    if len(set(names)) != len(names):
        raise Failed("the plan names a member twice.")
    expected = {layout.SWEEP_FILE: predicate["sweep"]["sha256"],
                **{layout.member_protocol_subject(m["name"]): m["protocol_sha256"] for m in predicate["members"]}}
    if subjects != expected:
        raise Failed("the plan's subjects differ from its members' protocols and sweep file.")
    st.plan, st.plan_sha256 = predicate, digest
    return f"{len(names)} members planned; plan statement sha256 {digest[:16]}…"


def _need_plan(st: _State) -> dict[str, Any]:
    if st.plan is None:
        raise Failed("no signed plan to check against.")
    return st.plan


def _check_file(root: Path, st: _State) -> str:
    plan = _need_plan(st)
    path = root / layout.SWEEP_FILE
    if not path.is_file() or path.is_symlink():
        raise Failed(f"the sweep has no {layout.SWEEP_FILE}.")
    digest = hashlib.sha256(read_user_file(path, "sweep file", MAX_SWEEP_FILE_BYTES, InputError)).hexdigest()
    if digest != plan["sweep"]["sha256"]:
        raise Failed(f"{layout.SWEEP_FILE} has sha256 {digest[:16]}…, the plan names "
                     f"{plan['sweep']['sha256'][:16]}…; it is not the sweep that was planned.")
    return f"sweep {plan['sweep']['name']}, sha256 {digest[:16]}…"


def _check_index(root: Path, st: _State, keys: list[tuple[Ed25519PublicKey, str]], threshold: int) -> str:
    if not (root / layout.SWEEP_INDEX).exists():
        raise Failed(f"the sweep has no {layout.SWEEP_INDEX}: it has not finished; run the sweep again to "
                     "resume it.")
    members = len(st.plan["members"]) if st.plan is not None else layout.SWEEP_MAX_MEMBERS
    predicate, subjects, _digest = _statement(root / layout.SWEEP_INDEX, "index",
                                              layout.SWEEP_INDEX_PREDICATE_TYPE, "sweep-index", keys, threshold,
                                              layout.sweep_index_max_bytes(members))
    expected = {layout.SWEEP_PLAN + "#payload": predicate["plan_sha256"],
                **{layout.member_statement_subject(r["name"]): r["statement_sha256"]
                   for r in predicate["members"] if r["status"] == "done"}}
    if subjects != expected:
        raise Failed("the index's subjects differ from its plan and done members.")
    st.index = predicate
    done = sum(r["status"] == "done" for r in predicate["members"])
    return f"{len(predicate['members'])} members indexed: {done} done, {len(predicate['members']) - done} failed"


def _check_index_plan(root: Path, st: _State) -> str:
    plan = _need_plan(st)
    if st.index is None:
        raise Failed("no signed index to check.")
    if st.index["plan_sha256"] != st.plan_sha256:
        raise Failed(f"the index names the plan {st.index['plan_sha256'][:16]}…, not this one "
                     f"({str(st.plan_sha256)[:16]}…).")
    planned = [m["name"] for m in plan["members"]]
    listed = [r["name"] for r in st.index["members"]]
    if listed != planned:
        dropped = sorted(set(planned) - set(listed))
        extra = sorted(set(listed) - set(planned))
        twice = sorted({n for n in listed if listed.count(n) > 1})
        raise Failed(f"the index does not list the plan's members once each in plan order: missing "
                     f"{dropped[:5]}, not planned {extra[:5]}, listed twice {twice[:5]}.")
    return f"all {len(planned)} planned members listed once"


def _members_folder_problem(extra: list[str], unplanned: list[str], missing: list[str]) -> str:
    """One sentence naming only what is wrong with members/: folders that are not done members (and
    which of them the plan never named), and done members without a folder."""
    parts = []
    if extra:
        which = f", {len(unplanned)} of them not planned at all ({', '.join(unplanned[:5])})" if unplanned else ""
        parts.append(f"holds {len(extra)} folder(s) that are not done members ({', '.join(extra[:5])}){which}")
    if missing:
        parts.append(f"lacks the bundle of {len(missing)} done member(s) ({', '.join(missing[:5])})")
    return f"members/ {' and '.join(parts)}."


def _check_members_folder(root: Path, st: _State) -> str:
    plan = _need_plan(st)
    done = ({r["name"] for r in st.index["members"] if r["status"] == "done"} if st.index is not None
            else set())
    folder = root / layout.SWEEP_MEMBERS
    present = sorted(os.listdir(folder)) if folder.is_dir() and not folder.is_symlink() else []
    planned = {m["name"] for m in plan["members"]}
    extra = [n for n in present if n not in done]
    missing = sorted(done - set(present))
    if extra or missing:
        unplanned = [n for n in extra if n not in planned]
        raise Failed(_members_folder_problem(extra, unplanned, missing))
    return f"{len(present)} member bundles"


def _public_raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _summary(bag: Path) -> dict[str, Any]:
    """The index's summary of a member, re-derived from its (already verified) records."""
    def doc(rel: str) -> Any:
        return loads_strict((bag / rel).read_bytes(), source=rel)

    metrics, temperature = doc(layout.METRICS_JSON), doc(layout.TEMPERATURE_JSON)
    bootstrap = doc(layout.BOOTSTRAP_JSON) if (bag / layout.BOOTSTRAP_JSON).is_file() else None
    audit = metrics["pools"]["audit"]
    diffs = bootstrap["differences"] if bootstrap is not None else {}
    return {"temperature": temperature["temperature"], "boundary": temperature["boundary"],
            "n": audit["raw"]["n"],
            "interval_level": bootstrap["interval"]["level"] if bootstrap is not None else None,
            "metrics": {k: {"raw": audit["raw"][k], "calibrated": audit["calibrated"][k],
                            "difference": ({x: diffs[k][x] for x in ("point", "lower", "upper")}
                                           if k in diffs else None)}
                        for k in layout.SWEEP_SUMMARY_METRICS}}


def verify_member(bag: str, keys_raw: tuple[bytes, ...], protocol_sha256: str,
                  statement_sha256: str, summary: dict[str, Any], attestations: tuple[Attestation, ...] = (),
                  reproducers_raw: tuple[bytes, ...] = (), threshold: int = 1,
                  require_bit_identical: bool = False,
                  max_tolerance: float = layout.DEFAULT_LOGIT_TOLERANCE) -> tuple[bool, str]:
    """(verified, detail) for one member bundle; runs in a worker process, so all arguments are
    plain data. The bundle must pass every check under `threshold` of the trusted keys with the
    planned protocol (and its reproductions at the level asked for), its signed statement must be
    the one the index names, and its records must give the index's summary."""
    keys = [(Ed25519PublicKey.from_public_bytes(k), f"trusted key {i + 1}") for i, k in enumerate(keys_raw)]
    trust = Trust(key=keys[0][0], source=keys[0][1], more_keys=tuple(keys[1:]), threshold=threshold)
    start = time.perf_counter()
    try:
        outcome = verify_path(Path(bag), trust, expected_protocol_sha256=protocol_sha256, attestations=attestations,
                              reproducers=tuple(Ed25519PublicKey.from_public_bytes(k) for k in reproducers_raw),
                              require_bit_identical=require_bit_identical, max_tolerance=max_tolerance)
    except (InputError, OSError, ValueError, UnicodeError, MemoryError, RecursionError) as exc:
        # an unreadable member is a failed member, never a crash of the whole verification
        return False, f"cannot be read ({type(exc).__name__}: {exc})"
    if outcome.exit_code != EXIT_OK:
        bad = [c for c in outcome.checks if c.status != "pass"]
        first = bad[0] if bad else None
        return False, (f"{len(bad)} check(s) did not pass, first {first.id}: {first.detail}" if first
                       else "did not verify")
    env = signature.parse_envelope((Path(bag) / layout.PROVENANCE).read_bytes())
    if hashlib.sha256(env.payload).hexdigest() != statement_sha256:
        return False, "its signed statement is not the one the index names; the bundle was swapped or re-signed."
    if _summary(Path(bag)) != summary:
        return False, "the index's summary differs from the bundle's metrics, temperature or bootstrap."
    reproduced = f", {len(attestations)} reproduction(s) accepted" if attestations else ""
    return True, f"verified ({len(outcome.checks)} checks{reproduced}, {time.perf_counter() - start:.1f} s)"


def _bounded(executor: ProcessPoolExecutor, jobs: Iterator[tuple[str, tuple[Any, ...]]],
             window: int) -> Iterator[tuple[str, tuple[bool, str]]]:
    """Run `verify_member(*args)` for each (name, args), at most `window` submitted at a time, and
    yield (name, result) as they finish: memory stays bounded however many members there are."""
    running: dict[Future[tuple[bool, str]], str] = {}
    for name, args in jobs:
        running[executor.submit(verify_member, *args)] = name
        if len(running) >= window:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                yield running.pop(fut), fut.result()
    for fut in list(running):
        yield running.pop(fut), fut.result()


def _attested_statement(att: Attestation) -> str | None:
    """The bundle statement sha256 an attestation names (unverified: the member's own checks verify it)."""
    try:
        env = signature.parse_envelope(att.data)
        digests, _ = signature.subject_digests(loads_strict(env.payload, source=att.source).get("subject"))
    except (Failed, CanonicalJSONError, AttributeError):
        return None
    entry = digests.get(layout.SIGNED_STATEMENT_SUBJECT)
    return entry["sha256"] if entry else None


def _match_attestations(st: _State, attestations: tuple[Attestation, ...]) -> None:
    done = {r["statement_sha256"]: r["name"] for r in (st.index or {}).get("members", []) if r["status"] == "done"}
    for att in attestations:
        name = done.get(_attested_statement(att) or "")
        if name is None:
            st.unmatched.append(att.source)
        else:
            st.attested.setdefault(name, []).append(att)


def _check_members(root: Path, st: _State, keys: list[tuple[Ed25519PublicKey, str]], processes: int,
                   attestations: tuple[Attestation, ...] = (), reproducers_raw: tuple[bytes, ...] = (),
                   threshold: int = 1, require_bit_identical: bool = False,
                   max_tolerance: float = layout.DEFAULT_LOGIT_TOLERANCE) -> str:
    plan = _need_plan(st)
    if st.index is None:
        raise Failed("no signed index to say which members are done.")
    _match_attestations(st, attestations)
    indexed = {r["name"]: r for r in st.index["members"]}
    keys_raw = tuple(_public_raw(k) for k, _ in keys)
    jobs = []
    for m in plan["members"]:
        row = indexed.get(m["name"])
        if row is None:
            st.rows[m["name"]] = MemberResult(m["name"], "missing", False, "the index does not list it")
        elif row["status"] == "failed":
            st.rows[m["name"]] = MemberResult(m["name"], "failed", False, f"reported failure: {row['error']}")
        else:
            bag = root / layout.SWEEP_MEMBERS / m["name"]
            jobs.append((m["name"], (str(bag), keys_raw, m["protocol_sha256"], row["statement_sha256"],
                                     row["summary"], tuple(st.attested.get(m["name"], [])), reproducers_raw,
                                     threshold, require_bit_identical, max_tolerance)))
    if jobs:
        workers = max(1, min(processes, len(jobs)))
        with ProcessPoolExecutor(max_workers=workers) as executor:
            for name, (ok, detail) in _bounded(executor, iter(jobs), 2 * workers):
                st.rows[name] = MemberResult(name, "done", ok, detail)
    bad = [n for n, _ in jobs if not st.rows[n].verified]
    if bad:
        raise Failed(f"{len(bad)} of {len(jobs)} done members do not verify: {bad[:5]}.")
    return f"{len(jobs)} done members verified in {min(processes, max(len(jobs), 1))} processes"


def _check_views(root: Path, st: _State) -> str:
    plan = _need_plan(st)
    if st.index is None:
        raise Failed("no signed index to render the views from.")
    # deferred: matplotlib, about half a second of every `python -m verify`, only to draw
    from bundle.views.sweep_comparison import render_sweep_views, sweep_markdown_v1

    differ, earlier = [], False
    for rel, data in render_sweep_views(plan, st.index).items():
        path = root / rel
        found = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        if found == data:
            continue
        if rel == layout.SWEEP_MD and found == sweep_markdown_v1(plan, st.index):
            earlier = True  # a sweep written before sweep.md summed up across members
            continue
        differ.append(rel)
    if differ:
        raise Failed(f"{', '.join(differ)} {'is' if len(differ) == 1 else 'are'} not the rendering of the index; "
                     "changed or missing.")
    return (f"{len(layout.SWEEP_VIEWS)} views rendered again, byte for byte"
            + (" (sweep.md in the layout of sweeps written before the across-members summary)" if earlier else ""))


def _check_reproductions(st: _State, given: int) -> str:
    if not given:
        return "no --reproduction given"
    if st.unmatched:
        raise Failed(f"{st.unmatched[:5]} name no done member of this sweep.")
    bad = [n for n in st.attested if not st.rows.get(n, MemberResult(n, "", False, "")).verified]
    if bad:
        raise Failed(f"the reproductions of {bad[:5]} do not pass with their bundles (see their rows).")
    return f"{given} attestation(s) for {len(st.attested)} member(s), each accepted with its bundle"


def _check_complete(root: Path, st: _State) -> str:
    plan = _need_plan(st)
    not_done = [m["name"] for m in plan["members"]
                if m["name"] not in st.rows or not st.rows[m["name"]].verified]
    if not_done:
        raise Failed(f"{len(not_done)} of {len(plan['members'])} planned members are not done and verified: "
                     f"{not_done[:5]}.")
    return f"all {len(plan['members'])} planned members done and verified"


_SWEEP_SIGNED: Final = frozenset({layout.SWEEP_FILE, layout.SWEEP_PLAN, layout.SWEEP_INDEX, *layout.SWEEP_VIEWS})
"""What the plan and index cover at a sweep's root (the views by being their rendering)."""


def unsigned_files(root: Path, limit: int = limits.MAX_ENTRIES) -> list[str]:
    """Every path under the sweep's root, outside members/ (the members check owns that folder),
    that nothing signed covers: an APPROVED.md beside the plan, a stray figure. At most `limit`
    entries are looked at; more are reported as a count. Never part of the verdict: shown so that
    no reader takes an unsigned file for part of what was verified."""
    found: list[str] = []
    seen = 0
    stack = [("", root)]
    while stack:
        rel, folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            found.append(f"{rel or '.'}/ (cannot be listed)")
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return sorted(found) + [f"... and more: over {limit:,} entries, not all looked at"]
            name = f"{rel}{entry.name}"
            if not rel and entry.name == layout.SWEEP_MEMBERS and entry.is_dir(follow_symlinks=False):
                continue
            if entry.is_dir(follow_symlinks=False) and any(v.startswith(f"{name}/") for v in _SWEEP_SIGNED):
                stack.append((f"{name}/", Path(entry.path)))
            elif name not in _SWEEP_SIGNED or not entry.is_file(follow_symlinks=False):
                found.append(name + ("/" if entry.is_dir(follow_symlinks=False) else ""))
    return sorted(found)


def verify_sweep(path: Path, keys: list[tuple[Ed25519PublicKey, str]], processes: int | None = None, *,
                 attestations: tuple[Attestation, ...] = (),
                 reproducers: tuple[Ed25519PublicKey, ...] = (), threshold: int = 1,
                 require_bit_identical: bool = False,
                 max_tolerance: float = layout.DEFAULT_LOGIT_TOLERANCE) -> SweepOutcome:
    """Run SWEEP_CHECKS on the sweep directory at `path` against the trusted `keys`, of which
    `threshold` must have signed the plan, the index and every member; each reproduction
    attestation is checked with the member bundle it names (counted only when signed by one of
    `reproducers`, and only when bit-identical if `require_bit_identical`)."""
    start = time.perf_counter()
    st = _State()
    procs = processes or min(MAX_PROCESSES, os.cpu_count() or 1)
    functions: dict[str, Callable[[], str]] = {
        "sweep.plan": lambda: _check_plan(path, st, keys, threshold),
        "sweep.file": lambda: _check_file(path, st),
        "sweep.index": lambda: _check_index(path, st, keys, threshold),
        "sweep.index-plan": lambda: _check_index_plan(path, st),
        "sweep.members-folder": lambda: _check_members_folder(path, st),
        "sweep.members": lambda: _check_members(path, st, keys, procs, attestations,
                                                tuple(_public_raw(k) for k in reproducers), threshold,
                                                require_bit_identical, max_tolerance),
        "sweep.views": lambda: _check_views(path, st),
        "sweep.reproductions": lambda: _check_reproductions(st, len(attestations)),
        "sweep.complete": lambda: _check_complete(path, st),
    }
    checks = []
    for cid, title in SWEEP_CHECKS:
        try:
            checks.append(Check(cid, title, "pass", functions[cid]()))
        except Failed as exc:
            checks.append(Check(cid, title, "fail", str(exc), exc.details))
        except (OSError, KeyError, TypeError, ValueError, binascii.Error) as exc:
            checks.append(Check(cid, title, "fail", f"cannot be checked ({type(exc).__name__}: {exc})"))
    planned = [m["name"] for m in st.plan["members"]] if st.plan is not None else []
    members = [st.rows.get(n, MemberResult(n, "unknown", False, "not checked")) for n in planned]
    code = EXIT_OK if all(c.ok for c in checks) else EXIT_FAILED
    notes = [f"{name}: an unsigned file at the sweep's root; nothing signed covers it"
             for name in unsigned_files(path)]
    return SweepOutcome(str(path), checks, members, time.perf_counter() - start, code, notes)


def sweep_table(outcome: SweepOutcome) -> str:
    """The verdict as one table: the sweep's checks, then one row per planned member."""
    def clean(text: str) -> str:
        return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)

    rows = [(c.status.upper(), c.id, c.detail) for c in outcome.checks]
    for m in outcome.members:
        status = "PASS" if m.verified else ("FAILED" if m.status == "failed" else "FAIL")
        rows.append((status, f"member {m.name}", m.detail))
    width = max(len(r[1]) for r in rows)
    lines = [f"Sweep: {clean(outcome.path)}", "", f"{'STATUS':<6}  {'CHECK':<{width}}  DETAIL",
             f"{'-' * 6}  {'-' * width}  {'-' * 40}"]
    lines += [f"{s:<6}  {clean(i):<{width}}  {clean(d)}" for s, i, d in rows]
    done = sum(m.verified for m in outcome.members)
    failed = sum(m.status == "failed" for m in outcome.members)
    if outcome.notes:
        lines += ["", "Unsigned notes (nothing signed says this; never part of the verdict):"]
        lines += [f"  - {clean(note)}" for note in outcome.notes]
    counts = (f"{len(outcome.members)} planned: {done} done and verified, {failed} reported failed, "
              f"{len(outcome.members) - done - failed} otherwise not verified; {outcome.seconds:.1f} s")
    lines += ["", counts,
              "VERIFIED: every planned member is done and verified, under the trusted key."
              if outcome.exit_code == EXIT_OK else
              "NOT VERIFIED: see the checks and members above."]
    return "\n".join(lines) + "\n"

