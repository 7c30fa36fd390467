"""The signed predicate's shape (FORMAT.md "Predicate"): what it restates from the payload records.

One definition for both sides: the job signs `restated_predicate` of the records it wrote, and a
verifier recomputes `restated_claims` from the payload it read and compares it with the signed
predicate (verify/claims.py), adding the schema pins from its own copy of the schemas and the
signer it established."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from bundle import layout

__all__ = ["HEADLINE", "restated_claims", "restated_predicate"]

HEADLINE: Final = ("accuracy", "nll", "brier", "ece", "mce")
"""The audit metrics the predicate restates, raw and calibrated."""


def restated_claims(*, protocol_sha256: str, resources: Mapping[str, Any], temperature: Mapping[str, Any],
                    temperature_sha256: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The predicate's claims about the payload: the protocol's sha256, the profile, the resource
    pins, the temperature and the audit headline.

    resources, temperature, metrics: the documents written as resources.json, temperature.json and
    metrics.json; temperature_sha256: temperature.json's. Raises KeyError or TypeError when a
    document lacks a field the predicate restates."""
    audit = metrics["pools"]["audit"]
    return {
        "protocol_sha256": protocol_sha256,
        "profile": resources["profile"],
        "resources": {
            part: {
                "repo_id": resources[part]["repo_id"],
                "revision": resources[part]["revision"],
                "source": resources[part]["source"],
                "files": [
                    {k: f[k] for k in ("path", "sha256", "pinned_sha256", "pin", "matches_pin")}
                    for f in resources[part]["files"]
                ],
            }
            for part in ("model", "dataset")
        },
        "temperature": {
            "temperature": temperature["temperature"],
            "beta": temperature["beta"],
            "boundary": temperature["boundary"],
            "sha256": temperature_sha256,
        },
        "audit": {
            "n": audit["raw"]["n"],
            "raw": {k: audit["raw"][k] for k in HEADLINE},
            "calibrated": {k: audit["calibrated"][k] for k in HEADLINE},
        },
    }


def restated_predicate(*, protocol_sha256: str, resources: Mapping[str, Any], temperature: Mapping[str, Any],
                       temperature_sha256: str, metrics: Mapping[str, Any],
                       publication: Mapping[str, Any]) -> dict[str, Any]:
    """The predicate the job signs, without `schemas` and `signer_fingerprint` (the seal adds them):
    `format` (the format this code writes), the claims of `restated_claims`, and `publication`
    (licence, publisher, authors and contact as the crate's root states them)."""
    return {
        "format": {"version": layout.FORMAT_VERSION, "oldest_verifier": layout.OLDEST_VERIFIER},
        **restated_claims(protocol_sha256=protocol_sha256, resources=resources, temperature=temperature,
                          temperature_sha256=temperature_sha256, metrics=metrics),
        "publication": dict(publication),
    }
