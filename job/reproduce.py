"""`python -m job reproduce`: re-run a bundle's inference with the pinned resources and attest,
signed, whether every compared row's float32 logits are the bundle's bit for bit.

Order: the bundle is verified (integrity), its protocol read, the resources checked against the
hashes the bundle records (before any inference), the pools re-derived, the recorded batches re-run
(all of them, or those holding a seeded sample of rows), every compared row compared, and the
attestation written atomically. Exit 0 every row identical, 1 a row differs, 2 bad input."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from numpy.typing import NDArray

from bundle import layout
from bundle.attestation import attestation_bytes, build_reproduction_statement, write_attestation
from bundle.keys import fingerprint, load_private_key
from job.batching import Tokenized
from job.dataset import Rows, load_rows
from job.engines import Engine
from job.environment import cpu_model, git_commit
from job.errors import JobError
from job.logit_compare import compare_rows
from job.protocol import Protocol
from job.resources import Resources
from job.split import Pool, make_pools
from job.spot_sample import draw_rows
from job.verified_bundle import RecordedPool, VerifiedBundle, load_verified

if TYPE_CHECKING:
    from job.sharded import ShardOptions

POOLS = layout.REPRODUCTION_POOLS
SHOWN_DIFFERENCES = 10


@dataclass(frozen=True)
class ReproduceOptions:
    """What `python -m job reproduce` was asked to do, once the command line is parsed."""

    bundle: Path  # bag folder or .tar.gz; only read
    out: Path  # the attestation to write; must not exist
    signing_key: Path  # the reproducer's Ed25519 private key
    sample: int | None = None  # compare this many seeded rows instead of all
    seed: int | None = None
    progress: bool = True
    shard: ShardOptions | None = None  # re-run the batches on a Ray cluster (job.sharded)

    def __post_init__(self) -> None:
        if (self.sample is None) != (self.seed is None):
            raise JobError("--sample and --seed go together: pass both (a spot check of N rows drawn "
                           "with seed S) or neither (every row).")


@dataclass(frozen=True)
class Finding:
    """What the re-run found for the compared rows of every pool."""

    compared: dict[str, list[int]]  # pool -> positions compared, in pool order
    identical: dict[str, NDArray[np.bool_]]
    ulps: dict[str, NDArray[np.int64]]
    abs: dict[str, NDArray[np.float64]]
    batches: dict[str, list[int]]  # pool -> recorded batches re-run

    @property
    def rows(self) -> int:
        return sum(len(v) for v in self.compared.values())

    @property
    def same(self) -> int:
        return sum(int(v.sum()) for v in self.identical.values())


def bundle_protocol(bundle: VerifiedBundle) -> Protocol:
    """The protocol the bundle ran under (data/protocol.json, verified), not the repository's."""
    return Protocol.from_bytes(bundle.protocol_raw, bundle.json(layout.PROTOCOL_JSON))


def check_resources(recorded: dict[str, Any], resources: Resources) -> None:
    """Every file the bundle used, with the sha256 its resources.json records, and no other file.

    Raises JobError naming the file and both hashes; called before any inference."""
    for role, repo in (("model", resources.model), ("dataset", resources.dataset)):
        want = {f["path"]: f["sha256"] for f in recorded[role]["files"]}
        have = {f.path: f.sha256 for f in repo.files}
        for path, sha in want.items():
            if path not in have:
                raise JobError(f"The bundle's {role} file {path} is not among the resources given; add it "
                               "to the lock (--resources) or the cache.")
            if have[path] != sha:
                raise JobError(f"The {role} file {path} has sha256 {have[path]}, but the bundle records "
                               f"{sha}; reproduce with the very files the bundle used (nothing was run).")
        extra = sorted(set(have) - set(want))
        if extra:
            raise JobError(f"The {role} files {extra} were not used by the bundle; give exactly the files "
                           "its resources.json lists.")


def _plan(pool: RecordedPool, positions: list[int] | None) -> tuple[list[int], list[list[int]]]:
    """(recorded batches to run, their rows in the order they ran); all batches when positions is None."""
    batches = pool.batches()
    wanted = sorted(batches) if positions is None else sorted({int(pool.batch[p]) for p in positions})
    return wanted, [batches[b] for b in wanted]


def rerun(bundle: VerifiedBundle, protocol: Protocol, resources: Resources, sample: dict[str, list[int]] | None,
          progress: bool, shard: ShardOptions | None = None) -> Finding:
    """Re-derive the pools, re-run the recorded batches (here, or on the cluster `shard` names), and
    compare the chosen rows with the bundle."""
    from job.engines import open_engine
    from job.runtime import Settings

    s = Settings.from_protocol(protocol.inference)
    rows = load_rows([f.local for f in resources.dataset.files], resources.dataset_spec, protocol.dataset)
    pools = make_pools(protocol.prefix, rows.ids, protocol.split.pools)
    recorded = {name: bundle.pool(name) for name in POOLS}
    for name in POOLS:
        mine, theirs = pools[name], recorded[name]
        ids = [int(rows.ids[p]) for p in mine.positions]
        hashes = tuple(rows.text_sha256[p] for p in mine.positions)
        if ids != theirs.idx.tolist() or hashes != theirs.text_sha256:
            raise JobError(f"The {name} pool re-derived from the dataset differs from the bundle's "
                           "predictions; the dataset or the split rule is not the bundle's.")
    with open_engine(shard, bundle.protocol_raw, bundle.json(layout.RESOURCES_JSON), resources, s) as engine:
        return _compare(bundle, protocol, engine, pools, rows, recorded, sample, progress, s.max_length)


def _compare(bundle: VerifiedBundle, protocol: Protocol, engine: Engine, pools: dict[str, Pool], rows: Rows,
             recorded: dict[str, RecordedPool], sample: dict[str, list[int]] | None, progress: bool,
             max_length: int) -> Finding:
    """Re-run each pool's recorded batches that hold the compared rows on `engine` and compare."""
    finding = Finding({}, {}, {}, {}, {})
    for name in POOLS:
        theirs = recorded[name]
        chosen = sample[name] if sample is not None else None
        batches, plan = _plan(theirs, chosen)
        needed = sorted(r for batch in plan for r in batch)
        local = {r: i for i, r in enumerate(needed)}
        positions = pools[name].positions
        # The run's inputs for these rows: the same texts (and pairs), tokenised by the same rule and
        # with token type ids for a model with segment embeddings, batch by batch as they run.
        texts, pairs = rows.inputs([positions[r] for r in needed])
        tokens = Tokenized(engine.tokenizer, texts, max_length, pairs, segments=engine.segments)
        label = f"{name} re-run" if progress else None
        logits = engine.run(name, tokens, [[local[r] for r in b] for b in plan], label,
                            bundle.sha256(layout.TEMPERATURE_JSON))
        if protocol.label_map is not None:
            logits = protocol.label_map.reorder(logits)  # stored columns are in dataset label order
        compared = chosen if chosen is not None else list(range(len(positions)))
        found = logits[[local[r] for r in compared]]
        if not np.isfinite(found).all():
            raise JobError(f"The model produced non-finite logits for {name} rows; the resources or the "
                           "machine are broken, so nothing can be compared.")
        result = compare_rows(found, theirs.logits[compared])
        finding.compared[name] = compared
        finding.identical[name], finding.ulps[name], finding.abs[name] = result.identical, result.ulps, result.abs
        finding.batches[name] = batches
    return finding


def first_differences(finding: Finding, recorded_idx: dict[str, list[int]]) -> list[dict[str, Any]]:
    """The first rows that differ, pool by pool in pool order: pool, idx and the row's largest difference."""
    out: list[dict[str, Any]] = []
    for name in POOLS:
        for i, pos in enumerate(finding.compared[name]):
            if not finding.identical[name][i] and len(out) < SHOWN_DIFFERENCES:
                out.append({"pool": name, "idx": recorded_idx[name][pos], "ulps": int(finding.ulps[name][i]),
                            "abs": float(finding.abs[name][i])})
    return out


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """Where the re-run happened: versions, CPU, threads, image and commit."""
    import torch

    return {"python": platform.python_version(), "torch": _version("torch"),
            "transformers": _version("transformers"), "numpy": _version("numpy"), "cpu_model": cpu_model(),
            "threads": int(torch.get_num_threads()), "image": os.environ.get("CALIBRATION_IMAGE"),
            "git_commit": git_commit()}


def predicate(options: ReproduceOptions, protocol: Protocol, resources: Resources, finding: Finding,
              recorded_idx: dict[str, list[int]], reproducer: str) -> dict[str, Any]:
    """The reproduction predicate (schemas/reproduction.schema.json $defs.predicate)."""
    worst = max((int(finding.ulps[n].max(initial=0)) for n in POOLS), default=0)
    worst_abs = max((float(finding.abs[n].max(initial=0.0)) for n in POOLS), default=0.0)
    sampled = options.sample is not None
    return {
        "verdict": "reproduced" if finding.same == finding.rows else "mismatch",
        "mode": "sample" if sampled else "full",
        "protocol_sha256": protocol.sha256,
        "resources": {role: [{"path": f.path, "sha256": f.sha256} for f in repo.files]
                      for role, repo in (("model", resources.model), ("dataset", resources.dataset))},
        "rows": {"compared": finding.rows, "identical": finding.same,
                 "pools": {n: {"count": len(finding.compared[n]),
                               "idx": [recorded_idx[n][p] for p in finding.compared[n]] if sampled else "all"}
                           for n in POOLS}},
        "largest_difference": {"ulps": worst, "abs": worst_abs},
        "first_differences": first_differences(finding, recorded_idx),
        "sample": ({"n": options.sample, "seed": options.seed, "generator": layout.REPRODUCTION_GENERATOR,
                    "batches": {n: finding.batches[n] for n in POOLS}} if sampled else None),
        "environment": environment(),
        "reproducer_fingerprint": reproducer,
    }


def reproduce(options: ReproduceOptions, resolve: Callable[[Protocol], Resources],
              key: Ed25519PrivateKey | None = None) -> int:
    """Verify, check resources, re-run, compare, attest; returns 0 reproduced or 1 mismatch.

    `resolve` gives the resources for the bundle's protocol (a lock or the cache); `key` is the
    reproducer's key when the caller has loaded it already (default: read options.signing_key).
    Raises JobError (or BundleError) on bad input; then no attestation exists at options.out."""
    if os.path.lexists(options.out):
        raise JobError(f"{options.out} already exists and attestations are never overwritten; choose "
                       "another --out.")
    if not options.out.parent.is_dir():
        raise JobError(f"The folder {options.out.parent} for --out does not exist; create it first.")
    key = key if key is not None else load_private_key(options.signing_key)
    bundle = load_verified(options.bundle)
    protocol = bundle_protocol(bundle)
    resources = resolve(protocol)
    check_resources(bundle.json(layout.RESOURCES_JSON), resources)
    sizes = [(n, dict(protocol.split.pools)[n]) for n in POOLS]
    sample = None
    if options.sample is not None and options.seed is not None:
        sample = draw_rows(sizes, options.sample, options.seed)
    finding = rerun(bundle, protocol, resources, sample, options.progress, options.shard)
    recorded_idx = {n: bundle.pool(n).idx.tolist() for n in POOLS}
    doc = predicate(options, protocol, resources, finding, recorded_idx, fingerprint(key))
    statement = build_reproduction_statement(
        bundle.statement_sha256, {layout.PREDICTIONS[n]: bundle.sha256(layout.PREDICTIONS[n]) for n in POOLS}, doc)
    write_attestation(options.out, attestation_bytes(statement, key))
    print(summary(doc, options.out))
    return 0 if doc["verdict"] == "reproduced" else 1


def summary(doc: dict[str, Any], out: Path) -> str:
    """What the re-run found, for the terminal."""
    rows, worst = doc["rows"], doc["largest_difference"]
    mode = doc["mode"] if doc["sample"] is None else f"sample of {doc['sample']['n']}, seed {doc['sample']['seed']}"
    if doc["verdict"] == "reproduced":
        head = (f"reproduced: {rows['compared']} rows compared ({mode}), every one's float32 logits identical "
                "to the bundle's bit for bit")
    else:
        first = ", ".join(f"{d['pool']} idx {d['idx']}" for d in doc["first_differences"])
        head = (f"MISMATCH: {rows['compared'] - rows['identical']} of {rows['compared']} rows differ ({mode}); "
                f"largest difference {worst['ulps']} ulps, {worst['abs']:.3g} absolute; first rows that "
                f"differ: {first}")
    return f"{head}\nattestation written to {out}"

