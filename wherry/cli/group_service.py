"""The cluster side of `wherry groups`: its admin calls (confluent-kafka's AdminClient)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from wherry.cli.common import TRANSIENT_ERRORS, AdminService, kafka_error_code
from wherry.cli.group_model import MISSING, TP, CommandFailed, GroupView, MemberView, state_name
from wherry.cli.group_reset import LogOffsets, ResetSpec, Scenario


def _group_view(group_id: str, desc: Any) -> GroupView:
    coord = getattr(desc, "coordinator", None)
    coordinator = (f"{coord.host}:{coord.port}  ({coord.id_string})" if coord is not None
                   else MISSING)
    members = []
    for m in desc.members or ():
        tps = m.assignment.topic_partitions if m.assignment is not None else []
        members.append(MemberView(
            consumer_id=str(m.member_id), group_instance_id=m.group_instance_id or None,
            client_id=str(m.client_id), host=str(m.host),
            assignment=tuple(sorted((str(tp.topic), int(tp.partition)) for tp in tps)),
        ))
    return GroupView(group_id, state_name(getattr(desc, "state", None)),
                     str(desc.partition_assignor or ""), coordinator, tuple(members))


class GroupService(AdminService):
    """The admin calls of `wherry groups`."""

    CLIENT_ID = "wherry-groups"
    FAILURE = CommandFailed

    def list_groups(self, states: set[ConsumerGroupState] | None = None) -> list[tuple[str, str]]:
        """(group id, Kafka state name), sorted by group id."""
        kwargs: dict[str, Any] = {"request_timeout": self.timeout_s}
        if states:
            kwargs["states"] = states
        result = self._wait(self.admin.list_consumer_groups(**kwargs), "listGroups")
        if result.errors and not result.valid:
            err = result.errors[0]
            if err.code() in TRANSIENT_ERRORS:
                raise self._timed_out("listGroups", err.str())
            raise KafkaException(err)
        return sorted((str(g.group_id), state_name(getattr(g, "state", None)))
                      for g in result.valid)

    def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupView]:
        """Unknown groups come back Dead (as from a Kafka 3.9 broker)."""
        if not group_ids:
            return {}
        futs = self.admin.describe_consumer_groups(list(group_ids),
                                                   request_timeout=self.timeout_s)
        out = {}
        for group_id, fut in futs.items():
            try:
                out[group_id] = _group_view(group_id, self._wait(fut, "describeGroups"))
            except KafkaException as e:
                if kafka_error_code(e) != KafkaError.GROUP_ID_NOT_FOUND:
                    raise
                out[group_id] = GroupView(group_id, "Dead", "", MISSING, ())
        return out

    def committed_offsets(self, group_id: str) -> dict[TP, int]:
        futs = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=self.timeout_s)
        result = self._wait(futs[group_id], "listConsumerGroupOffsets")
        out = {}
        for tp in result.topic_partitions or ():
            if tp.error is None and tp.offset >= 0:
                out[(str(tp.topic), int(tp.partition))] = int(tp.offset)
        return out

    def log_offsets(self, partitions: Collection[TP], spec: OffsetSpec) -> dict[TP, int | None]:
        """ListOffsets for each partition; None where the broker has no answer."""
        if not partitions:
            return {}
        request = {TopicPartition(t, p): spec for t, p in partitions}
        futs = self.admin.list_offsets(request, request_timeout=self.timeout_s)
        out: dict[TP, int | None] = {}
        for tp, fut in futs.items():
            key = (str(tp.topic), int(tp.partition))
            try:
                out[key] = int(self._wait(fut, "listOffsets").offset)
            except KafkaException:
                out[key] = None
        return out

    def topic_partitions(self) -> dict[str, list[int]]:
        """Every topic's partition ids (a metadata request for all topics creates none)."""
        md = self.metadata("describeTopics")
        return {name: sorted(int(p) for p in t.partitions)
                for name, t in md.topics.items() if t.error is None}

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, BaseException | None]:
        futs = self.admin.delete_consumer_groups(list(group_ids),
                                                 request_timeout=self.timeout_s)
        out: dict[str, BaseException | None] = {}
        for group_id, fut in futs.items():
            try:
                self._wait(fut, "deleteConsumerGroups")
                out[group_id] = None
            except KafkaException as e:
                out[group_id] = e
        return out

    def alter_offsets(self, group_id: str, offsets: Mapping[TP, int]) -> None:
        if not offsets:
            return
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, off) for (t, p), off in sorted(offsets.items())])
        futs = self.admin.alter_consumer_group_offsets([request], request_timeout=self.timeout_s)
        result = self._wait(futs[group_id], "alterConsumerGroupOffsets")
        for tp in result.topic_partitions or ():
            if tp.error is not None:
                raise KafkaException(tp.error)

    def offsets_for_reset(self, spec: ResetSpec, partitions: Sequence[TP],
                          committed: Mapping[TP, int]) -> LogOffsets:
        """The log offsets a reset's scenario needs (`group_reset.plan_reset`)."""
        s = spec.scenario
        earliest = latest = by_time = {}
        if s in (Scenario.TO_EARLIEST, Scenario.TO_OFFSET, Scenario.SHIFT_BY,
                 Scenario.FROM_FILE):
            earliest = self.log_offsets(partitions, OffsetSpec.earliest())
        if s is not Scenario.TO_EARLIEST:
            latest = self.log_offsets(partitions, OffsetSpec.latest())
        if s in (Scenario.TO_DATETIME, Scenario.BY_DURATION):
            by_time = self.log_offsets(partitions, OffsetSpec.for_timestamp(spec.value))
        return LogOffsets(earliest, latest, committed, by_time)
