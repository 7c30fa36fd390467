"""The human summary table (stdout) and the JSON report (verify/report.schema.json)."""

from __future__ import annotations

import json
from typing import Any

from bundle.keys import fingerprint
from verify.api import VERDICTS as VERDICT_NAMES
from verify.api import Outcome
from verify.plausibility import PER_CLASS_UNRECORDED, UNRECORDED, WARNINGS_CHECK
from verify.result import EXIT_FAILED, EXIT_OK, EXIT_UNTRUSTED, Check

REPORT_VERSION = 1

VERDICTS = {
    EXIT_OK: (VERDICT_NAMES[EXIT_OK],
              "VERIFIED: every check passed and the bundle is signed by the trusted key."),
    EXIT_UNTRUSTED: (VERDICT_NAMES[EXIT_UNTRUSTED],
                     ("INTEGRITY HOLDS, SIGNER NOT ESTABLISHED: every check passed, but no "
                      "trusted key was given; pass --trusted-key PUB.pem or "
                      "--trusted-fingerprint HEX.")),
    EXIT_FAILED: (VERDICT_NAMES[EXIT_FAILED],
                  "REJECTED: at least one check failed; do not use this bundle's figures."),
}
"""Exit code -> (the verdict's name, verify.api.VERDICTS; its sentence)."""


def verdict_message(outcome: Outcome) -> str:
    """The verdict's sentence; a verified bundle that needed several trusted keys says how many signed."""
    message = VERDICTS[outcome.exit_code][1]
    threshold = outcome.trust.threshold if outcome.trust.key is not None else 1
    if outcome.exit_code == EXIT_OK and threshold > 1:
        message = message.replace("signed by the trusted key",
                                  f"signed by {threshold} distinct trusted keys, as required")
    return message


def _printable(text: str) -> str:
    """Escape control characters so that text from a bundle cannot drive the terminal."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _trust(outcome: Outcome) -> dict[str, Any]:
    t = outcome.trust
    if t.key is not None:
        keys = t.keys()
        return {"kind": "key", "source": t.source, "fingerprint": fingerprint(t.key),
                "keys": [{"source": src, "fingerprint": fingerprint(k)} for k, src in keys],
                "threshold": t.threshold}
    if t.fingerprint is not None:
        return {"kind": "fingerprint", "source": t.source, "fingerprint": t.fingerprint}
    return {"kind": "none", "source": None, "fingerprint": None}


def to_json(outcome: Outcome) -> dict[str, Any]:
    counts = {s: sum(c.status == s for c in outcome.checks) for s in ("pass", "fail", "skip")}
    verdict, message = VERDICTS[outcome.exit_code][0], verdict_message(outcome)
    return {
        "report_version": REPORT_VERSION,
        "bundle": outcome.bundle,
        "input": outcome.kind,
        "trusted": _trust(outcome),
        "signer_fingerprint": outcome.signer_fingerprint,
        "verdict": verdict,
        "message": message,
        "exit_code": outcome.exit_code,
        "counts": counts,
        "assurance": outcome.assurance,
        "seconds": round(outcome.seconds, 6),
        "checks": [_check(c) for c in outcome.checks],
        "unsigned_notes": list(outcome.notes),
    }


def _check(c: Check) -> dict[str, Any]:
    """One check of the report; a failed one carries its `details` (the failure's named facts)."""
    out: dict[str, Any] = {"id": c.id, "title": c.title, "status": c.status, "detail": c.detail}
    if c.status == "fail":
        out["details"] = dict(c.details)
    return out


def dumps_report(outcome: Outcome) -> str:
    return json.dumps(to_json(outcome), indent=2, ensure_ascii=False) + "\n"


def _warning_lines(outcome: Outcome) -> list[str]:
    """The run's own warnings (metrics.json, recomputed by the check), repeated above the verdict."""
    found = [c.detail for c in outcome.checks if c.id == WARNINGS_CHECK and c.status == "pass"
             and c.detail.startswith("WARNING: ")]
    if not found:
        return []
    detail, unsigned = found[0], found[0].endswith(UNRECORDED)
    where = ("recomputed here; this bundle, of a format before warnings, records none" if unsigned
             else "the per-class ones recomputed here; this bundle records no per-class results"
             if detail.endswith(PER_CLASS_UNRECORDED) else "signed in metrics.json, recomputed here")
    body = detail.removesuffix(UNRECORDED).removesuffix(PER_CLASS_UNRECORDED)
    return ["", f"The run warns ({where}; the figures are what it found):"] + [
        f"  {_printable(w)}" for w in body.split("; WARNING: ")]


def table(outcome: Outcome) -> str:
    width = max(len(c.id) for c in outcome.checks) if outcome.checks else 10
    lines = [f"Bundle: {_printable(outcome.bundle)} ({outcome.kind})", "",
             f"{'STATUS':<6}  {'CHECK':<{width}}  DETAIL", f"{'-' * 6}  {'-' * width}  {'-' * 40}"]
    for c in outcome.checks:
        lines.append(f"{c.status.upper():<6}  {c.id:<{width}}  {_printable(c.detail)}")
    counts = {s: sum(c.status == s for c in outcome.checks) for s in ("pass", "fail", "skip")}
    summary = (f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped in "
               f"{outcome.seconds:.3f} s")
    lines += _warning_lines(outcome)
    if outcome.notes:
        lines += ["", "Unsigned notes (nothing signed says this; never part of the verdict):"]
        lines += [f"  - {_printable(note)}" for note in outcome.notes]
    lines += ["", summary, verdict_message(outcome), f"Assurance: {outcome.assurance}"]
    return "\n".join(lines) + "\n"
