"""A sharded run's record (environment.json `cluster`): every batch of the predictions ran on
exactly one worker, and the audit batches carried the frozen temperature's hash.

The workers, their machines and CPU kinds are the signer's word: these checks hold the record to
its own consistency, never to where the batches really ran, and the reproduction checks never let
it remove a warning (verify.batch_kinds)."""

from __future__ import annotations

from typing import Any

import numpy as np

from bundle import layout
from verify.context import POOL_NAMES, Context
from verify.result import Failed


def _cluster(ctx: Context) -> dict[str, Any] | None:
    env = ctx.docs.get(layout.ENVIRONMENT_JSON)
    return env.get("cluster") if isinstance(env, dict) else None


def wanted(ctx: Context) -> bool:
    """Only for a run whose environment.json records a cluster."""
    return _cluster(ctx) is not None


def check_batch_owners(cluster: dict[str, Any], batches: dict[str, set[int]]) -> str:
    """Every batch in `batches` (pool -> the batch numbers its predictions hold) is listed under
    exactly one worker, and no worker lists a batch the pool does not have."""
    for pool, have in batches.items():
        owners: dict[int, list[str]] = {}
        for w in cluster["workers"]:
            for b in w["batches"].get(pool, []):
                owners.setdefault(int(b), []).append(w["id"])
        twice = sorted(b for b, ws in owners.items() if len(ws) > 1)
        if twice:
            raise Failed(f"environment.json lists {pool} batch {twice[0]} under {len(owners[twice[0]])} workers "
                         f"({', '.join(owners[twice[0]])}); each batch must have exactly one.")
        missing = sorted(have - set(owners))
        if missing:
            raise Failed(f"{pool} batch {missing[0]} is under no worker in environment.json ({len(missing)} "
                         "batches are); each batch must have exactly one.")
        extra = sorted(set(owners) - have)
        if extra:
            raise Failed(f"environment.json lists {pool} batch {extra[0]} under {owners[extra[0]][0]}, but the "
                         f"{pool} predictions have no such batch.")
    unknown = sorted({p for w in cluster["workers"] for p in w["batches"]} - set(batches))
    if unknown:
        raise Failed(f"environment.json lists batches of pool {unknown[0]!r}, which the bundle does not have.")
    ran = [w for w in cluster["workers"] if any(w["batches"].values())]
    kinds = {w["cpu_kind"] for w in ran}
    total = sum(len(b) for b in batches.values())
    return (f"{total} batches, each on exactly one of {len(ran)} workers on {len({w['node_id'] for w in ran})} "
            f"machines, {len(kinds)} CPU kind(s){', MIXED' if len(kinds) > 1 else ''}, as the signer records "
            "them (a claim: nothing checks which machine ran a batch)")


def batch_owners(ctx: Context) -> str:
    """Every recorded batch of both pools ran on exactly one worker of the cluster."""
    cluster = ctx.need(_cluster(ctx), "payload.documents", "environment.json's cluster")
    batches = {pool: {int(b) for b in np.unique(ctx.table(pool).batch)} for pool in POOL_NAMES}
    return check_batch_owners(cluster, batches)


def audit_temperature(ctx: Context) -> str:
    """The audit batches carried the sha256 of the bag's temperature.json to their workers."""
    cluster = ctx.need(_cluster(ctx), "payload.documents", "environment.json's cluster")
    want = ctx.sha(layout.TEMPERATURE_JSON)
    if cluster["audit_temperature_sha256"] != want:
        raise Failed(f"environment.json says the audit batches carried temperature sha256 "
                     f"{cluster['audit_temperature_sha256']}, but temperature.json's is {want}.")
    return "audit batches carried the frozen temperature.json's sha256"
