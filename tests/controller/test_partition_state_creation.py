"""The controller creates new partitions' state nodes a hundred partitions to a store
transaction (the embedded store makes every transaction durable on its own, so three
transactions per partition made a CreateTopics of hundreds of partitions wait on as many
fsyncs); nodes that exist already (added partitions, a creation a failed-over controller began)
fall back to one partition at a time, with the same outcome."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable

from controller_harness import Backend, Cluster, EmbeddedBackend, async_test

from wherry.controller.assignment import assign_replicas
from wherry.coordination import paths
from wherry.coordination.store import CreateOp, MultiOp

NewBackend = Callable[[], Backend]


async def create_topics_at_once(
    c: Cluster, topics: dict[str, dict[int, list[int]]], *, more: tuple[MultiOp, ...] = ()
) -> None:
    """Every topic's config and assignment nodes (and `more`) in ONE transaction: the
    controller sees them all in one topic-change event."""
    ops: list[MultiOp] = []
    for name, assignment in topics.items():
        ops.append(CreateOp(paths.topic_config_path(name), paths.encode_config({})))
        ops.append(
            CreateOp(
                paths.topic_path(name),
                paths.TopicAssignment(uuid.uuid4(), assignment).to_json(),
            )
        )
    await c.store.multi([*ops, *more])


async def wait_for_states(c: Cluster, topics: dict[str, dict[int, list[int]]]) -> None:
    missing: list[tuple[str, int]] = []
    for _ in range(300):
        missing = [
            (name, p)
            for name, assignment in topics.items()
            for p in assignment
            if await c.state(name, p) is None
        ]
        if not missing:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no state for {len(missing)} partitions, e.g. {missing[:5]}")


async def check_states(c: Cluster, topics: dict[str, dict[int, list[int]]]) -> None:
    epoch = (await c.wait_for_controller()).controller.ctx.epoch
    for name, assignment in topics.items():
        for p, replicas in assignment.items():
            st = await c.state(name, p)
            assert st is not None, (name, p)
            assert st.leader == replicas[0] and sorted(st.isr) == sorted(replicas), (name, p, st)
            assert st.leader_epoch == 0 and st.controller_epoch == epoch


def assignments(names: list[str], partitions: int, seed: int) -> dict[str, dict[int, list[int]]]:
    rng = random.Random(seed)
    return {n: assign_replicas([1, 2, 3], partitions, 3, rng=rng) for n in names}


@async_test
async def test_new_topics_states_created_in_groups_and_one_by_one(
    new_backend: NewBackend,
) -> None:
    async with Cluster(new_backend()) as c:
        await c.start_all(1, 2, 3)
        await c.wait_for_controller()
        # 40 topics x 4, a topic of 250 partitions (it spans three groups; its `partitions`
        # node goes with the first), and one whose `partitions` node is there already.
        topics = assignments([f"t{i}" for i in range(40)], 4, 1)
        topics |= assignments(["wide"], 250, 2)
        topics |= assignments(["half"], 6, 3)
        there = (
            CreateOp(paths.topic_partitions_path("half"), b""),
            CreateOp(paths.partition_path("half", 0), b""),
        )
        await create_topics_at_once(c, topics, more=there)
        await wait_for_states(c, topics)
        await check_states(c, topics)
        await c.settle()
        for b in (1, 2, 3):
            hosted = c.nodes[b].broker.partitions
            assert len(hosted) == sum(len(a) for a in topics.values()), b
            assert not c.nodes[b].broker.rejected


@async_test
async def test_new_partitions_cost_few_store_transactions() -> None:
    backend = EmbeddedBackend()
    async with Cluster(backend) as c:
        await c.start_all(1, 2, 3)
        await c.wait_for_controller()
        await c.settle()
        topics = assignments([f"many{i}" for i in range(50)], 4, 4)  # 200 partitions
        before = backend.coordinator.last_zxid
        await create_topics_at_once(c, topics)
        await wait_for_states(c, topics)
        await c.settle()
        await check_states(c, topics)
        transactions = backend.coordinator.last_zxid - before - 1  # less the test's own
        # Two groups of 100 partitions (it was three transactions per partition: 600).
        assert transactions <= 10, transactions
