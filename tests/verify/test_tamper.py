"""Tampered bundles: every one must be rejected (exit 1) by a check that names the problem.

Each class runs on two bases: a synthetic full-format bundle (tests/synthetic.py) and the
real bundle the job writes for the tiny generated model (the `tiny_bundle` fixture). Attackers
without the key re-seal with their own key while the real key is pinned; attackers who hold the
key re-seal with it, and the recomputation from the logits must still catch them."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.dsse import Envelope
from tests.synthetic import sha256
from tests.verify.tamper import (  # noqa: F401
    Keys,
    base,
    copy_bag,
    edit_json,
    reseal,
    synthetic_bag,
    update_stage_hashes,
    verify_keys,
)
from verify import numerics
from verify.api import verify_path
from verify.checks import Trust
from verify.result import EXIT_FAILED, EXIT_OK, EXIT_UNTRUSTED

# -- edits -----------------------------------------------------------------------------------

def flip(bag: Path, rel: str, offset: int | None = None) -> None:
    path = bag / rel
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


def edit_parquet(bag: Path, pool: str, fn: Callable[[dict[str, np.ndarray]], None]) -> None:
    path = bag / f"data/predictions/{pool}.parquet"
    table = pq.read_table(path)
    cols = {name: table.column(name).to_numpy(zero_copy_only=False).copy()
            for name in table.column_names}
    fn(cols)
    arrays = [pa.array(cols[f.name], f.type) for f in table.schema]
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, schema=table.schema), sink, compression="zstd",
                   use_dictionary=False, write_statistics=False)
    path.write_bytes(sink.getvalue())


def refresh_probs(cols: dict[str, np.ndarray]) -> None:
    """An attacker who edits logits keeps prob_k and pred consistent with them."""
    k = sum(1 for c in cols if c.startswith("logit_"))
    z = np.stack([cols[f"logit_{i}"] for i in range(k)], axis=1).astype(np.float64)
    p = numerics.probabilities(z, 1.0)
    for i in range(k):
        cols[f"prob_{i}"] = p[:, i]
    cols["pred"] = np.argmax(z, axis=1).astype(np.int64)


def envelope_edit(bag: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    env = loads_strict((bag / layout.PROVENANCE).read_bytes())
    fn(env)
    (bag / layout.PROVENANCE).write_bytes(dumps(env))
    fix_tagmanifest(bag)


def fix_tagmanifest(bag: Path) -> None:
    """An attacker without the key can still make the (unsigned) tag manifest match."""
    from job.publishing.seal import format_manifest

    tags = [t for t in (layout.BAGIT_TXT, layout.BAG_INFO, layout.MANIFEST_SHA256,
                        layout.MANIFEST_SHA512, layout.PROVENANCE, layout.SIGNER_PUB)
            if (bag / t).exists()]
    (bag / layout.TAGMANIFEST_SHA256).write_text(
        format_manifest({t: sha256((bag / t).read_bytes()) for t in tags}))


def fix_manifests_without_key(bag: Path) -> None:
    """Recompute both payload manifests and the tag manifest, leaving the signature alone."""
    from job.publishing.seal import file_digests, format_manifest

    paths = sorted(p.relative_to(bag).as_posix() for p in (bag / "data").rglob("*") if p.is_file())
    digests = {p: file_digests(bag / p) for p in paths}
    (bag / layout.MANIFEST_SHA256).write_text(format_manifest({p: d[0] for p, d in digests.items()}))
    (bag / layout.MANIFEST_SHA512).write_text(format_manifest({p: d[1] for p, d in digests.items()}))
    fix_tagmanifest(bag)


def set_bag_info(bag: Path, label: str, value: str) -> None:
    lines = (bag / layout.BAG_INFO).read_text().splitlines()
    lines = [f"{label}: {value}" if line.startswith(label + ":") else line for line in lines]
    (bag / layout.BAG_INFO).write_text("\n".join(lines) + "\n")
    fix_tagmanifest(bag)


def fix_oxum(bag: Path) -> None:
    """Make bag-info.txt's Payload-Oxum count the payload as it now is."""
    paths = [p for p in (bag / "data").rglob("*") if p.is_file()]
    set_bag_info(bag, layout.INFO_PAYLOAD_OXUM,
                 f"{sum(p.stat().st_size for p in paths)}.{len(paths)}")


def recompute_metrics(bag: Path) -> None:
    """An attacker holding the key makes metrics.json follow temperature.json."""
    t = loads_strict((bag / layout.TEMPERATURE_JSON).read_bytes())

    def fix(m: dict[str, Any]) -> None:
        m["beta"], m["temperature"] = t["beta"], t["temperature"]
        m["temperature_sha256"] = sha256((bag / layout.TEMPERATURE_JSON).read_bytes())
        for pool, entry in m["pools"].items():
            table = pq.read_table(bag / f"data/predictions/{pool}.parquet")
            k = sum(1 for c in table.column_names if c.startswith("logit_"))
            z = np.stack([table.column(f"logit_{i}").to_numpy() for i in range(k)],
                         axis=1).astype(np.float64)
            y = table.column("label").to_numpy().astype(np.int64)
            entry["raw"] = numerics.metric_set(z, y, 1.0, 0.9)
            entry["calibrated"] = numerics.metric_set(z, y, t["beta"], 0.9)
            entry["predictions_sha256"] = sha256(
                (bag / f"data/predictions/{pool}.parquet").read_bytes())

    edit_json(bag, layout.METRICS_JSON, fix)


def with_key(edit: Callable[[Path], None], *, stages: bool = True,
             metrics: bool = False, report: bool = True,
             crate: bool = True) -> Callable[[Path, Keys], None]:
    """Edit the payload, cover the tracks, and re-seal with the real key (report, crate: also
    regenerate report.md and restate the crate's hashes, as reseal does by default)."""
    def run(bag: Path, keys: Keys) -> None:
        edit(bag)
        if metrics:
            recompute_metrics(bag)
        if stages:
            update_stage_hashes(bag)
        reseal(bag, keys.real, report=report, crate=crate)
    return run


def no_key(edit: Callable[[Path], None]) -> Callable[[Path, Keys], None]:
    def run(bag: Path, keys: Keys) -> None:
        edit(bag)
    return run


def write(rel: str, data: bytes) -> Callable[[Path], None]:
    def run(bag: Path) -> None:
        (bag / rel).write_bytes(data)
    return run


def set_temperature(factor: float) -> Callable[[Path], None]:
    def run(bag: Path) -> None:
        def fix(t: dict[str, Any]) -> None:
            t["temperature"] *= factor
            t["beta"] = 1.0 / t["temperature"]
            t["bracket"] = [t["beta"], t["beta"]] if t["boundary"] else t["bracket"]
        edit_json(bag, layout.TEMPERATURE_JSON, fix)
    return run


def swap_pool_member(bag: Path) -> None:
    def fix(p: dict[str, Any]) -> None:
        a, c = p["pools"]["audit"], p["pools"]["calibration"]
        a[0], c[0] = c[0], a[0]
        a.sort(key=lambda e: e["split_key"])
        c.sort(key=lambda e: e["split_key"])
    edit_json(bag, layout.POOLS_JSON, fix)


def audit_names_other_temperature(bag: Path) -> None:
    def fix(s: dict[str, Any]) -> None:
        for stage in s["stages"]:
            if stage["name"] == "audit-inference":
                stage["consumed"]["temperature.json"] = "0" * 64
    edit_json(bag, layout.STAGES_JSON, fix)


def raw_json(rel: str, old: bytes, new: bytes) -> Callable[[Path], None]:
    def run(bag: Path) -> None:
        data = (bag / rel).read_bytes()
        assert old in data, (rel, old)
        (bag / rel).write_bytes(data.replace(old, new, 1))
    return run


def edit(rel: str, fn: Callable[[Any], Any]) -> Callable[[Path], None]:
    return lambda bag: edit_json(bag, rel, fn)


def symlink_in_data(bag: Path) -> None:
    target = bag.parent / "outside-environment.json"
    shutil.copy(bag / layout.ENVIRONMENT_JSON, target)
    (bag / layout.ENVIRONMENT_JSON).unlink()
    os.symlink(target, bag / layout.ENVIRONMENT_JSON)


def manifest_line(path: str) -> Callable[[Path], None]:
    def run(bag: Path) -> None:
        text = (bag / layout.MANIFEST_SHA256).read_text()
        first = text.splitlines()[0]
        digest = first.split("  ")[0]
        lines = sorted(text.splitlines() + [f"{digest}  {path}"], key=lambda l: l.split("  ")[1])
        (bag / layout.MANIFEST_SHA256).write_text("\n".join(lines) + "\n")
        fix_tagmanifest(bag)
    return run


def statement_edit(fn: Callable[[dict[str, Any]], None], key: str = "none") -> Callable[[Path, Keys], None]:
    """Edit the signed statement; re-sign it with nobody ('none'), the real or the other key."""
    def run(bag: Path, keys: Keys) -> None:
        env = loads_strict((bag / layout.PROVENANCE).read_bytes())
        statement = loads_strict(Envelope.from_dict(env).payload)
        fn(statement)
        payload = dumps(statement)
        if key == "none":
            env["payload"] = base64.b64encode(payload).decode()
        else:
            env = Envelope(payload, layout.PAYLOAD_TYPE).sign(keys.real if key == "real" else keys.other).to_dict()
        (bag / layout.PROVENANCE).write_bytes(dumps(env))
        fix_tagmanifest(bag)
    return run


def prob_edit(cols: dict[str, np.ndarray]) -> None:
    cols["prob_0"][0] += 1e-6


def logit_edit(cols: dict[str, np.ndarray]) -> None:
    cols["logit_1"][0] += np.float32(0.5)
    refresh_probs(cols)


def other_signer(edit_fn: Callable[[Path], None] | None = None) -> Callable[[Path, Keys], None]:
    def run(bag: Path, keys: Keys) -> None:
        if edit_fn is not None:
            edit_fn(bag)
        reseal(bag, keys.other)
    return run


def unsigned(bag: Path, keys: Keys) -> None:
    reseal(bag, None)


def swap_two_signature_bytes(env: dict[str, Any]) -> None:
    sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    sig[5] ^= 0x80
    env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()


def reorder_stages(s: dict[str, Any]) -> None:
    st = s["stages"]
    st[2], st[3] = st[3], st[2]


def first_nonboundary_step(t: dict[str, Any]) -> None:
    if t["steps"]:
        t["steps"][0]["g"] += 1e-3
    else:
        t["g_at_beta_min"] += 1e-3


def bump_metric(path: list[Any], delta: float) -> Callable[[Any], None]:
    def fix(m: dict[str, Any]) -> None:
        node = m
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = node[path[-1]] + delta
    return fix


def rows_reversed(cols: dict[str, np.ndarray]) -> None:
    for name in cols:
        cols[name] = cols[name][::-1].copy()


def batch_edit(cols: dict[str, np.ndarray]) -> None:
    cols["batch"][0] += 1


def claim_formal(bag: Path) -> None:
    edit_json(bag, layout.RESOURCES_JSON, lambda r: r.update(profile="formal", deviations=[]))
    lines = (bag / layout.BAG_INFO).read_text().replace("Profile: other", "Profile: formal")
    (bag / layout.BAG_INFO).write_text(lines)


def add_prefix(p: dict[str, Any]) -> None:
    p["prefix"] = "cycle8:"


def replace_protocol(bag: Path) -> None:
    data = (bag / layout.PROTOCOL_JSON).read_bytes().replace(b'"t_max": 20.0', b'"t_max": 30.0')
    (bag / layout.PROTOCOL_JSON).write_bytes(data)
    # bag-info.txt names the protocol too; an attacker updates it
    proto = sha256(data)
    text = (bag / layout.BAG_INFO).read_text()
    lines = [f"Protocol-SHA256: {proto}" if l.startswith("Protocol-SHA256") else l
             for l in text.splitlines()]
    (bag / layout.BAG_INFO).write_text("\n".join(lines) + "\n")


def report_cell(table: str, row: str, fn: Callable[[str], str]) -> Callable[[Path], None]:
    """Rewrite one cell (the row's second) of a checked table in report.md."""
    def run(bag: Path) -> None:
        lines = (bag / layout.REPORT_MD).read_text().split("\n")
        start = lines.index(f"<!-- table: {table} -->")
        for i in range(start + 3, len(lines)):
            cells = lines[i].split("|")
            if cells[1].strip() == row:
                cells[2] = f" {fn(cells[2].strip())} "
                lines[i] = "|".join(cells)
                break
        else:
            raise AssertionError(f"no row {row} in table {table}")
        (bag / layout.REPORT_MD).write_text("\n".join(lines))
    return run


def last_digit_up(cell: str) -> str:
    return cell[:-1] + str((int(cell[-1]) + 1) % 10)


def crate_entity(rel: str, fn: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def run(bag: Path) -> None:
        def fix(doc: dict[str, Any]) -> None:
            for entity in doc["@graph"]:
                if entity["@id"] == rel:
                    fn(entity)
        edit_json(bag, layout.RO_CRATE_JSON, fix)
    return run


def crate_signer(value: str) -> Callable[[Path], None]:
    def run(bag: Path) -> None:
        from job.rocrate import FINGERPRINT_PROPERTY

        def fix(doc: dict[str, Any]) -> None:
            for entity in doc["@graph"]:
                if entity.get("propertyID") == FINGERPRINT_PROPERTY:
                    entity["value"] = value
        edit_json(bag, layout.RO_CRATE_JSON, fix)
    return run


RELIABILITY_PNG = "data/figures/reliability-audit.png"

# -- lies in the views (report, figures, crate) that restate no record wrongly cell by cell ----

INVENTED_TABLE = "| metric | raw | calibrated |\n|---|---:|---:|\n| ece | 0.300000 | 0.000100 |\n"
"""An unmarked table with invented numbers, as a reader would see it."""


def report_text(fn: Callable[[str], str]) -> Callable[[Path], None]:
    """Rewrite report.md's text (its checked tables left as they are, cell for cell)."""
    def run(bag: Path) -> None:
        text = (bag / layout.REPORT_MD).read_text(encoding="utf-8")
        new = fn(text)
        assert new != text, "the lie changed nothing"
        (bag / layout.REPORT_MD).write_text(new, encoding="utf-8")
    return run


def _around_table(name: str, before: str, after: str) -> Callable[[str], str]:
    """Put `before` above a checked table's marker and `after` below its last row, and show an
    invented table after that: the checked table is still there, but not what a reader sees."""
    def edit(text: str) -> str:
        lines = text.split("\n")
        start = lines.index(f"<!-- table: {name} -->")
        end = start + 1
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        return "\n".join([*lines[:start], *before.splitlines(), *lines[start:end],
                          *after.splitlines(), "", INVENTED_TABLE, *lines[end:]])
    return edit


def _rows_reshaped(name: str, fn: Callable[[str], str]) -> Callable[[str], str]:
    """Rewrite every row of a checked table below its separator (e.g. so that a renderer no
    longer shows it as a table) and show an invented table after it."""
    def edit(text: str) -> str:
        lines = text.split("\n")
        start = lines.index(f"<!-- table: {name} -->")
        end = start + 3
        while end < len(lines) and lines[end].startswith("|"):
            lines[end] = fn(lines[end])
            end += 1
        return "\n".join([*lines[:end], "", INVENTED_TABLE, *lines[end:]])
    return edit


def better_reliability_figure(bag: Path) -> None:
    """A well-formed reliability diagram of a perfectly calibrated model, drawn by the real
    renderer from doctored bins: a picture the records do not support."""
    from bundle.views.figures import reliability_png

    metrics = loads_strict((bag / layout.METRICS_JSON).read_bytes())
    audit = metrics["pools"]["audit"]
    for b in audit["calibrated"]["bins"]:
        if b["count"]:
            b["accuracy"] = b["mean_confidence"]
    audit["calibrated"]["ece"] = audit["calibrated"]["mce"] = 0.0
    (bag / RELIABILITY_PNG).write_bytes(reliability_png(audit, metrics["temperature"]))


VIEW_LIES: dict[str, tuple[Callable[[Path, Keys], None], str, str]] = {
    "report-sentence-contradicts": (with_key(report_text(lambda t: t.replace(
        "Predicted labels unchanged by the temperature: yes.",
        "Predicted labels unchanged by the temperature: no; calibration fixed 40 wrong labels.")),
        report=False), "report.regenerated", "Predicted labels unchanged"),
    "report-unmarked-table": (with_key(report_text(lambda t: t.replace(
        "### Threshold", INVENTED_TABLE + "\n### Threshold")), report=False),
        "report.regenerated", "| metric | raw | calibrated |"),
    "report-table-in-comment": (with_key(report_text(_around_table("metrics-audit", "<!--", "-->")),
                                         report=False), "report.regenerated", "'<!--'"),
    "report-table-in-code-fence": (with_key(report_text(_around_table("metrics-audit", "```", "```")),
                                            report=False), "report.regenerated", "'```'"),
    "report-table-under-hidden-div": (with_key(report_text(_around_table("metrics-audit", "<div hidden>",
                                                                         "</div>")),
                                               report=False), "report.regenerated", "<div hidden>"),
    "report-rows-without-leading-pipe": (with_key(report_text(_rows_reshaped(
        "metrics-audit", lambda row: row.removeprefix("| "))), report=False),
        "report.regenerated", "line"),
    "report-rows-indented": (with_key(report_text(_rows_reshaped("metrics-audit", lambda row: " " + row)),
                                      report=False), "report.regenerated", "line"),
    "figure-better-drawing": (with_key(better_reliability_figure), "figures.regenerated",
                              "reliability-audit.png is not the figure"),
    "crate-false-description": (with_key(crate_entity("./", lambda e: e.update(
        description="An audited, formally pinned run: every figure reproduced by three labs.")),
        crate=False), "crate.regenerated", "description"),
    "crate-false-file-description": (with_key(crate_entity("metrics.json", lambda e: e.update(
        description="Metrics showing the model is perfectly calibrated.")), crate=False),
        "crate.regenerated", "metrics.json"),
}
"""Lies a dishonest signer (who holds the key) tells in the views while every record stays true."""
CAUGHT_BY_TABLES_TOO = frozenset({"report-rows-without-leading-pipe", "report-rows-indented"})
"""View lies that also break a checked table's grammar (its rows must start with `|`), so that
report.tables rejects them as well; every other one passes every check but its regeneration."""

TAMPERS: dict[str, tuple[Callable[[Path, Keys], None], str, str]] = {
    # one byte changed in each kind of file
    "byte-protocol": (no_key(lambda b: flip(b, layout.PROTOCOL_JSON)), "bag.manifest-sha256",
                      "data/protocol.json"),
    "byte-resources": (no_key(lambda b: flip(b, layout.RESOURCES_JSON)), "bag.manifest-sha256",
                       "data/resources.json"),
    "byte-pools": (no_key(lambda b: flip(b, layout.POOLS_JSON)), "bag.manifest-sha256",
                   "data/pools.json"),
    "byte-calibration-parquet": (no_key(lambda b: flip(b, layout.CALIBRATION_PREDICTIONS)),
                                 "bag.manifest-sha256", "calibration.parquet"),
    "byte-audit-parquet": (no_key(lambda b: flip(b, layout.AUDIT_PREDICTIONS)),
                           "bag.manifest-sha256", "audit.parquet"),
    "byte-temperature": (no_key(lambda b: flip(b, layout.TEMPERATURE_JSON)),
                         "bag.manifest-sha256", "temperature.json"),
    "byte-trajectory": (no_key(lambda b: flip(b, layout.TRAJECTORY_JSON)), "bag.manifest-sha256",
                        "trajectory.json"),
    "byte-metrics": (no_key(lambda b: flip(b, layout.METRICS_JSON)), "bag.manifest-sha256",
                     "metrics.json"),
    "byte-stages": (no_key(lambda b: flip(b, layout.STAGES_JSON)), "bag.manifest-sha256",
                    "stages.json"),
    "byte-environment": (no_key(lambda b: flip(b, layout.ENVIRONMENT_JSON)),
                         "bag.manifest-sha256", "environment.json"),
    "byte-bagit-txt": (no_key(lambda b: flip(b, layout.BAGIT_TXT)), "bag.declaration",
                       "bagit.txt"),
    "byte-bag-info": (no_key(lambda b: flip(b, layout.BAG_INFO, 2)), "bag.tagmanifest",
                      "bag-info.txt"),
    "byte-manifest-sha512": (no_key(lambda b: flip(b, layout.MANIFEST_SHA512, 3)),
                             "bag.manifest-sha512", "manifest-sha512.txt"),
    "byte-envelope": (no_key(lambda b: flip(b, layout.PROVENANCE)), "bag.tagmanifest",
                      "provenance.intoto.json"),
    "byte-signer-pub": (no_key(lambda b: flip(b, layout.SIGNER_PUB, 40)), "bag.tagmanifest",
                        "signer.pub.pem"),
    "byte-tagmanifest": (no_key(lambda b: flip(b, layout.TAGMANIFEST_SHA256, 5)),
                         "bag.tagmanifest", "tagmanifest-sha256.txt"),
    # files removed or added
    "file-removed": (no_key(lambda b: (b / layout.METRICS_JSON).unlink()), "bag.manifest-sha256",
                     "['data/metrics.json']"),
    "file-added-data": (no_key(write("data/notes.txt", b"hello\n")), "bag.manifest-sha256",
                        "data/notes.txt"),
    "file-added-and-listed": (no_key(lambda b: (write("data/notes.txt", b"x")(b),
                                                fix_oxum(b), fix_manifests_without_key(b))),
                              "signature.subjects", "data/notes.txt"),
    "tag-file-removed": (no_key(lambda b: (b / layout.MANIFEST_SHA512).unlink()), "bag.layout",
                         "manifest-sha512.txt"),
    # manifests edited to match a tampered file (no key)
    "manifest-edited-to-match": (no_key(lambda b: (flip(b, layout.METRICS_JSON),
                                                   fix_manifests_without_key(b))),
                                 "signature.subjects", "data/metrics.json"),
    "manifest-dotdot-path": (no_key(manifest_line("data/../../etc/passwd")), "bag.manifest-sha256",
                             "escapes the bag"),
    "manifest-absolute-path": (no_key(manifest_line("/etc/passwd")), "bag.manifest-sha256",
                               "absolute"),
    "symlink-in-data": (no_key(symlink_in_data), "bag.layout", "symbolic links"),
    # signature and signer
    "resigned-other-key": (other_signer(), "signature.signer-trusted", "not by the trusted key"),
    "logit-edited-resigned-other-key": (other_signer(lambda b: (
        edit_parquet(b, "audit", logit_edit), update_stage_hashes(b))),
        "signature.signer-trusted", "re-signed by someone else"),
    "signature-bytes-flipped": (no_key(lambda b: envelope_edit(b, swap_two_signature_bytes)),
                                "signature.valid", "does not verify"),
    "payload-type-changed": (no_key(lambda b: envelope_edit(
        b, lambda e: e.update(payloadType="application/json"))), "signature.envelope",
        "payloadType"),
    "subject-digest-edited": (statement_edit(
        lambda s: s["subject"][0]["digest"].update(sha256="0" * 64)), "signature.valid",
        "does not verify"),
    "signer-pub-replaced": (no_key(lambda b: ((b / layout.SIGNER_PUB).write_bytes(
        __import__("bundle.keys", fromlist=["x"]).public_key_pem(Ed25519PrivateKey.generate())),
        fix_tagmanifest(b))), "signature.valid", "the signing key is"),
    "bag-info-signer-edited": (no_key(lambda b: set_bag_info(
        b, layout.INFO_SIGNER_FINGERPRINT, "cd" * 32)), "signature.valid", "bag-info.txt"),
    "unsigned": (unsigned, "signature.envelope", "unsigned"),
    "predicate-claim-edited": (statement_edit(
        lambda s: s["predicate"]["temperature"].update(temperature=1.2345), key="real"),
        "predicate.claims", "predicate.temperature.temperature"),
    "predicate-schema-pin-edited": (statement_edit(
        lambda s: s["predicate"]["schemas"]["data/metrics.json"].update(sha256="0" * 64),
        key="real"), "predicate.claims", "schemas this verifier does not know"),
    # JSON syntax and schema (the attacker holds the key)
    "duplicate-key": (with_key(raw_json(layout.TEMPERATURE_JSON, b'{"beta":',
                                        b'{"beta":1.0,"beta":')), "json.temperature",
                      "duplicate key"),
    "nan-number": (with_key(raw_json(layout.METRICS_JSON, b'"beta":', b'"beta":NaN,"x":')),
                   "json.metrics", "NaN"),
    "infinity-number": (with_key(raw_json(layout.TRAJECTORY_JSON, b'"beta_max":',
                                          b'"beta_max":Infinity,"y":')), "json.trajectory",
                        "Infinity"),
    "overflow-number": (with_key(raw_json(layout.TRAJECTORY_JSON, b'"beta_max":',
                                          b'"beta_max":1e999,"y":')), "json.trajectory",
                        "overflows"),
    "value-outside-schema": (with_key(edit(layout.TEMPERATURE_JSON,
                                           lambda t: t.update(pool="audit"))),
                             "json.temperature", "schema"),
    "not-canonical": (with_key(lambda b: (b / layout.POOLS_JSON).write_bytes(
        __import__("json").dumps(loads_strict((b / layout.POOLS_JSON).read_bytes()),
                                 indent=1).encode())), "json.pools", "not canonical"),
    # recomputation catches what the key holder changed
    "prob-edited": (with_key(lambda b: edit_parquet(b, "audit", prob_edit)),
                    "predictions.audit.probabilities", "softmax"),
    "logit-edited-real-key": (with_key(lambda b: edit_parquet(b, "audit", logit_edit)),
                              "metrics.audit.raw", "metrics differ from the logits"),
    "calibration-logit-edited": (with_key(lambda b: edit_parquet(b, "calibration", logit_edit)),
                                 "fit.trajectory", "recomputed from the logits"),
    "metrics-edited": (with_key(edit(layout.METRICS_JSON, bump_metric(
        ["pools", "audit", "calibrated", "ece"], 0.01))), "metrics.audit.calibrated",
        "audit.calibrated.ece"),
    "bin-count-edited": (with_key(edit(layout.METRICS_JSON, bump_metric(
        ["pools", "audit", "raw", "bins", 9, "count"], 1))), "metrics.audit.raw", "count"),
    "threshold-count-edited": (with_key(edit(layout.METRICS_JSON, bump_metric(
        ["pools", "calibration", "raw", "threshold", "accepted"], 1))),
        "metrics.calibration.raw", "accepted"),
    "argmax-flag-flipped": (with_key(edit(layout.METRICS_JSON,
                                          lambda m: m.update(argmax_unchanged=False))),
                            "metrics.argmax", "argmax_unchanged"),
    "temperature-not-optimal": (with_key(set_temperature(1.25), metrics=True), "fit.refit",
                                "not the NLL minimiser"),
    "nll-before-edited": (with_key(edit(layout.TEMPERATURE_JSON, bump_metric(["nll_before"],
                                                                             1e-6))),
                          "fit.record", "nll_before"),
    "trajectory-g-edited": (with_key(edit(layout.TRAJECTORY_JSON, first_nonboundary_step)),
                            "fit.trajectory", "recomputed from the logits"),
    "pool-membership-changed": (with_key(swap_pool_member), "pools.assignment", "wrong pool"),
    "split-prefix-changed": (with_key(edit(layout.POOLS_JSON, add_prefix)), "pools.split-keys",
                             "prefix"),
    "rows-reordered": (with_key(lambda b: edit_parquet(b, "calibration", rows_reversed)),
                       "predictions.calibration.rows", "pools.json lists"),
    "batch-edited": (with_key(lambda b: edit_parquet(b, "audit", batch_edit)),
                     "predictions.audit.batches", "batch order"),
    "audit-names-other-temperature": (with_key(audit_names_other_temperature, stages=False),
                                      "stages.audit-after-fit", "did not run on this temperature"),
    "stages-reordered": (with_key(edit(layout.STAGES_JSON, reorder_stages), stages=False),
                         "stages.records", "in that order"),
    "protocol-replaced": (with_key(replace_protocol, stages=False), "protocol.hash",
                          "names protocol"),
    "profile-claimed-formal": (with_key(claim_formal), "resources.pins", "formal"),
    "bag-info-protocol-edited": (no_key(lambda b: set_bag_info(
        b, layout.INFO_PROTOCOL_SHA256, "ef" * 32)), "protocol.hash", "bag-info.txt"),
    "estimator-value-edited": (with_key(edit(layout.METRICS_JSON, bump_metric(
        ["estimators", "results", "ks", "raw", "value"], 1e-4))), "metrics.estimators", "ks.raw.value"),
    "estimator-interval-edited": (with_key(edit(layout.METRICS_JSON, bump_metric(
        ["estimators", "results", "debiased-l2", "difference", "lower"], -1e-4))), "metrics.estimators",
        "debiased-l2.difference.lower"),
    "estimator-bandwidth-edited": (with_key(edit(layout.METRICS_JSON, bump_metric(
        ["estimators", "results", "smooth-ece", "calibrated", "bandwidth"], 1e-3))), "metrics.estimators",
        "smooth-ece.calibrated.bandwidth"),
    "estimator-bin-count-edited": (with_key(edit(layout.METRICS_JSON, bump_metric(
        ["estimators", "results", "bin-intervals", "raw", "bins", 0, "count"], 1))), "metrics.estimators",
        "bins[0].count"),
    "estimators-dropped": (with_key(edit(layout.METRICS_JSON, lambda m: {k: v for k, v in m.items()
                                                                         if k != "estimators"})),
                           "metrics.estimators", "has none"),
    "estimator-bins-out-of-range": (with_key(edit(layout.PROTOCOL_JSON, lambda p: p["metrics"]["estimators"][0]
                                                  .update(bins=1)), report=False, crate=False),
                                    "json.protocol", "['estimators'][0]['bins']: 1 is less than the minimum of 2"),
    "bootstrap-interval-edited": (with_key(edit(layout.BOOTSTRAP_JSON, bump_metric(
        ["differences", "nll", "lower"], -1e-4))), "bootstrap.intervals", "nll.lower"),
    "bootstrap-verdict-edited": (with_key(edit(layout.BOOTSTRAP_JSON, lambda d: d[
        "differences"]["nll"].update(verdict="decrease" if d["differences"]["nll"]["verdict"]
                                     != "decrease" else "increase"))),
        "bootstrap.intervals", "verdict"),
    "bootstrap-seed-changed": (with_key(edit(layout.BOOTSTRAP_JSON, bump_metric(["seed"], 1))),
                               "bootstrap.record", "seed"),
    "bootstrap-upper-edited": (with_key(edit(layout.BOOTSTRAP_JSON, bump_metric(
        ["differences", "ece", "upper"], 1e-6))), "bootstrap.intervals", "ece.upper"),
    "bootstrap-point-edited": (with_key(edit(layout.BOOTSTRAP_JSON, bump_metric(
        ["differences", "brier", "point"], 1e-7))), "bootstrap.intervals", "brier.point"),
    "bootstrap-indices-sha-edited": (with_key(edit(layout.BOOTSTRAP_JSON, lambda d: d.update(
        indices_sha256=hashlib.sha256(d["indices_sha256"].encode()).hexdigest()))),
        "bootstrap.intervals", "indices_sha256"),
    "stability-audit-nll-edited": (with_key(edit(layout.STABILITY_JSON, bump_metric(
        ["sizes", 0, "audit_nll"], 1e-6))), "stability.refit", "audit_nll"),
    "stability-temperature-edited": (with_key(edit(layout.STABILITY_JSON, lambda d: d[
        "sizes"][0].update(temperature=d["sizes"][0]["temperature"] * 1.01,
                           beta=1 / (d["sizes"][0]["temperature"] * 1.01)))),
        "stability.refit", "re-fit"),
    "stability-file-removed": (no_key(lambda b: (b / layout.STABILITY_JSON).unlink()),
                               "bag.manifest-sha256", "data/stability.json"),
    "payload-oxum-edited": (no_key(lambda b: set_bag_info(b, layout.INFO_PAYLOAD_OXUM, "1.10")),
                            "bag.info", "Payload-Oxum"),
    # derived files: report, crate, figures
    "byte-report": (no_key(lambda b: flip(b, layout.REPORT_MD)), "bag.manifest-sha256",
                    "data/report.md"),
    "report-number-edited": (with_key(report_cell("temperature", "temperature", last_digit_up),
                                      report=False), "report.tables",
                             "temperature[temperature][value]"),
    "report-metric-edited": (with_key(report_cell("metrics-audit", "ece", last_digit_up),
                                      report=False), "report.tables", "metrics-audit[ece][raw]"),
    "report-row-removed": (with_key(raw_json(layout.REPORT_MD, b"| ece |", b"ece |"),
                                    report=False), "report.tables", "row 'ece' is missing"),
    "crate-sha256-edited": (with_key(crate_entity("metrics.json", lambda e: e.update(
        sha256="0" * 64)), crate=False), "crate.files", "metrics.json: sha256"),
    "crate-size-edited": (with_key(crate_entity("pools.json", lambda e: e.update(
        contentSize="1")), crate=False), "crate.files", "pools.json: contentSize"),
    "crate-file-dropped": (with_key(lambda b: edit_json(b, layout.RO_CRATE_JSON, lambda d: d.update(
        {"@graph": [e for e in d["@graph"] if e["@id"] != "temperature.json"]})), crate=False),
        "crate.structure", "temperature.json"),
    "crate-signer-edited": (with_key(crate_signer("ab" * 32), crate=False), "crate.signer",
                            "names signer abababab"),
    "crate-input-edited": (with_key(crate_entity("#input-model", lambda e: e.update(
        version="f" * 40)), crate=False), "crate.run", "#input-model"),
    "figure-removed": (no_key(lambda b: (b / RELIABILITY_PNG).unlink()), "bag.manifest-sha256",
                       "['data/figures/reliability-audit.png']"),
    "figure-removed-resealed": (with_key(lambda b: (b / RELIABILITY_PNG).unlink()), "figures.png",
                                "reliability-audit.png is missing"),
    "figure-not-png": (with_key(write(RELIABILITY_PNG, b"GIF89a not a png")), "figures.png",
                       "PNG signature"),
    **VIEW_LIES,
}


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_tamper_rejected(name: str, base: tuple[Path, Keys], tmp_path: Path) -> None:  # noqa: F811
    src, keys = base
    for prefix, path in (("bootstrap-", layout.BOOTSTRAP_JSON), ("stability-", layout.STABILITY_JSON)):
        if name.startswith(prefix) and not (src / path).exists():
            pytest.skip(f"this bundle's protocol has no {prefix[:-1]} section")
    bag = copy_bag(src, tmp_path / "bag")
    tamper, check_id, words = TAMPERS[name]
    tamper(bag, keys)
    outcome = verify_path(bag, Trust(key=keys.real.public_key(), source="real.pem"))
    failed = {c.id: c.detail for c in outcome.checks if c.status == "fail"}
    assert outcome.exit_code == EXIT_FAILED, failed
    assert check_id in failed, (check_id, failed)
    assert words in failed[check_id], failed[check_id]


@pytest.mark.parametrize("name", sorted(set(VIEW_LIES) - CAUGHT_BY_TABLES_TOO))
def test_view_lies_are_caught_by_regeneration_alone(name: str, base: tuple[Path, Keys],  # noqa: F811
                                                    tmp_path: Path) -> None:
    """Each lie keeps the records, the checked tables and the crate's facts true, so the older
    checks pass it; the view it lies in is rejected because it is not the records' rendering."""
    src, keys = base
    bag = copy_bag(src, tmp_path / "bag")
    tamper, check_id, _ = VIEW_LIES[name]
    tamper(bag, keys)
    outcome = verify_path(bag, Trust(key=keys.real.public_key(), source="real.pem"))
    # figures.regenerated is skipped once an earlier check failed (drawing cannot change a rejection)
    assert [c.id for c in outcome.checks if c.status == "fail"] == [check_id], \
        [(c.id, c.detail) for c in outcome.checks if not c.ok]
    assert {c.id for c in outcome.checks if c.status == "skip"} <= {"figures.regenerated"}


def test_tamper_classes_are_many() -> None:
    assert len(TAMPERS) >= 30


def test_untouched_base_verifies(base: tuple[Path, Keys]) -> None:  # noqa: F811
    bag, keys = base
    outcome = verify_path(bag, Trust(key=keys.real.public_key(), source="real.pem"))
    assert outcome.exit_code == EXIT_OK, [c for c in outcome.checks if not c.ok]
    assert verify_path(bag).exit_code == EXIT_UNTRUSTED


def test_other_signer_without_trusted_key_is_not_established(base: tuple[Path, Keys],  # noqa: F811
                                                            tmp_path: Path) -> None:
    """Re-signed by someone else and no key pinned: intact, but exit 3, never 0."""
    src, keys = base
    bag = copy_bag(src, tmp_path / "bag")
    reseal(bag, keys.other)
    outcome = verify_path(bag)
    assert outcome.exit_code == EXIT_UNTRUSTED
    skipped = [c for c in outcome.checks if c.status == "skip"]
    assert [c.id for c in skipped] == ["signature.signer-trusted"]
    assert "not established" in skipped[0].detail
