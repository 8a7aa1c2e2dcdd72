"""The controller's gauges (Kafka's KafkaController metrics), pure: computed when read from the
controller's context and partition state machine, never kept up to date on any hot path.

* OfflinePartitionsCount: partitions in OfflinePartition state, topics being deleted left out;
* PreferredReplicaImbalanceCount: partitions whose leader is not their preferred replica (the
  first of the target replicas while a reassignment runs), topics being deleted left out.

Kafka reports both from the active controller only (0 on every other broker); so do callers.
"""

from __future__ import annotations

from wherry.controller.context import ControllerContext
from wherry.controller.partition_state import PartitionState, PartitionStateMachine


def offline_partitions_count(ctx: ControllerContext, psm: PartitionStateMachine) -> int:
    return sum(
        1
        for tp in psm.partitions_in(PartitionState.OFFLINE)
        if not ctx.is_queued_for_deletion(tp.topic)
    )


def preferred_replica_imbalance_count(ctx: ControllerContext) -> int:
    count = 0
    for tp, st in ctx.states.items():
        if ctx.is_queued_for_deletion(tp.topic):
            continue
        target = ctx.reassignment(tp).target
        if target and st.leader != target[0]:
            count += 1
    return count
