"""Repeated identical authorization denials are logged once per interval, with a count of
those left out; different principals, operations or resources each get their own line."""

from __future__ import annotations

import logging

import pytest

from wherry.security.denial_log import DenialLog

KEY = ("User:bob", "127.0.0.1", "Read", "Topic", "LITERAL", "orders")


def test_identical_denials_are_counted_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    now = [1_000_000]
    logger = logging.getLogger("wherry.authorizer.test")
    denials = DenialLog(logger, lambda: now[0], interval_ms=10_000)
    with caplog.at_level(logging.INFO, logger=logger.name):
        for _ in range(5000):  # a client re-asking in a loop
            denials.denied(KEY)
            now[0] += 1
        assert len(caplog.records) == 1
        assert caplog.records[0].getMessage() == (
            "Principal = User:bob is Denied Operation = Read from host = 127.0.0.1 on "
            "resource = Topic:LITERAL:orders")
        # Another operation, principal or resource is a line of its own.
        denials.denied(("User:bob", "127.0.0.1", "Write", "Topic", "LITERAL", "orders"))
        denials.denied(("User:eve", "127.0.0.1", "Read", "Topic", "LITERAL", "orders"))
        denials.denied(("User:bob", "127.0.0.1", "Read", "Topic", "LITERAL", "other"))
        assert len(caplog.records) == 4
        now[0] += 10_000  # the interval is over: the next one is logged with the count
        denials.denied(KEY)
        assert len(caplog.records) == 5
        assert caplog.records[-1].getMessage().endswith(
            "(4999 identical denials not logged in the last 15 s)")
        denials.denied(KEY)
        assert len(caplog.records) == 5


def test_nothing_is_kept_when_info_is_off(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("wherry.authorizer.test-off")
    denials = DenialLog(logger, lambda: 0)
    with caplog.at_level(logging.WARNING, logger=logger.name):
        denials.denied(KEY)
    assert caplog.records == [] and not denials._windows
