"""A controller lost after any one of its store writes while it cancels a reassignment: the
next controller leaves every replica with the stored replica list and leader epoch.

A broker ignores a LeaderAndIsr at the leader epoch it already has (as Kafka's does), so a
stored replica list that no leader epoch bump delivered stays unknown to the replicas for
ever: the leader keeps counting a removed replica as one of its own.
"""

from __future__ import annotations

import asyncio
from typing import Any

from controller_harness import Cluster, EmbeddedBackend, async_test

from tests.helpers import wait_until_async as wait_until
from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.coordination.store import MetadataStore

TP = TopicPartition("t", 0)
WRITES = ("create", "set", "delete", "multi")


class LostAfterWrites:
    """A controller's store session that stops answering once `after` writes went through
    after `arm` (the controller's process lost there: what it wrote stays, nothing more is
    written or sent)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self.after: int | None = None
        self.done = 0
        self.lost = asyncio.Event()

    def arm(self, after: int) -> None:
        self.after, self.done = after, 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in WRITES:
            return attr

        async def write(*args: Any, **kwargs: Any) -> Any:
            if self.lost.is_set():
                await asyncio.Event().wait()  # never again
            out = await attr(*args, **kwargs)
            if self.after is not None:
                self.done += 1
                if self.done >= self.after:
                    self.lost.set()
                    await asyncio.Event().wait()
            return out

        return write


async def assignment(c: Cluster) -> paths.TopicAssignment:
    data, _ = await c.store.get(paths.topic_path("t"))
    return paths.TopicAssignment.from_json(data)


async def cancel_lost_after(after: int) -> bool:
    """Cancel a reassignment of t-0 from [2, 3] to [2, 3, 4] on controller 1, whose process is
    lost after `after` store writes of the cancel; then check what the next controller leaves.
    False when the cancel finished in fewer writes (nothing was lost)."""
    async with Cluster(EmbeddedBackend()) as c:
        losing: LostAfterWrites | None = None

        def losable(store: MetadataStore) -> MetadataStore:
            nonlocal losing
            losing = LostAfterWrites(store)
            return losing  # type: ignore[return-value]

        first = await c.start(1, controller_store=losable)
        assert losing is not None
        await c.start_all(2, 3, 4)
        assert (await c.wait_for_controller()).broker_id == 1
        await c.create_topic("t", {0: [2, 3]})
        await c.settle()
        # The stand-ins never fetch: the ISR does not grow and the reassignment stays running.
        assert await first.controller.alter_partition_reassignments({TP: [2, 3, 4]}) == {
            TP: (0, None)
        }
        await c.settle()
        leader = c.nodes[2].broker
        assert leader.partitions[TP].replicas == (2, 3, 4)

        losing.arm(after)
        cancel = asyncio.create_task(first.controller.alter_partition_reassignments({TP: None}))
        lost = asyncio.create_task(losing.lost.wait())
        await asyncio.wait([cancel, lost], return_when=asyncio.FIRST_COMPLETED, timeout=10)
        if cancel.done():
            lost.cancel()
            return False
        await c.kill(1)
        await cancel  # a stopped controller's event ends: NOT_CONTROLLER to the client
        lost.cancel()
        await c.wait_for_controller()
        await c.settle()

        stored = await assignment(c)
        replicas = tuple(stored.partitions[0])
        state = await c.state("t", 0)
        assert state is not None

        def agreed() -> bool:
            return all(
                TP in c.nodes[b].broker.partitions
                and c.nodes[b].broker.partitions[TP].replicas == replicas
                and c.nodes[b].broker.partitions[TP].leader_epoch == state.leader_epoch
                for b in replicas
            )

        def seen() -> object:
            held = {b: c.nodes[b].broker.partitions.get(TP) for b in replicas}
            return after, replicas, state, held

        await wait_until(agreed, 5, what=seen)
        return True


@async_test
async def test_a_controller_lost_after_any_write_of_a_cancel_leaves_the_replicas_told() -> None:
    after = 1
    while await cancel_lost_after(after):
        after += 1
    assert after > 1  # the cancel writes to the store at all
