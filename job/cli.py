"""Command line: `python -m job lock | init | prepare | smoke | run | reproduce | sweep` and the
publishing commands `keygen | archive | cosign` (job/publishing/cli.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bundle import layout
from bundle.errors import BundleError
from bundle.terminal import nonempty_path, tolerant_stdout
from job import lockfile
from job.errors import JobError
from job.hub import default_cache
from job.pipeline import smoke
from job.process import configure_process
from job.protocol import DEFAULT_PROTOCOL, Protocol, load_protocol
from job.protocol_init import add_arguments, run_init
from job.publishing import cli as publishing
from job.ray_engine import cluster_address
from job.reproduce import ReproduceOptions, reproduce
from job.resources import Resources, resolve_hub, resolve_local
from job.rocrate import DEFAULT_LICENSE, DEFAULT_PUBLISHER, Party, Publication
from job.run import RunOptions, run_to_bundle
from job.sharded import ShardOptions
from job.sweep_reproduce import SweepReproduceOptions, reproduce_sweep
from job.sweep_run import SweepOptions, run_sweep
from job.sweep_spec import absolute_lock


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m job", description=(
        "Calibrate a frozen text classifier with one temperature under a pre-registered protocol "
        "and write a signed, verifiable bundle."))
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--protocol", type=nonempty_path, default=DEFAULT_PROTOCOL,
                        help="pre-registered protocol (default: provenance.json)")
        sp.add_argument("--resources", type=nonempty_path, help="local resource lock (JSON) instead of the hub cache")
        sp.add_argument("--cache", type=nonempty_path, default=None,
                        help="resource cache (default: $HF_HOME/calibration-runs)")

    def sharding(sp: argparse.ArgumentParser, sweep: bool = False) -> None:
        sp.add_argument("--address", help=(
            "run the inference on the Ray cluster at ADDRESS, one worker per --worker-cpus of its CPUs "
            "(default: RAY_ADDRESS; without either, in this process" +
            (", or for a sweep a local Ray instance bound to 127.0.0.1)" if sweep else ")")))
        sp.add_argument("--worker-cpus", type=int, metavar="N",
                        help="with --address: CPUs and torch threads of each worker (default: the protocol's "
                             "torch_threads)")

    prep = sub.add_parser("prepare", help="download and check every pinned file into the cache")
    common(prep)
    prep.add_argument("--pins-out", type=nonempty_path, default=Path("observed-pins.json"),
                      help="where to write sha256 values pinned on first use (default: ./observed-pins.json)")
    smoke = sub.add_parser("smoke", help="run the first 8 calibration rows through the whole chain")
    common(smoke)
    run = sub.add_parser("run", help="the full run: calibration inference, fit, audit, metrics, bundle")
    common(run)
    run.add_argument("--out", type=nonempty_path, required=True, help="bundle directory to create (must not exist)")
    key = run.add_mutually_exclusive_group()
    key.add_argument("--signing-key", type=nonempty_path,
                     help="Ed25519 private key (PKCS#8 PEM); passphrase from CALIBRATION_KEY_PASSPHRASE")
    key.add_argument("--ephemeral-key", action="store_true", help="sign with a throwaway key written beside --out")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--threads", type=int, metavar="N",
                     help="torch threads, at most the protocol's torch_threads (default: the physical cores "
                          "this process may run on, up to that bound): N batches run at once, each forward "
                          "on one thread, so the logits do not depend on N (with --address, each worker's "
                          "threads, one batch at a time, unless --worker-cpus is given)")
    run.add_argument("--license", default=DEFAULT_LICENSE, metavar="URL",
                     help=f"licence of the bundle's files, an SPDX URL (default: {DEFAULT_LICENSE})")
    run.add_argument("--publisher", default=DEFAULT_PUBLISHER, metavar="'NAME <URL>'",
                     help="who publishes the bundle: a name and its ROR (organisation) or ORCID (person) "
                          f"URL (default: {DEFAULT_PUBLISHER})")
    run.add_argument("--author", action="append", default=[], metavar="'NAME <ORCID>'",
                     help="a person who wrote the bundle, <ORCID URL> optional; repeat for several "
                          "(default: none stated)")
    run.add_argument("--contact", metavar="EMAIL", help="the publisher's e-mail address (default: none)")
    sharding(run)
    rep = sub.add_parser("reproduce", help="re-run a bundle's inference and sign whether its logits reproduce")
    rep.add_argument("bundle", type=nonempty_path,
                     help="the bag folder or its .tar.gz, or a sweep directory (only read)")
    rep.add_argument("--out", type=nonempty_path, required=True,
                     help="attestation file to write (must not exist); for a sweep, a new folder of them")
    rep.add_argument("--signing-key", type=nonempty_path, required=True,
                     help="the reproducer's Ed25519 private key (PKCS#8 PEM); "
                          "passphrase from CALIBRATION_KEY_PASSPHRASE")
    rep.add_argument("--resources", type=nonempty_path, help="local resource lock (JSON) instead of the hub cache")
    rep.add_argument("--cache", type=nonempty_path, default=None,
                     help="resource cache (default: $HF_HOME/calibration-runs)")
    rep.add_argument("--sample", type=int, metavar="N",
                     help="spot check: re-run whole recorded batches drawn with --seed until they hold N rows")
    rep.add_argument("--seed", type=int, metavar="S", help="seed of the spot check's draw (PCG64)")
    rep.add_argument("--no-progress", action="store_true", help="no progress bar")
    rep.add_argument("--members", type=int, metavar="K",
                     help="sweep only: reproduce K done members drawn with --seed (default: every one)")
    sharding(rep, sweep=True)
    sw = sub.add_parser("sweep", help="run a pre-registered sweep of protocols on Ray: signed plan, "
                                      "member bundles, signed index")
    sw.add_argument("sweep", type=Path, help="the sweep file (schemas/sweep.schema.json)")
    sw.add_argument("--out", type=Path, required=True,
                    help="sweep directory: new, or one this sweep file planned (a rerun resumes)")
    sw.add_argument("--signing-key", type=Path, required=True,
                    help="Ed25519 private key (PKCS#8 PEM) signing the plan, the index and every member; "
                         "passphrase from CALIBRATION_KEY_PASSPHRASE")
    sw.add_argument("--address", help="join the Ray cluster at ADDRESS (default: RAY_ADDRESS, else a local "
                                      "Ray instance bound to 127.0.0.1)")
    sw.add_argument("--cache", type=Path, default=None,
                    help="resource cache on each node for members without a lock (default: $HF_HOME/calibration-runs)")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_arguments(sub.add_parser("init", help="write a protocol for a model and dataset split pinned at commits"))
    publishing.add_commands(sub)
    lockfile.add_arguments(sub.add_parser(
        "lock", help="write a resource lock (--resources LOCK.json) from a local model folder and data files"))
    return p


def _resources(args: argparse.Namespace, protocol: Protocol, pins_out: Path | None = None) -> Resources:
    if args.resources is not None:
        return resolve_local(args.resources, protocol.resources)
    return resolve_hub(protocol.resources, args.cache or default_cache(), pins_out=pins_out)


def smoke_verdict(result: dict[str, Any]) -> str:
    """The smoke test's last line: its rows' accuracy against chance, and a warning below it."""
    line = (f"smoke ok: {result['correct']} of {result['rows']} rows right, accuracy {result['accuracy']:.1%} "
            f"against chance {result['chance']:.1%} (a rough check on few rows)")
    if result["warning"] is not None:
        line += f"\nWARNING: {result['warning']}; check the protocol's label_map before the run."
    return line


def _shard(args: argparse.Namespace) -> ShardOptions | None:
    """How to shard the inference: on the cluster at --address or RAY_ADDRESS, else None (this process)."""
    address = cluster_address(args.address)
    if address is None:
        if args.worker_cpus is not None:
            raise JobError("--worker-cpus applies to a run on a cluster; pass --address (or set RAY_ADDRESS) too.")
        return None
    return ShardOptions(address=address, worker_cpus=args.worker_cpus,
                        lock=absolute_lock(args.resources) if args.resources is not None else None,
                        cache=str(args.cache) if args.cache is not None else None)


def _run_options(args: argparse.Namespace) -> RunOptions:
    """The typed options of `run`; the namespace goes no further than this module."""
    return RunOptions(out=args.out, signing_key=args.signing_key, ephemeral_key=args.ephemeral_key,
                      progress=not args.no_progress, threads=args.threads,
                      publication=Publication(
                          license=args.license, publisher=Party.parse("--publisher", args.publisher),
                          authors=tuple(Party.parse("--author", a) for a in args.author),
                          contact=args.contact),
                      shard=_shard(args))


def _reproduce(args: argparse.Namespace) -> int:
    """`reproduce`: the protocol comes from the bundle, the resources from the lock or the cache."""
    if (args.bundle / layout.SWEEP_PLAN).is_file():
        if args.sample is not None:
            raise JobError("--sample applies to one bundle; a sweep reproduces whole members, drawn with "
                           "--members K --seed S.")
        return reproduce_sweep(SweepReproduceOptions(
            sweep_dir=args.bundle, out=args.out, signing_key=args.signing_key, members=args.members,
            seed=args.seed, resources=args.resources, cache=args.cache, address=args.address))
    if args.members is not None:
        raise JobError("--members applies to a sweep directory; pass one, or drop it.")

    options = ReproduceOptions(bundle=args.bundle, out=args.out, signing_key=args.signing_key,
                               sample=args.sample, seed=args.seed, progress=not args.no_progress,
                               shard=_shard(args))
    return reproduce(options, lambda protocol: _resources(args, protocol))


def main(argv: list[str] | None = None) -> int:
    with tolerant_stdout():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    configure_process()  # process-wide memory settings, before any table or tensor exists
    args = _parser().parse_args(argv)
    try:
        if args.command in publishing.COMMANDS:
            return publishing.run(args)
        if args.command == "reproduce":
            return _reproduce(args)
        if args.command == "sweep":
            return run_sweep(SweepOptions(sweep=args.sweep, out=args.out, signing_key=args.signing_key,
                                          address=args.address, cache=args.cache, progress=not args.no_progress))
        if args.command == "init":
            return run_init(args)
        if args.command == "lock":
            return lockfile.run_lock(args)
        protocol = load_protocol(args.protocol)
        if args.command == "prepare":
            res = _resources(args, protocol, pins_out=args.pins_out)
            for repo in (res.model, res.dataset):
                for f in repo.files:
                    print(f"ok  {repo.repo_id}@{repo.revision[:12]} {f.path}  {f.size} bytes  "
                          f"sha256 {f.sha256}  ({f.pin} pin)")
            print(f"profile {res.profile}" + "".join(f"\n  - {d}" for d in res.deviations))
            return 0
        if args.command == "smoke":
            res = _resources(args, protocol)
            result = smoke(protocol, res)
            print(json.dumps(result, indent=2))
            print(smoke_verdict(result))
            return 0
        options = _run_options(args)  # before the resources are checked: a missing key fails fast
        return run_to_bundle(options, protocol, _resources(args, protocol))
    except (JobError, BundleError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a disk or permission failure while writing: no bundle was published
        where = f" at {exc.filename}" if exc.filename else ""
        what = {"reproduce": "attestation", "sweep": "partial member"}.get(args.command, "bundle")
        print(f"error: {exc.strerror or exc}{where}; check free space and permissions there and run again "
              f"(no {what} was written).", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.command == "sweep":
            print("interrupted: the members already published are kept; run the same command again to resume",
                  file=sys.stderr)
            return 130
        print(f"interrupted: no {'attestation' if args.command == 'reproduce' else 'bundle'} was written",
              file=sys.stderr)
        return 130
