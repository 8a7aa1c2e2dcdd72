"""The partition states the controller puts into its requests, from its context (pure).

Kafka's `addLeaderAndIsrRequestForBrokers` / `addUpdateMetadataRequestForBrokers`: every
LeaderAndIsr partition also goes, as UpdateMetadata, to every live broker; an UpdateMetadata
state names the partition's offline replicas (assigned replicas on brokers that are not live),
and a partition of a topic queued for deletion is sent with leader -2 (LeaderDuringDelete), so
brokers drop it from their metadata caches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from wherry.common.topic_partition import TopicPartition
from wherry.controller.channel import BrokerAddress
from wherry.controller.context import ControllerContext
from wherry.controller.request_batch import BrokerRequest, RequestBatch
from wherry.coordination.paths import BrokerRegistration
from wherry.protocol.interbroker import (
    LEADER_DURING_DELETE,
    NO_LEADER,
    SECURITY_PROTOCOL_IDS,
    BrokerEndpoint,
    LeaderAndIsrPartitionState,
    StopReplicaPartition,
    UpdateMetadataPartitionState,
)

NO_EPOCH = -1  # StopReplica without a known leader epoch (Kafka's LeaderAndIsr.NoEpoch)
EPOCH_DURING_DELETE = -2  # StopReplica that deletes (Kafka's LeaderAndIsr.EpochDuringDelete)


def leader_and_isr_state(
    ctx: ControllerContext, tp: TopicPartition, *, is_new: bool = False
) -> LeaderAndIsrPartitionState | None:
    st = ctx.states.get(tp)
    if st is None:
        return None
    return LeaderAndIsrPartitionState(
        tp.topic,
        tp.partition,
        st.controller_epoch,
        st.leader,
        st.leader_epoch,
        st.isr,
        st.zk_version,
        ctx.replicas(tp),
        is_new=is_new,
    )


def update_metadata_state(
    ctx: ControllerContext, tp: TopicPartition
) -> UpdateMetadataPartitionState:
    st = ctx.states.get(tp)
    replicas = ctx.replicas(tp)
    offline = ctx.offline_replicas(tp)
    deleting = ctx.is_queued_for_deletion(tp.topic)
    if st is None:  # a new partition no replica of which is alive yet
        return UpdateMetadataPartitionState(
            tp.topic,
            tp.partition,
            ctx.epoch,
            LEADER_DURING_DELETE if deleting else NO_LEADER,
            -1,
            (),
            -1,
            replicas,
            offline,
        )
    return UpdateMetadataPartitionState(
        tp.topic,
        tp.partition,
        st.controller_epoch,
        LEADER_DURING_DELETE if deleting else st.leader,
        st.leader_epoch,
        st.isr,
        st.zk_version,
        replicas,
        offline,
    )


def add_update_metadata(
    batch: RequestBatch,
    ctx: ControllerContext,
    brokers: Iterable[int],
    tps: Iterable[TopicPartition] = (),
) -> None:
    states = [update_metadata_state(ctx, tp) for tp in tps if ctx.replicas(tp)]
    batch.add_update_metadata(
        brokers,
        states,
        {
            s.topic_name: ctx.topic_ids[s.topic_name]
            for s in states
            if s.topic_name in ctx.topic_ids
        },
    )


def announcement(
    batch: RequestBatch, ctx: ControllerContext, brokers: Iterable[int]
) -> RequestBatch:
    """`batch` with an UpdateMetadata of every partition to `brokers`: sent on its own before
    any LeaderAndIsr to brokers that start or meet a new controller (as Kafka's onBrokerStartup
    and onControllerFailover; Kafka's failover one has no partitions), so a broker leading an
    internal partition already knows every partition (a transaction coordinator skips markers
    for partitions its cache lacks, as deleted)."""
    add_update_metadata(batch, ctx, brokers, ctx.all_partitions())
    return batch


def add_leader_and_isr(
    batch: RequestBatch,
    ctx: ControllerContext,
    brokers: Iterable[int],
    tp: TopicPartition,
    *,
    is_new: bool = False,
) -> None:
    """LeaderAndIsr for `tp` to `brokers`, and its UpdateMetadata to every live broker."""
    st = leader_and_isr_state(ctx, tp, is_new=is_new)
    if st is None:
        return
    batch.add_leader_and_isr(brokers, st, ctx.topic_ids.get(tp.topic))
    add_update_metadata(batch, ctx, ctx.live_brokers, [tp])


def add_stop_replica(
    batch: RequestBatch,
    ctx: ControllerContext,
    broker_id: int,
    tp: TopicPartition,
    *,
    delete: bool,
) -> None:
    """Kafka's leader epoch rule: -2 when deleting, else the current leader epoch (or -1)."""
    if delete:
        epoch = EPOCH_DURING_DELETE
    else:
        st = ctx.states.get(tp)
        epoch = NO_EPOCH if st is None else st.leader_epoch
    batch.add_stop_replica([broker_id], StopReplicaPartition(tp.topic, tp.partition, epoch, delete))


def live_broker_epochs(ctx: ControllerContext) -> dict[int, int]:
    return {b: reg.epoch for b, reg in ctx.live_brokers.items()}


def live_endpoints(ctx: ControllerContext) -> tuple[BrokerEndpoint, ...]:
    """Every endpoint of every live broker (UpdateMetadata lists them all)."""
    return tuple(
        BrokerEndpoint(
            r.broker_id,
            e.host,
            e.port,
            e.listener,
            SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0),
            r.rack,
        )
        for _, r in sorted(ctx.live_brokers.items())
        for e in r.endpoints
    )


def broker_addresses(
    brokers: Mapping[int, BrokerRegistration], listener: str | None = None
) -> dict[int, BrokerAddress]:
    """What `ControllerChannel.sync_brokers` takes, from the brokers' registrations: each
    broker's address on the inter-broker `listener`."""
    return {b: BrokerAddress(*r.address(listener), r.epoch) for b, r in sorted(brokers.items())}


def build_requests(
    batch: RequestBatch, ctx: ControllerContext, listener: str | None
) -> list[BrokerRequest]:
    """The batch's requests to the live brokers; LeaderAndIsr names leaders on `listener`."""
    return batch.build(live_broker_epochs(ctx), live_endpoints(ctx), leader_listener=listener)
