"""Reproduction attestations (bundle/FORMAT.md, "Reproduction attestation"): the verifier's own reader.

An attestation is a DSSE envelope over an in-toto Statement v1 in which a party says what a re-run
of the bundle's inference found. It counts only when it is signed by a key the user trusts as a
reproducer (the keyid is only a hint for which key to try first) that is also the key it names as
its reproducer, names this very bundle (its signed statement and its predictions files), and
reaches `bit-identical` or `equivalent` by its own numbers under the bundle's pre-registered
tolerance (`--require-bit-identical`: `bit-identical` only), with rows that the seed re-derives. A
reproduction signed by the bundle's own signer is shown as a self-reproduction and is not counted
as an independent party. The report then ends with the assurance reached."""

from __future__ import annotations

import hashlib
from typing import Any, Final

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bundle import layout
from bundle.canonical import loads_strict
from bundle.dsse import Envelope
from bundle.errors import CanonicalJSONError
from bundle.keys import fingerprint
from bundle.userfile import read_user_file
from bundle.views.arithmetic import arithmetic_words, short_number
from verify import compat, numerics, schemacheck, signature
from verify.context import METRIC_TOL, Attestation, Context
from verify.result import EXIT_OK, EXIT_UNTRUSTED, Failed, InputError, Missing

MAX_ATTESTATION_BYTES: Final = 1024 * 1024
"""An attestation is a few kB (a sampled one lists its rows); anything far larger is refused unread."""


def load_attestation(path: str) -> Attestation:
    """The bytes of an attestation file given on the command line; InputError when unusable."""
    # A FIFO or a device (/dev/zero) is refused, never waited on or read without end.
    data = read_user_file(path, "reproduction attestation", MAX_ATTESTATION_BYTES, InputError)
    return Attestation(path, data)


def each_attestation(ctx: Context) -> list[dict[str, str]]:
    """One {n} per attestation given, numbered from 1 in command-line order."""
    return [{"n": str(i)} for i in range(1, len(ctx.attestations) + 1)]


def wanted(ctx: Context) -> bool:
    """Whether any attestation was given."""
    return bool(ctx.attestations)


def _trusted_signer(envelope: Envelope, keys: tuple[Ed25519PublicKey, ...], source: str) -> str:
    """Fingerprint of the trusted key whose signature verifies; the keyid only orders the keys tried.

    Two failures are told apart: a signature whose keyid names a trusted reproducer but does not
    verify under that key (the attestation was altered after signing, or another key signed it
    under that keyid), and a signature by a key that is not trusted at all."""
    for key in keys:
        if envelope.signature_by(key) is not None:
            return fingerprint(key)
    trusted = {fingerprint(k) for k in keys}
    claimed = [s.keyid for s in envelope.signatures if s.keyid in trusted]
    if claimed:
        raise Failed(f"the signature of {source} does not verify under the trusted reproducer key "
                     f"{claimed[0][:16]}… it names: the attestation was changed after signing or signed "
                     "by another key; obtain the reproducer's original file.")
    hints = ", ".join(f"{s.keyid[:16]}…" for s in envelope.signatures)
    raise Failed(f"{source} is signed by a key that is not a trusted reproducer (keyid {hints}); pass "
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
    return ctx.need(ctx.reproductions.get(n), "reproduction.statements", f"attestation {n}'s signed statement")


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def _signed_the_bundle(ctx: Context, reproducer: str) -> bool:
    """Whether the trusted reproducer key with fingerprint `reproducer` also signed the bundle."""
    if ctx.envelope is None:
        return False
    return any(fingerprint(key) == reproducer and ctx.envelope.signature_by(key) is not None
               for key in ctx.reproducers)


def signed(ctx: Context, n: str) -> str:
    """A DSSE envelope signed by a trusted reproducer, the one it names, over a schema-valid statement."""
    att = ctx.attestations[int(n) - 1]
    if not ctx.reproducers:
        raise Failed(f"no --trusted-reproducer was given, so {att.source} cannot count: a reproduction "
                     "is worth what its signer is; pass the reproducer's public key.")
    envelope = signature.parse_envelope(att.data, att.source)
    schemacheck.validate(loads_strict(att.data, source=att.source), "envelope", att.source)
    who = _trusted_signer(envelope, ctx.reproducers, att.source)
    statement = _statement(envelope.payload, att.source)
    named = statement["predicate"]["reproducer_fingerprint"]
    if named != who:
        raise Failed(f"{att.source} names the reproducer {named[:16]}… but is signed by {who[:16]}…; an "
                     "attestation must be signed by the reproducer it names.")
    # The bundle's signer, or any key whose signature on the bundle verifies (a co-signer): either
    # vouched for the bundle already, so its reproduction is not an independent party's.
    own = (ctx.signer_fingerprint is not None and who == ctx.signer_fingerprint) or _signed_the_bundle(ctx, who)
    ctx.reproductions[n] = {"signer": who, "statement": statement, "self": own}
    whose = ("the bundle's own signer, a self-reproduction that is not independent" if own
             else "the trusted reproducer")
    return f"{att.source}: Ed25519 signature by {whose} {who[:16]}…, statement schema-valid"


def subjects(ctx: Context, n: str) -> str:
    """Its subjects are this bundle's signed statement and predictions files; same protocol and resources."""
    found = _found(ctx, n)
    statement = found["statement"]
    env = ctx.need(ctx.envelope, "signature.envelope")
    ctx.need(ctx.statement, "signature.statement")
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
    """Positions (pool order) drawn per pool by the row draw of attestations without `sample.draw`:
    PCG64(seed).random_raw over every candidate row, pools in order, and the n smallest values, ties
    to the earlier row."""
    raw = np.random.PCG64(seed).random_raw(sum(sizes))
    chosen = sorted(int(c) for c in np.argsort(np.asarray(raw, dtype=np.uint64), kind="stable")[:n])
    out, start = [], 0
    for size in sizes:
        out.append([c - start for c in chosen if start <= c < start + size])
        start += size
    return out


def draw_batches(batch_sizes: list[list[int]], n: int, seed: int) -> list[list[int]]:
    """Recorded batches (ascending) drawn per pool, as FORMAT.md defines the batch draw: one
    PCG64(seed).random_raw value per batch, batches of every pool in order, taken by ascending value
    (ties to the earlier batch) until they hold at least n rows."""
    candidates = [(p, b, size) for p, sizes in enumerate(batch_sizes) for b, size in enumerate(sizes)]
    raw = np.asarray(np.random.PCG64(seed).random_raw(len(candidates)), dtype=np.uint64)
    out: list[list[int]] = [[] for _ in batch_sizes]
    rows = 0
    for c in np.argsort(raw, kind="stable"):
        pool, batch, size = candidates[int(c)]
        out[pool].append(batch)
        rows += size
        if rows >= n:
            break
    return [sorted(batches) for batches in out]


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
        if sample.get("draw") == layout.REPRODUCTION_BATCH_DRAW:
            sizes = [np.bincount(np.asarray(tables[name].batch, dtype=np.int64)).tolist() for name in pools]
            drawn_batches = draw_batches(sizes, sample["n"], sample["seed"])
            drawn = []
            for name, batches in zip(pools, drawn_batches, strict=True):
                wanted = set(batches)  # every row of the drawn batches is compared
                drawn.append([i for i, b in enumerate(tables[name].batch) if int(b) in wanted])
        else:
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


def tolerance(ctx: Context) -> tuple[float, str]:
    """The bundle's pre-registered logit tolerance and where it comes from (protocol or format default)."""
    section = ctx.doc(layout.PROTOCOL_JSON).get("reproduction")
    if section is None:
        return layout.DEFAULT_LOGIT_TOLERANCE, "format default"
    return float(section["logit_tolerance"]), "protocol"


SAME_ARITHMETIC = ("cpu_vendor", "cpu_model", "aten_capability", "onednn_isa", "mkl")


def _cpus(ctx: Context, p: dict[str, Any]) -> tuple[str, bool | None]:
    """(both CPU kinds in words, whether they differ; None when either is unrecorded)."""
    env = ctx.docs.get(layout.ENVIRONMENT_JSON) or {}
    signer = env.get("arithmetic")
    mine = p["environment"].get("arithmetic")
    cluster = env.get("cluster")
    kinds = {w["cpu_kind"] for w in cluster["workers"] if any(w["batches"].values())} if cluster else set()
    if len(kinds) > 1:  # no one kind signed the logits: each batch is judged against its own
        here = arithmetic_words(mine) if mine else p["environment"]["cpu_model"]
        return (f"signed on {len(kinds)} CPU kinds (MIXED; each batch judged against its own kind in the "
                f"batch-kinds check), reproduced on {here}"), None
    words = (f"signed on {arithmetic_words(signer) if signer else env.get('cpu_model') or 'an unrecorded CPU'}, "
             f"reproduced on {arithmetic_words(mine) if mine else p['environment']['cpu_model']}")
    if not signer or not mine:
        return f"{words} (the arithmetic of one is unrecorded)", None
    differ = any(signer.get(k) != mine.get(k) for k in SAME_ARITHMETIC)
    return f"{words} ({'different' if differ else 'the same'} arithmetic)", differ


def _mismatch_reasons(p: dict[str, Any]) -> list[str]:
    rows, worst = p["rows"], p["largest_difference"]
    out = []
    inputs = p.get("inputs") or {"differing": {}, "first": []}
    for field, count in inputs["differing"].items():
        first = next((d for d in inputs["first"] if d["field"] == field), None)
        example = (f" (first: {first['pool']} idx {first['idx']}: bundle {first['bundle']!r}, data "
                   f"{first['found']!r})") if first else ""
        out.append(f"{count} rows' {field} differ from the pinned data{example}")
    if rows.get("predictions_changed"):
        out.append(f"{rows['predictions_changed']} rows' predicted class changed")
    beyond = rows["compared"] - rows.get("within_tolerance", rows["identical"])
    if beyond:
        first = ", ".join(f"{d['pool']} idx {d['idx']}" for d in p["first_differences"][:5])
        out.append(f"{beyond} of {rows['compared']} rows differing (largest {worst['ulps']} ulps, "
                   f"{short_number(worst['abs'])} absolute; first: {first})")
    return out or ["the attestation says mismatch"]


def _consistent(ctx: Context, p: dict[str, Any]) -> str:
    """The verdict the attestation's own numbers give under the bundle's tolerance; Failed when the
    numbers contradict the verdict it states."""
    rows, worst = p["rows"], p["largest_difference"]
    if p["verdict"] == layout.LEGACY_REPRODUCED:  # an attestation from before the graded verdict
        if compat.bundle_format(ctx) >= 2:
            raise Failed("the attestation's verdict 'reproduced' predates re-deriving each row's label and "
                         "inputs, so it cannot vouch for a format-2 bundle; reproduce it with the current job.")
        if rows["identical"] != rows["compared"] or worst["ulps"] != 0 or worst["abs"] != 0 or p["first_differences"]:
            raise Failed("the verdict says reproduced but the attestation records a difference.")
        return "bit-identical"
    if any(k not in p for k in ("tolerance", "inputs", "figures")) or any(
            k not in rows for k in ("within_tolerance", "predictions_changed")):
        raise Failed(f"the verdict {p['verdict']} comes without its tolerance, inputs and figures.")
    want, source = tolerance(ctx)
    if p["tolerance"] != {"abs": want, "source": source}:
        raise Failed(f"the attestation judged logits with tolerance {short_number(p['tolerance']['abs'])} "
                     f"({p['tolerance']['source']}); the bundle's is {short_number(want)} ({source}).")
    if (p["mode"] == "full") != (p["figures"] is not None):
        raise Failed("a full reproduction lists the published figures recomputed, and a sample none.")
    if p["verdict"] == "mismatch":
        return "mismatch"
    inputs_ok = not p["inputs"]["differing"] and not p["inputs"]["first"]
    if p["verdict"] == "bit-identical":
        ok = (inputs_ok and rows["identical"] == rows["compared"] and worst["ulps"] == 0 and worst["abs"] == 0
              and not p["first_differences"] and rows["predictions_changed"] == 0)
    else:
        ok = (inputs_ok and rows["within_tolerance"] == rows["compared"] and worst["abs"] <= want
              and rows["predictions_changed"] == 0)
    if not ok:
        raise Failed(f"the verdict says {p['verdict']} but the attestation's own numbers do not: "
                     f"{'; '.join(_mismatch_reasons(p))}.")
    return str(p["verdict"])


def _figures_words(p: dict[str, Any]) -> str:
    figs = p.get("figures")
    if figs is None:
        return "published figures not recomputed (a sample)" if p["mode"] == "sample" else "figures not listed"
    if figs["changed"] == 0:
        return f"published figures unchanged ({figs['compared']} recomputed)"
    listed = "; ".join(f"{c['figure']} {c['from']} -> {c['to']}" for c in figs["listed"][:5])
    return f"{figs['changed']} of {figs['compared']} published figures changed ({listed})"


def _figures_short(p: dict[str, Any]) -> str:
    """The figures in a few words, for the assurance line (the check's detail lists them)."""
    figs = p.get("figures")
    if figs is None or figs["changed"] == 0:
        return _figures_words(p).split(" (")[0]
    return f"{figs['changed']} of {figs['compared']} published figures changed (listed in its check)"


def _check_bounds(ctx: Context, p: dict[str, Any]) -> None:
    """An attestation's `bounds` (when it states them) are those the bundle's logits give."""
    if "bounds" not in p or ctx.bounds is None:
        return
    diffs: list[str] = []
    numerics.compare(p["bounds"], ctx.bounds, "bounds", METRIC_TOL, diffs, rel=METRIC_TOL)
    if diffs:
        raise Failed("the attestation's bounds are not those the bundle's logits and tolerance give: "
                     + "; ".join(diffs[:2]) + ".")


def reproduced(ctx: Context, n: str) -> str:
    """Its verdict, consistent with its numbers and the bundle's tolerance, is bit-identical or equivalent."""
    found = _found(ctx, n)
    p = found["statement"]["predicate"]
    rows, worst = p["rows"], p["largest_difference"]
    cpus, differ = _cpus(ctx, p)
    level = _consistent(ctx, p)
    if level == "mismatch":
        raise Failed(f"mismatch ({p['mode']}, {rows['compared']} rows compared; {cpus}): "
                     f"{'; '.join(_mismatch_reasons(p))}; {_figures_words(p)}: the stored logits or per-row "
                     "inputs are not what the pinned resources and data give.")
    _check_rows(ctx, p)
    if ctx.require_bit_identical and level != "bit-identical":
        raise Failed(f"equivalent, not bit-identical (largest difference {short_number(worst['abs'])}, {worst['ulps']} "
                     f"ulps; {cpus}), and --require-bit-identical was given.")
    _check_bounds(ctx, p)
    tol = p["tolerance"]["abs"] if "tolerance" in p else None
    found["verdict"] = {"level": level, "mode": p["mode"], "rows": rows["compared"], "largest": worst["abs"],
                        "tolerance": tol, "other_cpu": differ, "figures": _figures_short(p)}
    if p["mode"] == "full":
        what = "every row"
    else:
        unit = "whole batches" if p["sample"].get("draw") == layout.REPRODUCTION_BATCH_DRAW else "rows"
        what = f"{unit} drawn with seed {p['sample']['seed']} for {p['sample']['n']} rows"
    largest = ("none" if level == "bit-identical"
               else f"{short_number(worst['abs'])} ({worst['ulps']} ulps) within {short_number(p['tolerance']['abs'])}")
    return (f"{level}: {rows['compared']} rows compared ({p['mode']}: {what}); {cpus}; largest difference "
            f"{largest}; {_figures_words(p)}")


def _phrase(v: dict[str, Any]) -> str:
    """One passed reproduction, in words."""
    mode = f"{'sampled' if v['mode'] == 'sample' else 'full'}: {v['rows']} rows"
    if v["level"] == "bit-identical":
        return f"bit for bit ({mode})"
    where = "on another CPU" if v["other_cpu"] else "on the same kind of CPU" if v["other_cpu"] is False else ""
    figures = v["figures"]
    flagged = (f"; {v['suspicious']} batch group(s) re-run on the kind that signed them NOT bit-identical"
               if v.get("suspicious") else "")
    return (f"equivalent {where}: every logit within {short_number(v['tolerance'])} "
            f"(largest {short_number(v['largest'])}), "
            f"predictions unchanged, {figures} ({mode}){flagged}").replace("equivalent :", "equivalent:")


def assurance(ctx: Context, code: int) -> str:
    """The assurance the checks reached, in plain words: signature, recomputation, re-execution."""
    if code not in (EXIT_OK, EXIT_UNTRUSTED):
        return "none: a check failed, so this bundle establishes nothing (see the FAIL lines)"
    signer = ("signed by a trusted key and intact" if code == EXIT_OK
              else "intact, but the signer is not established (no trusted key was given)")
    passed = {n: f for n, f in sorted(ctx.reproductions.items()) if "verdict" in f}
    independent = {n: f for n, f in passed.items() if not f.get("self")}
    selfs = [f["verdict"] for f in passed.values() if f.get("self")]
    parties = {f["signer"] for f in independent.values()}
    verdicts = [f["verdict"] for f in independent.values()]
    if not parties:
        third = (f"the logits are the signer's word: no {'independent ' if selfs else ''}trusted "
                 "reproduction was given")
    elif all(v["level"] == "bit-identical" for v in verdicts):
        modes = "; ".join(f"{'sampled' if v['mode'] == 'sample' else 'full'}: {v['rows']} rows" for v in verdicts)
        third = (f"logits reproduced bit for bit by {len(parties)} trusted "
                 f"{'party' if len(parties) == 1 else 'parties'} ({modes})")
    else:
        third = (f"logits reproduced by {len(parties)} trusted {'party' if len(parties) == 1 else 'parties'}: "
                 + "; ".join(_phrase(v) for v in verdicts))
    if selfs:
        third += ("; a self-reproduction by the bundle's own signer, not counted as independent: "
                  + "; ".join(_phrase(v) for v in selfs))
    return f"{signer}; every figure recomputed from the logits{reader_view(ctx)}; {third}"


def reader_view(ctx: Context) -> str:
    """The tolerance that `equivalent` allows, whether it is the format default, and what it can move."""
    try:
        tau, source = tolerance(ctx)
    except Missing:
        return ""
    whose = ("the format default" if source == "format default" else
             "the protocol's, equal to the format default" if tau == layout.DEFAULT_LOGIT_TOLERANCE else
             f"the protocol's, {tau / layout.DEFAULT_LOGIT_TOLERANCE:g} times the format default "
             f"{layout.DEFAULT_LOGIT_TOLERANCE:g}")
    moved = f": {bounds_words(ctx.bounds)}" if ctx.bounds is not None else ""
    return f"; reproduction tolerance {tau:g} per logit ({whose}){moved}"


def bounds_words(b: dict[str, Any]) -> str:
    """The audit pool's calibrated worst-case movements, in a line."""
    x = b["pools"]["audit"]["calibrated"]
    return (f"an equivalent reproduction can move audit calibrated NLL by {x['nll']:.2g}, Brier by {x['brier']:.2g}, "
            f"ECE by {x['ece']:.2g}, MCE by {x['mce']:.2g}, accuracy by {x['accuracy']:.2g} "
            f"({x['rows_that_could_flip']} rows could flip, {x['rows_near_bin_edge']} near a bin edge); "
            f"T stays in [{b['temperature']['t_low']:.6g}, {b['temperature']['t_high']:.6g}]")
