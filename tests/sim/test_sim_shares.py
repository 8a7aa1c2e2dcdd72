"""The share-group simulation (`python -m wherry.sim --shares`): seeded schedules of fetches,
acknowledgements, lock expiries, crashes and share-partition leader / share coordinator
failovers on the real share-partition state machine and coordinator store; every seed must
hold its invariants (no record to two members at once, no accepted record delivered again,
the delivery limit, no record lost)."""

from __future__ import annotations

from wherry.sim.runner import main
from wherry.sim.shares import run_share_seed


def test_share_seeds_hold() -> None:
    results = [run_share_seed(s) for s in range(150)]
    failed = [(r.seed, r.violation) for r in results if not r.ok]
    assert not failed
    assert sum(r.failovers for r in results) > 500  # failovers happened
    assert sum(r.deliveries for r in results) > 10_000


def test_share_cli(capsys: object) -> None:
    assert main(["--shares", "--seeds", "5"]) == 0
