"""`python -m job run`: execute the protocol into a staging directory, seal, sign, publish atomically."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundle import layout
from bundle.keys import fingerprint
from job.errors import JobError
from job.pipeline import RunResult, execute, run_settings
from job.protocol import Protocol
from job.publishing.dates import bagging_date
from job.publishing.publish import assembling, refuse_existing
from job.publishing.seal import seal
from job.publishing.signing_keys import PRIVATE_KEY_NAME, PUBLIC_KEY_NAME, generate, load_private_key
from job.resources import Resources
from job.rocrate import Publication
from job.runtime import Settings
from job.sharded import ShardOptions
from job.summary import summary


@dataclass(frozen=True)
class RunOptions:
    """What `python -m job run` was asked to do, once the command line is parsed.

    Exactly one of signing_key and ephemeral_key says how the bundle is signed: a bundle nobody
    signed cannot be verified as coming from anyone, so the job never writes one."""

    out: Path  # the bundle directory to create; it must not exist
    signing_key: Path | None = None  # Ed25519 private key (PKCS#8 PEM)
    ephemeral_key: bool = False  # sign with a throwaway key written beside `out`
    progress: bool = True
    threads: int | None = None  # torch threads (--threads); None: job.runtime.ThreadChoice's default
    publication: Publication = field(default_factory=Publication)  # licence, publisher, authors
    shard: ShardOptions | None = None  # run the pools' batches on a Ray cluster (job.sharded)

    def __post_init__(self) -> None:
        if self.signing_key is None and not self.ephemeral_key:
            raise JobError("No signing key was given, and an unsigned bundle cannot be verified; pass "
                           "--signing-key KEY.pem (python -m job keygen makes one) or --ephemeral-key.")
        if self.signing_key is not None and self.ephemeral_key:
            raise JobError("Both --signing-key and --ephemeral-key were given; pass only one of them.")


def ephemeral_key_dir(out: Path) -> Path:
    return out.parent / f"{out.name}.key"


def _signing_key(options: RunOptions) -> Any:
    if options.signing_key is not None:
        return load_private_key(options.signing_key)
    key_dir = ephemeral_key_dir(options.out)
    if key_dir.exists():
        raise JobError(f"{key_dir} already exists; choose a new --out or remove it.")
    generate(key_dir)
    return load_private_key(key_dir / PRIVATE_KEY_NAME)


def run_to_bundle(options: RunOptions, protocol: Protocol, resources: Resources) -> int:
    """Run, then seal the bundle at options.out; nothing appears there unless it is complete and signed."""
    refuse_existing(options.out)  # before anything is run or a key is made
    settings = run_settings(protocol, options.threads, options.shard)  # a bad --threads: nothing written
    if resources.profile != "formal":
        print("note: resources differ from the protocol's pins; the bundle is labelled profile "
              "'other':" + "".join(f"\n  - {d}" for d in resources.deviations), file=sys.stderr)
    key = _signing_key(options)
    try:
        result = run_and_seal(options.out, protocol, resources, key, progress=options.progress,
                              publication=options.publication, settings=settings, shard=options.shard)
    except BaseException:
        if options.ephemeral_key:  # a throwaway key for a bundle that does not exist is useless
            shutil.rmtree(ephemeral_key_dir(options.out), ignore_errors=True)
        raise
    print(summary(result.metrics, result.temperature, resources.profile, result.bootstrap))
    print(f"bundle written to {options.out}")
    if options.ephemeral_key:
        key_dir = ephemeral_key_dir(options.out)
        print(f"signed with a throwaway key (fingerprint {fingerprint(key)}); verify with "
              f"--trusted-key {key_dir / PUBLIC_KEY_NAME}")
    return 0


def run_and_seal(out: Path, protocol: Protocol, resources: Resources, key: Any, *, progress: bool,
                 publication: Publication, settings: Settings | None = None,
                 shard: ShardOptions | None = None) -> RunResult:
    """Execute the protocol and seal its bundle at `out`, signed with `key`; `out` appears only
    complete and signed (job.publishing.publish.assembling). `settings`: the run's (job.pipeline.run_settings;
    None: chosen there, with the physical cores this process may run on, at most the protocol's
    torch_threads)."""
    date = bagging_date()  # one date for the crate's datePublished and the bag's Bagging-Date
    with assembling(out) as staging:
        result = execute(protocol, resources, staging / layout.DATA_DIR, progress=progress,
                         signer_fingerprint=fingerprint(key), date_published=date,
                         publication=publication, settings=settings, shard=shard)
        seal(staging, result.ledger,
             description=f"Temperature-scaling calibration run under protocol {protocol.sha256[:16]} "
             f"({protocol.doc['name']}), profile {resources.profile}.",
             protocol_sha256=protocol.sha256, profile=resources.profile,
             predicate=result.predicate, private_key=key, date=date)
    return result
