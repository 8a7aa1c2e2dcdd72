"""`python -m wherry.sim`: run many seeds, print each failing seed with the command that
replays it.

    python -m wherry.sim --seeds 1000            # seeds 0..999
    python -m wherry.sim --seed 417 -v           # replay one seed, with its fault log
    python -m wherry.sim --seeds 500 --power-loss
    python -m wherry.sim --seeds 500 --controller model   # the model controller instead
    python -m wherry.sim --seeds 500 --no-operations      # faults only, no cluster operations
    python -m wherry.sim --seeds 500 --transactions       # transactional producers too
    python -m wherry.sim --seeds 500 --shares             # share-group schedules (KIP-932)
    python -m wherry.sim --seeds 500 --consumer-groups    # KIP-848 consumer groups too
    python -m wherry.sim --seeds 500 --share-consumers    # share consumers (KIP-932) too
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from multiprocessing import Pool
from typing import Any

from wherry.sim.world import SimOptions, SimResult, run_seed

# The command line's switches: (option name, `SimOptions` field, the value it sets).
SWITCHES: tuple[tuple[str, str, bool], ...] = (
    ("--power-loss", "power_loss", True),
    ("--no-faults", "faults", False),
    ("--unclean-election", "unclean_election", True),
    ("--no-operations", "operations", False),
    ("--careless-reassign", "reassign_keep_in_sync", False),
    ("--transactions", "transactions", True),
    ("--consumer-groups", "consumer_groups", True),
    ("--share-consumers", "share_consumers", True),
)
# Its options with a value: (option name, `SimOptions` field).
VALUES: tuple[tuple[str, str], ...] = (
    ("--duration-ms", "duration_ms"),
    ("--brokers", "brokers"),
    ("--controller", "controller"),
)


def _dest(option: str) -> str:
    return option[2:].replace("-", "_")


def _options(args: argparse.Namespace) -> SimOptions:
    changes: dict[str, Any] = {
        name: value for option, name, value in SWITCHES if getattr(args, _dest(option))
    }
    for option, name in VALUES:
        given = getattr(args, _dest(option))
        if given is not None:
            changes[name] = given
    return replace(SimOptions(), **changes)


def _run(job: tuple[int, SimOptions]) -> SimResult:
    logging.disable(logging.CRITICAL)
    return run_seed(*job)


def _report(r: SimResult, args: argparse.Namespace, failed: list[SimResult]) -> None:
    """A seed's lines (its faults and outcome with `-v`; a failure's replay command always),
    written out at once; a failed seed joins `failed`."""
    if args.verbose:
        for line in r.faults:
            print(f"  seed {r.seed}: {line}")
        print(
            f"seed {r.seed}: {'ok' if r.ok else 'FAILED'}: {r.acks} acks of {r.produced} "
            f"produced, {r.consumed} batches consumed, {r.steps} steps, {r.sim_ms} ms "
            "simulated"
        )
    if not r.ok:
        failed.append(r)
        print(f"seed {r.seed} FAILED: {r.violation or r.error}")
        print(f"  replay: {_replay_command(r.seed, args)}")
    sys.stdout.flush()


def _replay_command(seed: int, args: argparse.Namespace) -> str:
    extra = "".join(f" {option}" for option, _, _ in SWITCHES if getattr(args, _dest(option)))
    for option, _ in VALUES:
        given = getattr(args, _dest(option))
        if given is not None:
            extra += f" {option} {given}"
    return f"python -m wherry.sim --seed {seed}{extra} -v"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m wherry.sim", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=100, help="run seeds first..first+N-1")
    p.add_argument("--first", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--seed", type=int, default=None, help="run only this seed")
    p.add_argument("--power-loss", action="store_true", help="crashes lose unflushed bytes")
    p.add_argument("--duration-ms", type=int, default=None, help="simulated time with faults")
    p.add_argument("--brokers", type=int, default=None)
    p.add_argument("--no-faults", action="store_true")
    p.add_argument(
        "--unclean-election",
        action="store_true",
        help="let the controller elect out-of-sync replicas (should make seeds fail)",
    )
    p.add_argument(
        "--controller",
        choices=("real", "model"),
        default=None,
        help="the real controller on an embedded coordinator, or the model built from its "
        f"pure rules (default: {SimOptions().controller})",
    )
    p.add_argument(
        "--no-operations",
        action="store_true",
        help="no reassignments, elections, controlled shutdowns or topic creation and deletion "
        "(faults only)",
    )
    p.add_argument(
        "--careless-reassign",
        action="store_true",
        help="reassignment targets need not keep an in-sync replica",
    )
    p.add_argument(
        "--transactions",
        action="store_true",
        help="transactional producers, coordinator crashes and the read_committed invariant",
    )
    p.add_argument(
        "--shares",
        action="store_true",
        help="share-group schedules instead (sim/shares.py): share-partition and share "
        "coordinator failovers, lock expiry, delivery limits",
    )
    p.add_argument(
        "--consumer-groups",
        action="store_true",
        help="KIP-848 consumer groups, coordinator crashes and the rebuilt-group invariant",
    )
    p.add_argument(
        "--share-consumers",
        action="store_true",
        help="share consumers (KIP-932) heartbeating, fetching and acknowledging in request "
        "frames through the failovers",
    )
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("-v", "--verbose", action="store_true", help="print the fault log")
    args = p.parse_args(argv)
    if args.shares:
        return _shares(args)
    options = _options(args)
    if (refused := options.refusal()) is not None:
        p.error(refused)
    seeds = (
        [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    )
    started = time.monotonic()
    failed: list[SimResult] = []
    acks = txns = committed = reads = 0
    jobs = [(s, options) for s in seeds]
    results: list[SimResult] = []
    with contextlib.ExitStack() as stack:
        if args.jobs > 1:
            pool = stack.enter_context(Pool(args.jobs))
            arriving: Iterator[SimResult] = pool.imap(_run, jobs)
        else:
            arriving = map(_run, jobs)
        for r in arriving:  # each seed's lines as soon as it ends: a long sweep shows failures
            results.append(r)
            _report(r, args, failed)
    for r in results:
        acks += r.acks
        txns += r.transactions
        committed += r.committed
        reads += r.txn_reads
    took = time.monotonic() - started
    print(
        f"{len(seeds)} seeds{' (power loss)' if args.power_loss else ''}, "
        f"{options.controller} controller: {len(failed)} failed, "
        f"{acks} acknowledged batches checked"
        + (
            f", {txns} transactions ({committed} committed), {reads} read_committed reads"
            if args.transactions
            else ""
        )
        + (
            f", {sum(r.share_deliveries for r in results)} share deliveries "
            f"({sum(r.share_accepts for r in results)} accepted) checked"
            if args.share_consumers
            else ""
        )
        + f", {took:.1f} s ({len(seeds) / took:.2f} seeds/s)"
    )
    return 1 if failed else 0


def _shares(args: argparse.Namespace) -> int:
    from wherry.sim.shares import run_share_seed

    seeds = (
        [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    )
    started = time.monotonic()
    failed = 0
    deliveries = failovers = reloads = drops = 0
    for seed in seeds:
        r = run_share_seed(seed)
        deliveries += r.deliveries
        failovers += r.failovers
        reloads += r.group_reloads
        drops += r.connection_drops
        if args.verbose:
            for line in r.log:
                print(f"  seed {seed}: {line}")
        if not r.ok:
            failed += 1
            print(f"seed {seed} FAILED: {r.violation}")
            print(f"  replay: python -m wherry.sim --shares --seed {seed} -v")
    print(
        f"{len(seeds)} share seeds: {failed} failed, {deliveries} deliveries, "
        f"{failovers} leader failovers, {reloads} group coordinator failovers, "
        f"{drops} connection drops, {time.monotonic() - started:.1f} s"
    )
    return 1 if failed else 0
