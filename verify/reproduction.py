"""Reproduction attestations (bundle/FORMAT.md, "Reproduction attestation"): the verifier's own reader.

An attestation is a DSSE envelope over an in-toto Statement v1 in which a third party says what an
independent re-run of the bundle's inference found. It counts only when it is signed by a key the
user trusts as a reproducer (the keyid is only a hint for which key to try first), names this very
bundle (its signed statement and its predictions files), and says every compared row was
reproduced bit for bit, with a sample that the seed re-derives. The report then ends with the
assurance reached."""

from __future__ import annotations

import hashlib
from typing import Any, Final

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bundle import layout
from bundle.canonical import loads_strict
from bundle.errors import CanonicalJSONError
from bundle.keys import fingerprint
from verify import limits, schemacheck, signature
from verify.context import Attestation, Context
from verify.result import EXIT_OK, EXIT_UNTRUSTED, Failed

MAX_ATTESTATION_BYTES: Final = 1024 * 1024
"""An attestation is a few kB (a sampled one lists its rows); anything far larger is refused unread."""


def load_attestation(path: str) -> Attestation:
    """The bytes of an attestation file given on the command line; InputError when unusable."""
    # A FIFO or a device (/dev/zero) is refused, never waited on or read without end.
    data = limits.read_small_file(path, "the reproduction attestation", MAX_ATTESTATION_BYTES)
    return Attestation(path, data)


def each_attestation(ctx: Context) -> list[dict[str, str]]:
    """One {n} per attestation given, numbered from 1 in command-line order."""
    return [{"n": str(i)} for i in range(1, len(ctx.attestations) + 1)]


def wanted(ctx: Context) -> bool:
    """Whether any attestation was given."""
    return bool(ctx.attestations)


def _trusted_signer(envelope: Any, keys: tuple[Ed25519PublicKey, ...]) -> str:
    """Fingerprint of the trusted key whose signature verifies; the keyid only orders the keys tried."""
    for key in keys:
        if signature.signature_by(envelope, key) is not None:
            return fingerprint(key)
    hints = ", ".join(f"{s.keyid[:16]}…" for s in envelope.signatures)
    raise Failed(f"signed by a key that is not a trusted reproducer (keyid {hints}); pass "
                 "that reproducer's public key with --trusted-reproducer if you trust it.")


def _statement(payload: bytes, source: str) -> dict[str, Any]:
    try:
        statement = loads_strict(payload, source=f"the statement of {source}")
    except CanonicalJSONError as exc:
        raise Failed(str(exc)) from exc
    if not isinstance(statement, dict) or statement.get("_type") != layout.STATEMENT_TYPE:
        raise Failed(f"{source} does not hold an in-toto Statement v1.")
    if statement.get("predicateType") != layout.REPRODUCTION_PREDICATE_TYPE:
        raise Failed(f"{source} has predicateType {statement.get('predicateType')!r}, expected "
                     f"{layout.REPRODUCTION_PREDICATE_TYPE!r}.")
    schemacheck.validate(statement, "reproduction", f"the statement of {source}")
    return statement


def _found(ctx: Context, n: str) -> dict[str, Any]:
    return ctx.need(ctx.reproductions.get(n), f"attestation {n}'s signed statement")


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def signed(ctx: Context, n: str) -> str:
    """The attestation is a DSSE envelope signed by a trusted reproducer over a schema-valid statement."""
    att = ctx.attestations[int(n) - 1]
    if not ctx.reproducers:
        raise Failed(f"no --trusted-reproducer was given, so {att.source} cannot count: a reproduction "
                     "is worth what its signer is; pass the reproducer's public key.")
    envelope = signature.parse_envelope(att.data)
    schemacheck.validate(loads_strict(att.data), "envelope", att.source)
    who = _trusted_signer(envelope, ctx.reproducers)
    statement = _statement(envelope.payload, att.source)
    ctx.reproductions[n] = {"signer": who, "statement": statement}
    return f"{att.source}: Ed25519 signature by the trusted reproducer {who[:16]}…, statement schema-valid"


def subjects(ctx: Context, n: str) -> str:
    """Its subjects are this bundle's signed statement and predictions files; same protocol and resources."""
    found = _found(ctx, n)
    statement = found["statement"]
    env = ctx.need(ctx.envelope, "the bundle's envelope")
    ctx.need(ctx.statement, "the bundle's valid signature")
    want = {layout.SIGNED_STATEMENT_SUBJECT: hashlib.sha256(env.payload).hexdigest()}
    want.update({layout.PREDICTIONS[p]: ctx.sha(layout.PREDICTIONS[p]) for p in layout.REPRODUCTION_POOLS})
    digests, _ = signature.subject_digests(statement["subject"])
    got = {name: d["sha256"] for name, d in digests.items()}
    if got != want:
        differ = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
        raise Failed(f"the attestation is about another bundle: its subjects {differ} differ from this "
                     "bundle's signed statement and predictions.")
    predicate = statement["predicate"]
    protocol = ctx.sha(layout.PROTOCOL_JSON)
    if predicate["protocol_sha256"] != protocol:
        raise Failed(f"the attestation names protocol {predicate['protocol_sha256'][:16]}…, the bundle "
                     f"{protocol[:16]}….")
    resources = ctx.doc(layout.RESOURCES_JSON)
    for role in ("model", "dataset"):
        theirs = sorted((f["path"], f["sha256"]) for f in predicate["resources"][role])
        ours = sorted((f["path"], f["sha256"]) for f in resources[role]["files"])
        if theirs != ours:
            raise Failed(f"the attestation's {role} files differ from the bundle's resources.json; the "
                         "re-run used other resources.")
    return f"about this bundle: its signed statement and {len(want) - 1} predictions files; same protocol"


def draw_rows(sizes: list[int], n: int, seed: int) -> list[list[int]]:
    """Positions (pool order) drawn per pool, as FORMAT.md defines the draw: PCG64(seed).random_raw
    over every candidate row, pools in order, and the n smallest values, ties to the earlier row."""
    raw = np.random.PCG64(seed).random_raw(sum(sizes))
    chosen = sorted(int(c) for c in np.argsort(np.asarray(raw, dtype=np.uint64), kind="stable")[:n])
    out, start = [], 0
    for size in sizes:
        out.append([c - start for c in chosen if start <= c < start + size])
        start += size
    return out


def _check_rows(ctx: Context, p: dict[str, Any]) -> None:
    rows, pools = p["rows"], layout.REPRODUCTION_POOLS
    tables = {name: ctx.table(name) for name in pools}
    if p["mode"] == "full":
        for name in pools:
            entry = rows["pools"][name]
            if entry["idx"] != "all" or entry["count"] != len(tables[name].idx):
                raise Failed(f"a full reproduction must compare all {len(tables[name].idx)} {name} rows; "
                             f"it compared {entry['count']}.")
        if p["sample"] is not None:
            raise Failed("a full reproduction records no sample.")
    else:
        sample = p["sample"]
        if sample is None:
            raise Failed("a sampled reproduction must record its seed and size.")
        drawn = draw_rows([len(tables[name].idx) for name in pools], sample["n"], sample["seed"])
        for name, positions in zip(pools, drawn, strict=True):
            entry, table = rows["pools"][name], tables[name]
            if entry["idx"] != [table.idx[i] for i in positions] or entry["count"] != len(positions):
                raise Failed(f"the {name} rows compared are not those seed {sample['seed']} draws; the "
                             "sample was not drawn as FORMAT.md says.")
            batches = sorted({int(table.batch[i]) for i in positions})
            if sample["batches"][name] != batches:
                raise Failed(f"the {name} batches re-run are not those that hold the sampled rows.")
    if rows["compared"] != sum(rows["pools"][name]["count"] for name in pools):
        raise Failed("the rows compared do not add up over the pools.")


def reproduced(ctx: Context, n: str) -> str:
    """Its verdict is `reproduced`: every compared row bit for bit, the rows the mode and seed say."""
    found = _found(ctx, n)
    p = found["statement"]["predicate"]
    rows, worst = p["rows"], p["largest_difference"]
    if p["verdict"] != "reproduced" or rows["identical"] != rows["compared"]:
        first = ", ".join(f"{d['pool']} idx {d['idx']}" for d in p["first_differences"][:5])
        raise Failed(f"the reproducer found {rows['compared'] - rows['identical']} of {rows['compared']} rows "
                     f"differing (largest {worst['ulps']} ulps, {worst['abs']:.3g} absolute; first: {first}): "
                     "the stored logits are not what the pinned resources produce.")
    if worst["ulps"] != 0 or worst["abs"] != 0 or p["first_differences"]:
        raise Failed("the verdict says reproduced but the attestation records a difference.")
    _check_rows(ctx, p)
    found["verdict"] = {"mode": p["mode"], "rows": rows["compared"]}
    what = "every row" if p["mode"] == "full" else f"{p['sample']['n']} rows drawn with seed {p['sample']['seed']}"
    return f"{rows['compared']} rows reproduced bit for bit ({p['mode']}: {what})"


def assurance(ctx: Context, code: int) -> str:
    """The assurance the checks reached, in plain words: signature, recomputation, re-execution."""
    if code not in (EXIT_OK, EXIT_UNTRUSTED):
        return "none: a check failed, so this bundle establishes nothing (see the FAIL lines)"
    signer = ("signed by a trusted key and intact" if code == EXIT_OK
              else "intact, but the signer is not established (no trusted key was given)")
    passed = {n: f["verdict"] for n, f in sorted(ctx.reproductions.items()) if "verdict" in f}
    parties = {ctx.reproductions[n]["signer"] for n in passed}
    if not parties:
        third = "the logits are the signer's word: no trusted reproduction was given"
    else:
        modes = "; ".join(f"{'sampled' if v['mode'] == 'sample' else 'full'}: {v['rows']} rows"
                          for v in passed.values())
        third = (f"logits reproduced bit for bit by {len(parties)} trusted "
                 f"{'party' if len(parties) == 1 else 'parties'} ({modes})")
    return f"{signer}; every figure recomputed from the logits; {third}"
