"""AlterPartition to a controller that resigns while the request waits on its queue (its
session expired, or a fenced write failed) answers NOT_CONTROLLER, as Kafka does, never
UNKNOWN_SERVER_ERROR; the leader then retries with the next controller. Real stores (embedded
and a real ZooKeeper), stand-in brokers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from controller_harness import Backend, Cluster, EmbeddedBackend, Node, async_test, wait_until
from kio.schema.errors import ErrorCode
from test_alter_partition import request, three_brokers, zk_version

from wherry.controller.alter_partition import unanswered_response
from wherry.coordination import paths

NewBackend = Callable[[], Backend]


async def _queued_behind_a_held_event(ctl: Node, body: Any
                                      ) -> tuple[asyncio.Event, asyncio.Task[dict[str, Any]]]:
    """The AlterPartition, queued behind an event that runs until the returned flag is set."""
    release, started = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        started.set()
        await release.wait()

    asyncio.get_running_loop().create_task(ctl.controller.submit(hold))
    await asyncio.wait_for(started.wait(), 10)
    pending = asyncio.get_running_loop().create_task(ctl.controller.alter_partition(body))
    await asyncio.sleep(0.05)
    assert not pending.done()
    return release, pending


def test_the_unanswered_response_says_who_can_answer() -> None:
    assert unanswered_response(still_active=False)["error_code"] == ErrorCode.not_controller
    assert unanswered_response(still_active=True)["error_code"] == ErrorCode.unknown_server_error


@async_test
async def test_a_session_expiry_under_an_alter_partition_answers_not_controller(
    new_backend: NewBackend,
) -> None:
    backend = new_backend()
    async with Cluster(backend) as c:
        ctl, tid = await three_brokers(c)
        v0 = await zk_version(c)
        body = request(c, tid, isr=(1, 2), leader_epoch=0, partition_epoch=v0)
        release, pending = await _queued_behind_a_held_event(ctl, body)
        await backend.expire(ctl.store)
        release.set()
        resp = await asyncio.wait_for(pending, 30)
        assert resp["error_code"] == ErrorCode.not_controller, resp
        await wait_until(lambda: not ctl.controller.active)
        # Asked again while resigned: NOT_CONTROLLER at once.
        again = await asyncio.wait_for(ctl.controller.alter_partition(body), 10)
        assert again["error_code"] == ErrorCode.not_controller
        st = await c.state("t", 0)
        assert st is not None and st.isr != [1, 2]  # not written (the new controller moved
        # leadership off broker 1, whose session went with the controller's)


@async_test
async def test_a_fenced_write_under_an_alter_partition_answers_not_controller() -> None:
    async with Cluster(EmbeddedBackend()) as c:
        ctl, tid = await three_brokers(c)
        v0 = await zk_version(c)
        body = request(c, tid, isr=(1, 2), leader_epoch=0, partition_epoch=v0)
        release, pending = await _queued_behind_a_held_event(ctl, body)
        # Another controller bumped the epoch: the ISR write must fail, and ours resigns.
        data, stat = await c.store.get(paths.CONTROLLER_EPOCH)
        await c.store.set(paths.CONTROLLER_EPOCH, data, version=stat.version)
        release.set()
        resp = await asyncio.wait_for(pending, 30)
        assert resp["error_code"] == ErrorCode.not_controller, resp
        st = await c.state("t", 0)
        assert st is not None and st.isr == [1, 2, 3]
