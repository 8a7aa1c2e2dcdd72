"""Cluster part 1's failover acceptance with real brokers.

In one process (`DevCluster`): every replica of a partition stops → leader −1 and the
partition offline in every live broker's metadata; a replica that was not the last ISR member
does not bring it back (clean election), the last ISR member does; with
``unclean.leader.election.enable=true`` any returning replica leads.

Across processes on ZooKeeper (`ZkCluster`): a topic deletion that cannot finish (a replica is
down) survives a kill -9 of the controller and completes once the replica returns, under the
new controller, whose brokers refuse requests carrying the old controller epoch.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.helpers import create_topic, zk_cluster
from tests.server.test_controller_requests_wire import send
from wherry.coordination import paths
from wherry.protocol.interbroker import LeaderAndIsrPartitionState, LeaderAndIsrRequest
from wherry.testing.cluster import DevCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

SESSION_TIMEOUT_MS = 4_000


def partition_view(c: DevCluster, broker: int, topic: str) -> object:
    return c.metadata(broker, [topic]).partitions(topic)[0]


def test_offline_partition_comes_back_with_its_last_isr_member(
    wherry_cluster: DevCluster,
) -> None:
    c = wherry_cluster
    controller = c.wait_for_controller()
    a, b = sorted({0, 1, 2} - {controller})  # the replicas; the controller stays up
    t = f"offline-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, t, [[a, b]])
    c.wait_for_topic(t, 1)

    c.stop_broker(a)
    assert wait_until(lambda: partition_view(c, controller, t).isr == (b,), 10)
    c.stop_broker(b)  # b is the last ISR member

    def offline() -> bool:
        p = partition_view(c, controller, t)
        return (
            p.leader == -1  # type: ignore[attr-defined]
            and p.error_code == ErrorCode.leader_not_available  # type: ignore[attr-defined]
            and set(p.offline_replicas) == {a, b}  # type: ignore[attr-defined]
        )

    assert wait_until(offline, 10), partition_view(c, controller, t)
    # A replica outside the ISR coming back does not lead (no unclean election by default).
    c.start_broker(a)
    assert wait_until(lambda: a in c.metadata(controller).brokers, 10)
    assert not wait_until(lambda: partition_view(c, controller, t).leader != -1, 2)  # type: ignore[attr-defined]
    # The last ISR member does.
    c.start_broker(b)
    assert wait_until(lambda: partition_view(c, controller, t).leader == b, 10)  # type: ignore[attr-defined]
    p = partition_view(c, controller, t)
    assert p.error_code == ErrorCode.none  # type: ignore[attr-defined]


def test_unclean_election_only_when_the_topic_allows_it(wherry_cluster: DevCluster) -> None:
    c = wherry_cluster
    controller = c.wait_for_controller()
    a, b = sorted({0, 1, 2} - {controller})
    t = f"unclean-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, t, [[a, b]], **{"unclean.leader.election.enable": "true"})
    c.wait_for_topic(t, 1)
    c.stop_broker(a)
    assert wait_until(lambda: partition_view(c, controller, t).isr == (b,), 10)
    c.stop_broker(b)
    assert wait_until(lambda: partition_view(c, controller, t).leader == -1, 10)  # type: ignore[attr-defined]
    c.start_broker(a)  # not in the ISR, but the topic allows an unclean election
    assert wait_until(lambda: partition_view(c, controller, t).leader == a, 10)  # type: ignore[attr-defined]
    assert partition_view(c, controller, t).isr == (a,)


# --- across processes, on ZooKeeper ---------------------------------------------------------


@pytest.mark.slow
def test_pending_deletion_completes_after_the_controller_is_killed(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    with zk_cluster(zookeeper, tmp_path, session_timeout_ms=SESSION_TIMEOUT_MS) as c:
        assert wait_until(lambda: c.controller() is not None, 10)
        old = c.controller()
        assert old is not None
        old_epoch = c.controller_epoch()
        replica = (old + 1) % 3
        third = ({0, 1, 2} - {old, replica}).pop()
        t = f"doomed-{uuid.uuid4().hex[:8]}"
        c.create_topic(t, {0: [replica, third]})
        assert wait_until(lambda: c.partition_state(t, 0) is not None, 10)

        # The replica dies; the deletion can't finish without it.
        c.kill(replica)
        assert wait_until(lambda: replica not in c.registered_brokers(), 10)
        c.zk().create(paths.delete_topic_path(t), b"", makepath=True)
        assert not wait_until(lambda: c.zk().exists(paths.topic_path(t)) is None, 2)

        # Kill the controller: the third broker takes over with a higher epoch.
        c.kill(old)
        assert wait_until(lambda: c.controller() == third, SESSION_TIMEOUT_MS / 1000 + 3)
        assert c.controller_epoch() > old_epoch

        # A request from the old controller's epoch is refused by the live broker.
        stale = LeaderAndIsrRequest(
            controller_id=old,
            controller_epoch=old_epoch,
            broker_epoch=-1,
            partition_states=(
                LeaderAndIsrPartitionState(
                    topic_name=t, partition_index=0, controller_epoch=old_epoch, leader=old,
                    leader_epoch=99, isr=(old,), partition_epoch=99, replicas=(old,),
                ),
            ),
            topic_ids={},
            live_leaders=(),
        )

        def refused() -> bool:
            resp = send(c.address(third), stale)
            return resp.error_code == ErrorCode.stale_controller_epoch

        assert wait_until(refused, 10)

        # The replica returns: the new controller finishes the deletion.
        c.start_broker(replica)
        assert wait_until(lambda: c.zk().exists(paths.topic_path(t)) is None, 20)
        assert wait_until(lambda: c.zk().exists(paths.delete_topic_path(t)) is None, 10)
        assert wait_until(lambda: t not in c.metadata(third, None).topics, 10)
        assert wait_until(lambda: not (tmp_path / f"broker-{replica}" / f"{t}-0").exists(), 10)
