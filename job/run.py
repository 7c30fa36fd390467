"""`python -m job run`: execute the protocol into a staging directory, seal, sign, publish atomically."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from bundle.bag import bagging_date, seal
from bundle.keys import fingerprint, generate, load_private_key
from bundle.publish import assembling
from job.errors import JobError
from job.pipeline import execute
from job.protocol import Protocol
from job.resources import Resources
from job.summary import summary


def ephemeral_key_dir(out: Path) -> Path:
    return out.parent / f"{out.name}.key"


def _signing_key(args: argparse.Namespace) -> Any:
    if args.signing_key is not None:
        return load_private_key(args.signing_key)
    if args.ephemeral_key:
        key_dir = ephemeral_key_dir(args.out)
        if key_dir.exists():
            raise JobError(f"{key_dir} already exists; choose a new --out or remove it.")
        generate(key_dir)
        return load_private_key(key_dir / "signing-key.pem")
    print("warning: no --signing-key given; the bundle will be unsigned and cannot be verified as "
          "coming from anyone", file=sys.stderr)
    return None


def run_to_bundle(args: argparse.Namespace, protocol: Protocol, resources: Resources) -> int:
    """Run, then seal the bundle at --out; nothing appears at --out unless it is complete."""
    if args.out.exists():
        raise JobError(f"Output directory {args.out} already exists; choose a new --out or remove it.")
    if resources.profile != "formal":
        print("note: resources differ from the protocol's pins; the bundle is labelled profile "
              "'other':" + "".join(f"\n  - {d}" for d in resources.deviations), file=sys.stderr)
    key = _signing_key(args)
    try:
        metrics = _run_and_seal(args, protocol, resources, key)
    except BaseException:
        if args.ephemeral_key:  # a throwaway key for a bundle that does not exist is useless
            shutil.rmtree(ephemeral_key_dir(args.out), ignore_errors=True)
        raise
    data = args.out / "data"
    temperature = json.loads((data / "temperature.json").read_text())
    boot = data / "bootstrap.json"
    print(summary(metrics, temperature, resources.profile,
                  json.loads(boot.read_text()) if boot.exists() else None))
    print(f"bundle written to {args.out}" + ("" if key is not None else " (UNSIGNED)"))
    if args.ephemeral_key:
        key_dir = ephemeral_key_dir(args.out)
        print(f"signed with a throwaway key (fingerprint {fingerprint(key)}); verify with "
              f"--trusted-key {key_dir}/signing-key.pub.pem")
    return 0


def _run_and_seal(args: argparse.Namespace, protocol: Protocol, resources: Resources, key: Any) -> dict[str, Any]:
    date = bagging_date()  # one date for the crate's datePublished and the bag's Bagging-Date
    with assembling(args.out) as staging:
        metrics = execute(protocol, resources, staging / "data", progress=not args.no_progress,
                          signer_fingerprint=fingerprint(key) if key is not None else None,
                          date_published=date)
        seal(staging, description=f"Temperature-scaling calibration run under protocol {protocol.sha256[:16]} "
             f"({protocol.doc['name']}), profile {resources.profile}.",
             protocol_sha256=protocol.sha256, profile=resources.profile,
             private_key=key, date=date)
    return metrics
