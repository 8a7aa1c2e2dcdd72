"""The share-group simulation (`python -m wherry.sim --shares`): seeded schedules of fetches,
acknowledgements, lock expiries, crashes and share-partition leader / share coordinator
failovers on the real share-partition state machine and coordinator store, membership
written to and replayed from its `__consumer_offsets` records across group coordinator
failovers, connection drops; every seed must hold its invariants (no record to two members at
once, no accepted record delivered again, the delivery limit, no record lost, members keep
their epochs across failovers, a dropped session's records available at once)."""

from __future__ import annotations

from wherry.sim.runner import main
from wherry.sim.shares import run_share_seed


def test_share_seeds_hold() -> None:
    results = [run_share_seed(s) for s in range(150)]
    failed = [(r.seed, r.violation) for r in results if not r.ok]
    assert not failed
    assert sum(r.failovers for r in results) > 500  # failovers happened
    assert sum(r.deliveries for r in results) > 10_000
    assert sum(r.group_reloads for r in results) > 300  # membership replayed from its records
    assert sum(r.connection_drops for r in results) > 300


def test_share_cli(capsys: object) -> None:
    assert main(["--shares", "--seeds", "5"]) == 0
