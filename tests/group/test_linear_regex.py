"""Clients' regular expressions match in linear time: a pattern that makes a backtracking
engine take exponential time (`(a+)+b` against `aaaa...`) is answered at once, both as a
consumer group's SubscribedTopicRegex and as ListTransactions' pattern; invalid patterns are
refused quietly (nothing written to stderr)."""

from __future__ import annotations

import time
import uuid

import pytest
from kio.schema.errors import ErrorCode as E

from tests.group.test_kip848_groups import T1, Driver
from tests.txn.test_txn_coordinator import T0, Harness
from wherry.common.linear_regex import InvalidPattern, compile_linear
from wherry.group.consumer_coordinator import TopicsImage
from wherry.group.consumer_group import TopicMeta

EVIL = "(a+)+b"
LONG_NAME = "a" * 200  # a backtracking engine would take longer than the universe's age


def test_evil_pattern_is_linear() -> None:
    started = time.monotonic()
    assert compile_linear(EVIL).fullmatch(LONG_NAME) is None
    assert compile_linear("(a|aa)*c").fullmatch("a" * 249) is None
    assert time.monotonic() - started < 1.0
    assert compile_linear("t|t-.*").fullmatch("t-new") is not None
    assert compile_linear("t|t-.*").fullmatch("xt") is None  # whole-name matches only


@pytest.mark.parametrize("pattern", ["(", "a{2,1}", r"(?=a)", r"(a)\1", "[z-a]"])
def test_invalid_patterns_are_refused_quietly(
    pattern: str, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(InvalidPattern):
        compile_linear(pattern)
    assert capfd.readouterr().err == ""


def test_consumer_group_regex_against_a_long_topic_name() -> None:
    d = Driver()
    other = uuid.UUID(int=9)
    d.topics = TopicsImage(
        {LONG_NAME: TopicMeta(T1, LONG_NAME, 2), "ab": TopicMeta(other, "ab", 1)}
    )
    started = time.monotonic()
    r = d.hb("a", 0, subscribed_topic_names=None, subscribed_topic_regex=EVIL)
    assert time.monotonic() - started < 2.0
    assert r.error == E.none
    assert set((r.assignment or {}).keys()) == {other}


def test_list_transactions_pattern_against_a_long_id() -> None:
    h = Harness()
    h.init(tid=LONG_NAME)
    h.add(100, 0, T0)
    started = time.monotonic()
    err, _, txns = h.coord.list_transactions([], [], now_ms=h.now, pattern=EVIL)
    assert time.monotonic() - started < 2.0
    assert err == E.none and txns == []
