"""Per-topic traffic counters (Kafka's BrokerTopicMetrics: BytesInPerSec, BytesOutPerSec,
MessagesInPerSec), plain numbers the replica manager bumps in O(1) on the produce and fetch
paths; whoever reports them (the observability layer) reads them at scrape time. Bytes in are
the leader's appends of client batches; bytes out the records sent to consumers (followers'
fetches are replication traffic, not counted, as in Kafka)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TopicCounters:
    bytes_in: int = 0
    bytes_out: int = 0
    messages_in: int = 0


class BrokerTopicStats:
    def __init__(self) -> None:
        self.topics: dict[str, TopicCounters] = {}

    def _of(self, topic: str) -> TopicCounters:
        c = self.topics.get(topic)
        if c is None:
            c = self.topics[topic] = TopicCounters()
        return c

    def record_in(self, topic: str, nbytes: int, messages: int) -> None:
        c = self._of(topic)
        c.bytes_in += nbytes
        c.messages_in += messages

    def record_out(self, topic: str, nbytes: int) -> None:
        if nbytes:
            self._of(topic).bytes_out += nbytes

    def remove_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
