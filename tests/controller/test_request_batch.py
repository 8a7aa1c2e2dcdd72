"""RequestBatch (Kafka's ControllerBrokerRequestBatch): merging and building, pure."""

from __future__ import annotations

import uuid

from wherry.controller.request_batch import BrokerRequest, RequestBatch
from wherry.protocol.interbroker import (
    LEADER_DURING_DELETE,
    BrokerEndpoint,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaPartition,
    StopReplicaRequest,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)

T1, T2 = uuid.uuid4(), uuid.uuid4()
ENDPOINTS = (BrokerEndpoint(1, "h1", 9091), BrokerEndpoint(2, "h2", 9092),
             BrokerEndpoint(3, "h3", 9093))
LIVE = {1: 101, 2: 102, 3: 103}


def lai(topic: str, p: int, leader: int, epoch: int, *, is_new: bool = False
        ) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState(topic, p, 7, leader, epoch, (1, 2), epoch, (1, 2),
                                      is_new=is_new)


def um(topic: str, p: int, leader: int) -> UpdateMetadataPartitionState:
    return UpdateMetadataPartitionState(topic, p, 7, leader, 0, (1, 2), 0, (1, 2))


def test_empty_batch_builds_nothing() -> None:
    b = RequestBatch(1, 7)
    assert b.is_empty() and b.build(LIVE, ENDPOINTS) == []


def test_one_request_per_broker_per_kind_in_kafka_order() -> None:
    b = RequestBatch(1, 7)
    b.add_stop_replica([3], StopReplicaPartition("b", 0, 4, False))
    b.add_update_metadata([3, 1, 2], [um("a", 0, 1)], {"a": T1})
    b.add_leader_and_isr([2, 1], lai("a", 0, 1, 0), T1)
    b.add_leader_and_isr([2, 1], lai("a", 1, 2, 0), T1)
    b.add_leader_and_isr([2], lai("b", 0, 2, 3), T2)
    b.add_update_metadata([1], [um("a", 1, 2)])
    out = b.build(LIVE, ENDPOINTS)
    assert [(r.broker_id, type(r.body).__name__) for r in out] == [
        (1, "LeaderAndIsrRequest"), (2, "LeaderAndIsrRequest"),
        (1, "UpdateMetadataRequest"), (2, "UpdateMetadataRequest"),
        (3, "UpdateMetadataRequest"), (3, "StopReplicaRequest")]
    to1 = out[0].body
    assert isinstance(to1, LeaderAndIsrRequest)
    assert (to1.controller_id, to1.controller_epoch, to1.broker_epoch) == (1, 7, 101)
    assert [(s.topic_name, s.partition_index) for s in to1.partition_states] == [("a", 0),
                                                                                ("a", 1)]
    assert to1.topic_ids == {"a": T1}
    assert {e.broker_id for e in to1.live_leaders} == {1, 2}  # only the leaders named
    to2 = out[1].body
    assert isinstance(to2, LeaderAndIsrRequest) and to2.topic_ids == {"a": T1, "b": T2}
    assert to2.broker_epoch == 102
    # UpdateMetadata states are shared by every broker that gets one
    for r in out[2:5]:
        assert isinstance(r.body, UpdateMetadataRequest)
        assert [(s.topic_name, s.partition_index) for s in r.body.partition_states] == [
            ("a", 0), ("a", 1)]
        assert r.body.live_brokers == ENDPOINTS and r.body.topic_ids == {"a": T1}
        assert r.body.broker_epoch == LIVE[r.broker_id]
    assert out[5] == BrokerRequest(3, StopReplicaRequest(1, 7, 103, (
        StopReplicaPartition("b", 0, 4, False),)))


def test_later_states_win_but_is_new_and_delete_stick() -> None:
    b = RequestBatch(1, 7)
    b.add_leader_and_isr([1], lai("a", 0, 1, 0, is_new=True))
    b.add_leader_and_isr([1], lai("a", 0, 2, 1))
    b.add_stop_replica([2], StopReplicaPartition("a", 0, 1, True))
    b.add_stop_replica([2], StopReplicaPartition("a", 0, 2, False))
    b.add_update_metadata([1], [um("a", 0, 1)])
    b.add_update_metadata([], [um("a", 0, LEADER_DURING_DELETE)])
    out = b.build(LIVE, ENDPOINTS)
    lai_req, um_req, stop_req = (r.body for r in out)
    assert isinstance(lai_req, LeaderAndIsrRequest)
    (st,) = lai_req.partition_states
    assert (st.leader, st.leader_epoch, st.is_new) == (2, 1, True)
    assert isinstance(um_req, UpdateMetadataRequest)
    assert [s.leader for s in um_req.partition_states] == [LEADER_DURING_DELETE]
    assert isinstance(stop_req, StopReplicaRequest)
    assert stop_req.partitions == (StopReplicaPartition("a", 0, 2, True),)


def test_only_live_brokers_get_requests() -> None:
    b = RequestBatch(1, 7)
    b.add_leader_and_isr([1, 4, -1], lai("a", 0, 1, 0))
    b.add_update_metadata([1, 4])  # no partition states: just the live brokers
    b.add_stop_replica([4], StopReplicaPartition("a", 0, 0, True))
    out = b.build({1: 101}, ENDPOINTS[:1])
    assert [(r.broker_id, type(r.body).__name__) for r in out] == [
        (1, "LeaderAndIsrRequest"), (1, "UpdateMetadataRequest")]
    um_req = out[1].body
    assert isinstance(um_req, UpdateMetadataRequest)
    assert um_req.partition_states == () and um_req.live_brokers == ENDPOINTS[:1]


def test_metadata_already_sent_in_the_event_is_left_out() -> None:
    """A controller failover announces every partition, then sends the elected leaders, then
    the ISR changes: each later UpdateMetadata carries only states the brokers were not sent
    yet in the event (equal states are dropped, changed ones kept, and remembered)."""
    sent: dict[tuple[str, int], UpdateMetadataPartitionState] = {}
    first = RequestBatch(1, 7)
    first.add_update_metadata([1, 2, 3], [um("a", 0, 1), um("a", 1, 2), um("a", 2, 3)])
    first.drop_metadata_sent(sent, LIVE)
    assert len(sent) == 3  # nothing sent before: everything goes, and is remembered
    second = RequestBatch(1, 7)
    second.add_update_metadata([1, 2, 3], [um("a", 0, 1), um("a", 1, 1), um("a", 2, 3)])
    second.add_leader_and_isr([1], lai("a", 1, 1, 1))
    second.drop_metadata_sent(sent, LIVE)
    out = second.build(LIVE, ENDPOINTS)
    ums = [r.body for r in out if isinstance(r.body, UpdateMetadataRequest)]
    assert len(ums) == 3  # every broker still gets one (the live brokers), and the LAI stays
    assert all([(s.partition_index, s.leader) for s in b.partition_states] == [(1, 1)]
               for b in ums)
    assert sent[("a", 1)].leader == 1
    third = RequestBatch(1, 7)  # to a broker the earlier ones did not reach: all kept
    third.add_update_metadata([1, 4], [um("a", 0, 1)])
    third.drop_metadata_sent(sent, LIVE)
    assert list(third.update_metadata_states) == [("a", 0)]
    fourth = RequestBatch(1, 7)  # nothing new for anyone: no UpdateMetadata at all
    fourth.add_update_metadata([1, 2, 3], [um("a", 0, 1), um("a", 2, 3)])
    fourth.drop_metadata_sent(sent, LIVE)
    assert fourth.is_empty() and fourth.build(LIVE, ENDPOINTS) == []


def test_a_broker_marked_full_gets_a_full_leader_and_isr_even_with_no_partition() -> None:
    b = RequestBatch(1, 7)
    b.add_leader_and_isr([1, 2], lai("a", 0, 1, 3), T1)
    b.mark_full([2, 3])
    assert not b.is_empty()
    got = {r.broker_id: r.body for r in b.build(LIVE, ENDPOINTS)}
    assert isinstance(got[1], LeaderAndIsrRequest) and not got[1].is_full
    assert isinstance(got[2], LeaderAndIsrRequest) and got[2].is_full
    assert [s.topic_name for s in got[2].partition_states] == ["a"]
    # Broker 3 is a replica of nothing: told so, in a FULL request with no partitions.
    assert isinstance(got[3], LeaderAndIsrRequest) and got[3].is_full
    assert got[3].partition_states == ()
    # A broker not live when the batch is built gets nothing.
    assert [r.broker_id for r in b.build({1: 101}, ENDPOINTS)] == [1]
