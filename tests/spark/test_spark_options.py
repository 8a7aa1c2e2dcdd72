"""The connector's pure parts: option parsing and offset planning (no Spark needed)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wherry.spark.options import (
    EarliestSpec,
    LatestSpec,
    OffsetsSpec,
    OptionError,
    SinkOptions,
    SourceOptions,
    TimestampSpec,
)
from wherry.spark.planning import OffsetRange, from_json, ranges, rate_limit, to_json

BS = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def parse(streaming: bool = True, **opts: str) -> SourceOptions:
    return SourceOptions.parse({**BS, **opts}, streaming=streaming)


def test_defaults_follow_spark() -> None:
    s = parse(subscribe="a, b")
    assert s.subscription.topics == ("a", "b")
    assert s.starting == LatestSpec()
    assert s.fail_on_data_loss and not s.include_headers
    b = parse(streaming=False, subscribe="a")
    assert b.starting == EarliestSpec() and b.ending == LatestSpec()


def test_options_are_case_insensitive_and_kafka_params_pass_through() -> None:
    s = SourceOptions.parse(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "h:1",
            "SubscribePattern": "t-.*",
            "kafka.client.id": "x",
            "MAXOFFSETSPERTRIGGER": "10",
            "failOnDataLoss": "False",
        },
        streaming=True,
    )
    assert s.bootstrap_servers == "h:1"
    assert s.subscription.matches("t-1") and not s.subscription.matches("xt-1")
    assert s.kafka == {"bootstrap.servers": "h:1", "client.id": "x"}
    assert s.max_offsets_per_trigger == 10 and not s.fail_on_data_loss


def test_offsets_json_and_timestamps() -> None:
    s = parse(subscribe="t", startingOffsets='{"t": {"0": 23, "1": -2, "2": -1}}')
    assert s.starting == OffsetsSpec({"t": {0: 23, 1: -2, 2: -1}})
    b = parse(
        streaming=False,
        subscribe="t",
        startingTimestamp="1000",
        endingOffsets="latest",
        startingOffsets="earliest",
    )
    assert b.starting == TimestampSpec(timestamp=1000)  # startingTimestamp takes precedence
    b = parse(streaming=False, subscribe="t", endingOffsetsByTimestamp='{"t": {"0": 5}}')
    assert b.ending == TimestampSpec(by_partition={"t": {0: 5}})


# (option, value, what the error says): the one wrong option next to subscribe=t
BAD_STREAMING_VALUES = [
    ("kafka.bootstrap.servers", "", "required"),
    ("startingOffsets", '{"t": {"0": 1', "not valid JSON"),
    ("startingOffsets", '{"t": {"x": 1}}', "not a partition number"),
    ("startingOffsets", '{"t": {"0": "1"}}', "integer"),
    ("startingOffsets", '{"t": {"0": -7}}', "invalid offset"),
    ("endingOffsets", "latest", "batch"),
    ("maxOffsetsPerTrigger", "0", "positive"),
    ("failOnDataLoss", "yes", "true or false"),
    ("startingTimestamp", "soon", "milliseconds"),
]
BAD_BATCH_VALUES = [
    ("startingOffsets", "latest", "not allowed"),
    ("startingOffsets", '{"t": {"0": -1}}', "not allowed"),
    ("endingOffsets", "earliest", "not allowed"),
    ("maxOffsetsPerTrigger", "5", "streaming"),
]
# (streaming, options, the option named, what the error says)
BAD_OPTIONS = [
    *((True, {"subscribe": "t", o: v}, o, text) for o, v, text in BAD_STREAMING_VALUES),
    *((False, {"subscribe": "t", o: v}, o, text) for o, v, text in BAD_BATCH_VALUES),
    (True, {}, "subscribe", "exactly one"),
    (True, {"subscribe": "t", "assign": '{"t": [0]}'}, "subscribe", "exactly one"),
    (True, {"assign": "{bad json"}, "assign", "not valid JSON"),
    (True, {"assign": '{"t": ["x"]}'}, "assign", "partition numbers"),
    (True, {"subscribePattern": "("}, "subscribePattern", "regular expression"),
    (
        True,
        {"assign": '{"t": [0]}', "startingOffsets": '{"t": {"1": 0}}'},
        "startingOffsets",
        "not in 'assign'",
    ),
]


@pytest.mark.parametrize(("streaming", "opts", "option", "text"), BAD_OPTIONS)
def test_bad_options_name_the_option(
    streaming: bool, opts: dict[str, str], option: str, text: str
) -> None:
    with pytest.raises(OptionError, match=text) as e:
        SourceOptions.parse({**BS, **opts}, streaming=streaming)
    assert e.value.option == option
    assert f"'{option}'" in str(e.value)


def test_sink_options() -> None:
    s = SinkOptions.parse({**BS, "topic": "out", "kafka.linger.ms": "20"})
    assert s.topic == "out" and s.kafka["linger.ms"] == "20"
    with pytest.raises(OptionError, match="idempotent"):
        SinkOptions.parse({**BS, "kafka.enable.idempotence": "false"})
    with pytest.raises(OptionError, match="exactlyOnce"):
        SinkOptions.parse({**BS, "kafka.transactional.id": "x"})
    assert not s.exactly_once and s.state_topic == "wherry-spark-sink-state"
    e = SinkOptions.parse({**BS, "exactlyOnce": "TRUE", "exactlyOnceStateTopic": "st"})
    assert e.exactly_once and e.state_topic == "st"
    with pytest.raises(OptionError, match="exactlyOnce"):
        SinkOptions.parse({**BS, "exactlyOnce": "maybe"})
    with pytest.raises(OptionError, match="PLAINTEXT"):
        SinkOptions.parse({**BS, "exactlyOnce": "true", "kafka.security.protocol": "SSL"})
    with pytest.raises(OptionError, match=r"kafka\.bootstrap\.servers"):
        SinkOptions.parse({"topic": "x"})


def test_offsets_json_round_trip_has_string_keys() -> None:
    offs = {("a", 0): 5, ("a", 10): 7, ("b", 1): 0}
    j = to_json(offs)
    assert j == {"a": {"0": 5, "10": 7}, "b": {"1": 0}}
    assert from_json(j) == offs


Offsets = dict[tuple[str, int], int]


def _start_and_end(spans: dict[tuple[str, int], tuple[int, int]]) -> tuple[Offsets, Offsets]:
    return {tp: s for tp, (s, _) in spans.items()}, {tp: s + n for tp, (s, n) in spans.items()}


# (start, end) offsets of one or more partitions, each end 0 to 1000 past its start
offset_spans = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 5)),
    st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
    min_size=1,
).map(_start_and_end)


@given(offset_spans, st.integers(1, 3000))
def test_rate_limit_never_exceeds_the_limit_and_always_progresses(
    spans: tuple[Offsets, Offsets], limit: int
) -> None:
    start, latest = spans
    end = rate_limit(start, latest, limit)
    taken = {tp: end[tp] - start[tp] for tp in start}
    available = sum(latest[tp] - start[tp] for tp in start)
    assert all(0 <= taken[tp] <= latest[tp] - start[tp] for tp in start)
    assert sum(taken.values()) == min(limit, available)


def test_rate_limit_shares_in_proportion() -> None:
    end = rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 900, ("t", 1): 100}, 100)
    assert end == {("t", 0): 90, ("t", 1): 10}


@given(offset_spans, st.integers(1, 20))
def test_ranges_cover_exactly_once_when_split(
    spans: tuple[Offsets, Offsets], min_partitions: int
) -> None:
    start, end = spans
    rs = ranges(start, end, min_partitions)
    for tp in start:
        covered = sorted((r.start, r.end) for r in rs if (r.topic, r.partition) == tp)
        pos = start[tp]
        for a, b in covered:
            assert a == pos and b > a
            pos = b
        assert pos == end[tp]
    total = sum(end[tp] - start[tp] for tp in start)
    assert len(rs) >= min(min_partitions, total)


def test_ranges_skip_empty_and_unknown() -> None:
    assert ranges({("t", 0): 5, ("t", 1): 0}, {("t", 0): 5, ("t", 1): 3, ("t", 2): 9}) == [
        OffsetRange("t", 1, 0, 3)
    ]


def test_data_loss_warns_or_fails(caplog: pytest.LogCaptureFixture) -> None:
    from wherry.spark import kafka_access

    with pytest.raises(kafka_access.DataLossError, match="'failOnDataLoss' to 'false'"):
        kafka_access.data_loss(True, "offsets 3 to 9 of t-0 are gone")
    with caplog.at_level(logging.WARNING, logger="wherry.spark"):
        kafka_access.data_loss(False, "offsets 3 to 9 of t-0 are gone")
    assert "offsets 3 to 9 of t-0 are gone" in caplog.text
