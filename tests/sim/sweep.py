"""Seed sweeps for the simulation tests: a failing seed's report, and a sweep cut into chunks."""

from __future__ import annotations

from wherry.sim.world import SimOptions, SimResult, run_seed

# A sweep runs as chunks of this many seeds, one test each: a chunk stays well inside the
# per-test timeout on a slow machine, and a timeout names the chunk rather than a whole sweep.
CHUNK = 50


def describe(r: SimResult, flags: str = "") -> str:
    """The seed, what failed, the command that replays it and the last faults before it."""
    return (
        f"seed {r.seed}: {r.violation or r.error}\n"
        f"replay: python -m wherry.sim --seed {r.seed}{flags} -v\n" + "\n".join(r.faults[-20:])
    )


def chunks(first: int, count: int) -> list[range]:
    """Seeds first..first+count-1 in ranges of at most CHUNK seeds."""
    end = first + count
    return [range(s, min(s + CHUNK, end)) for s in range(first, end, CHUNK)]


def sweep(seeds: range, options: SimOptions, flags: str = "") -> None:
    """Run every seed; fail naming each seed that broke an invariant or crashed."""
    failed = [describe(r, flags) for s in seeds if not (r := run_seed(s, options)).ok]
    assert not failed, "\n\n".join(failed)
