"""The followers' `LeaderEndpoint` over the Kafka wire protocol (Kafka's
RemoteLeaderEndPoint): Fetch v12 in a KIP-227 incremental session (`FollowerFetchSession`,
Kafka's FetchSessionHandler), OffsetForLeaderEpoch v4 and ListOffsets v4, through
`outbound.RequestClient`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.outbound import RequestClient
from wherry.outbound.buffered import BufferedConnection
from wherry.outbound.connection import Connect
from wherry.outbound.security import PLAINTEXT, ClientSecurity
from wherry.protocol.fetch_request import VERSION as FETCH_VERSION
from wherry.protocol.fetch_request import PartitionFields, encode_fetch_v12
from wherry.protocol.fetch_response import FetchAnswer, decode_fetch_v12_response
from wherry.replication.fetcher import (
    EARLIEST_TIMESTAMP,
    FETCH_KEY,
    LATEST_TIMESTAMP,
    LIST_OFFSETS_KEY,
    LIST_OFFSETS_VERSION,
    OFFSET_FOR_LEADER_EPOCH_KEY,
    OFFSET_FOR_LEADER_EPOCH_VERSION,
    EpochAnswer,
    FetchedPartition,
    FetcherConfig,
    FetchLimits,
    FetchPosition,
    LogOffsets,
)
from wherry.replication.truncation import EpochEndOffset

__all__ = ["FollowerFetchSession", "NetworkLeaderEndpoint", "socket_connect"]


def socket_connect(
    host: str, port: int, config: FetcherConfig, security: ClientSecurity = PLAINTEXT
) -> Connect:
    """A follower's connection to its leader at `host:port`: every request bounded by
    `replica.socket.timeout.ms`, each answer received into one buffer (records not copied)."""
    return BufferedConnection(
        host,
        port,
        connect_timeout_s=config.socket_timeout_ms / 1000,
        request_timeout_s=config.socket_timeout_ms / 1000,
        max_response_bytes=max(config.response_max_bytes * 2, 100 * 1024 * 1024),
        security=security,
    ).connect


# --- the Kafka-protocol endpoint --------------------------------------------------------------
class FollowerFetchSession:
    """The follower's side of a KIP-227 fetch session (Kafka's FetchSessionHandler): the
    first request is full with epoch 0; once the leader answers with a session id, requests
    carry only the partitions whose position changed and forget the ones no longer fetched."""

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = 0  # INITIAL_EPOCH: ask for a session
        self._sent: Mapping[TopicPartition, FetchPosition] = {}
        self._pending: Mapping[TopicPartition, FetchPosition] | None = None

    def build(
        self, partitions: Mapping[TopicPartition, FetchPosition]
    ) -> tuple[Mapping[TopicPartition, FetchPosition], list[TopicPartition]]:
        """(partitions to name in the request, partitions to forget)."""
        self._pending = partitions
        if self.session_id == 0:
            return partitions, []
        sent = self._sent
        if partitions is sent:
            return {}, []  # the same positions as the last answered request: nothing to say
        changed = {
            tp: pos
            for tp, pos in partitions.items()
            if (prev := sent.get(tp)) is not pos and prev != pos
        }
        forgotten = [tp for tp in sent if tp not in partitions]
        return changed, forgotten

    def answered(self, session_id: int, partitions: Mapping[TopicPartition, FetchPosition]) -> None:
        if session_id == 0:  # no session kept (e.g. the leader's cache is full)
            self.reset()
            return
        if session_id != self.session_id:
            self.session_id = session_id
            self.epoch = 0
        self.epoch = 1 if self.epoch >= 0x7FFFFFFF else self.epoch + 1
        self._sent = self._pending if self._pending is not None else partitions
        self._pending = None

    def reset(self) -> None:
        """Start over with a full request (after an error or a lost connection)."""
        self.session_id = 0
        self.epoch = 0
        self._sent = {}
        self._pending = None


class NetworkLeaderEndpoint:
    """`LeaderEndpoint` over the Kafka wire protocol (Fetch v12, OffsetForLeaderEpoch v4,
    ListOffsets v4), one connection, reconnected on the next request after a failure.

    As Kafka's fetcher does, every request (a Fetch's long poll included) is bounded by
    `replica.socket.timeout.ms`, which must be at least `replica.fetch.wait.max.ms`: a
    connection gone silent (a network cut, a peer that stopped reading) fails its request
    within that time and is dropped, and the next request opens a new one, instead of waiting
    for TCP to give up on the old one."""

    def __init__(
        self,
        broker_id: int,
        host: str,
        port: int,
        *,
        config: FetcherConfig,
        client_id: str | None = None,
        security: ClientSecurity = PLAINTEXT,
        connect: Connect | None = None,
    ) -> None:
        """`connect`, when given, opens the connection to the leader instead of a socket to
        `host:port` (the simulator's network)."""
        self.broker_id = broker_id
        self.session = FollowerFetchSession()
        if connect is None:
            connect = socket_connect(host, port, config, security)
        self._client = RequestClient(
            connect,
            client_id=client_id or f"broker-{broker_id}-fetcher",
            peer=f"{host}:{port}",
        )

    async def fetch(
        self,
        partitions: Mapping[TopicPartition, FetchPosition],
        limits: FetchLimits,
    ) -> dict[TopicPartition, FetchedPartition]:
        session = self.session
        send, forgotten = session.build(partitions)
        by_topic: dict[str, list[PartitionFields]] = {}
        for tp, pos in send.items():
            by_topic.setdefault(tp.topic, []).append(
                (
                    tp.partition,
                    pos.current_leader_epoch,
                    pos.fetch_offset,
                    pos.last_fetched_epoch,
                    pos.log_start_offset,
                    limits.partition_max_bytes,
                )
            )
        gone: dict[str, list[int]] = {}
        for tp in forgotten:
            gone.setdefault(tp.topic, []).append(tp.partition)
        session_id, epoch = session.session_id, session.epoch

        def encode(correlation_id: int, client_id: str | None) -> bytes:
            return encode_fetch_v12(
                correlation_id,
                client_id,
                replica_id=self.broker_id,
                max_wait_ms=limits.max_wait_ms,
                min_bytes=limits.min_bytes,
                max_bytes=limits.max_bytes,
                isolation_level=0,
                session_id=session_id,
                session_epoch=epoch,
                topics=by_topic.items(),
                forgotten=gone.items(),
            )

        try:
            resp: FetchAnswer = await self._client.call(
                FETCH_KEY, FETCH_VERSION, None, encode=encode, decode=_decode_fetch
            )
        except BaseException:
            session.reset()
            raise
        if resp.error_code != ErrorCode.none:
            code = ErrorCode(resp.error_code)
            session.reset()
            if code in (
                ErrorCode.fetch_session_id_not_found,
                ErrorCode.invalid_fetch_session_epoch,
            ):
                return {}  # the next request starts a new session at once
            return {tp: FetchedPartition(code) for tp in partitions}
        session.answered(int(resp.session_id), partitions)
        out: dict[TopicPartition, FetchedPartition] = {}
        for topic, parts in resp.responses:
            for p in parts:
                div = p.diverging_epoch
                diverging = (
                    EpochEndOffset(div[0], div[1])
                    if div is not None and (div[0] >= 0 or div[1] >= 0)
                    else None
                )
                out[TopicPartition(topic, p.partition_index)] = FetchedPartition(
                    ErrorCode(p.error_code),
                    p.high_watermark,
                    p.log_start_offset,
                    b"" if p.records is None else p.records,  # a view of the answer frame
                    diverging,
                )
        return out

    async def end_offsets_for_epochs(
        self, partitions: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochAnswer]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, (current, epoch) in partitions.items():
            by_topic.setdefault(tp.topic, []).append(
                {"partition": tp.partition, "current_leader_epoch": current, "leader_epoch": epoch}
            )
        body = {
            "replica_id": self.broker_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        }
        resp = await self._client.call(
            OFFSET_FOR_LEADER_EPOCH_KEY, OFFSET_FOR_LEADER_EPOCH_VERSION, body
        )
        out: dict[TopicPartition, EpochAnswer] = {}
        for t in resp.topics:
            for p in t.partitions:
                out[TopicPartition(str(t.topic), int(p.partition))] = EpochAnswer(
                    ErrorCode(p.error_code), int(p.leader_epoch), int(p.end_offset)
                )
        return out

    async def _list_offset(
        self, tp: TopicPartition, epoch: int, timestamp: int
    ) -> tuple[ErrorCode, int]:
        body = {
            "replica_id": self.broker_id,
            "isolation_level": 0,
            "topics": [
                {
                    "name": tp.topic,
                    "partitions": [
                        {
                            "partition_index": tp.partition,
                            "current_leader_epoch": epoch,
                            "timestamp": timestamp,
                        }
                    ],
                }
            ],
        }
        resp = await self._client.call(LIST_OFFSETS_KEY, LIST_OFFSETS_VERSION, body)
        for t in resp.topics:
            for p in t.partitions:
                return ErrorCode(p.error_code), int(p.offset)
        return ErrorCode.unknown_topic_or_partition, -1

    async def log_offsets(self, tp: TopicPartition, current_leader_epoch: int) -> LogOffsets:
        err, end = await self._list_offset(tp, current_leader_epoch, LATEST_TIMESTAMP)
        if err != ErrorCode.none:
            return LogOffsets(err)
        err, start = await self._list_offset(tp, current_leader_epoch, EARLIEST_TIMESTAMP)
        if err != ErrorCode.none:
            return LogOffsets(err)
        return LogOffsets(ErrorCode.none, start, end)

    async def close(self) -> None:
        self._client.close()


def _decode_fetch(frame: bytes | memoryview, correlation_id: int) -> FetchAnswer:
    return decode_fetch_v12_response(frame, expect_correlation_id=correlation_id)[1]
