"""Kept response bodies: the frame of a repeated answer is the one kio writes, and an answer
that differs in any value is never answered from another's body."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

import wherry.protocol.codec as codec
from tests.protocol.kio_samples import kio_response_frame
from wherry.protocol.codec import encode_response
from wherry.protocol.response_cache import CACHED_KEYS, KeyedAnswer, ResponseBodyCache, frozen
from wherry.server.handlers import SUPPORTED_VERSIONS


@pytest.fixture(autouse=True)
def empty_cache() -> None:
    codec.RESPONSE_BODIES.clear()


def _versions(api_key: int) -> range:
    lo, hi = SUPPORTED_VERSIONS[api_key]
    return range(lo, hi + 1)


@pytest.mark.parametrize("version", _versions(12))
def test_heartbeat_answers_kept_and_told_apart(version: int) -> None:
    ok = {"throttle_time": 0, "error_code": 0}
    busy = {"throttle_time": 0, "error_code": ErrorCode.rebalance_in_progress}
    for cid, data in enumerate([ok, busy, ok, {**ok, "throttle_time": 7}, busy, ok]):
        assert encode_response(12, version, cid, data) == kio_response_frame(12, version, cid, data)
    assert len(codec.RESPONSE_BODIES) == 3


def test_versions_and_keys_do_not_share_bodies() -> None:
    data = {"throttle_time": 0, "error_code": 0}
    for api_key in (12, 26, 25):
        for version in _versions(api_key):
            assert encode_response(api_key, version, 1, data) == kio_response_frame(
                api_key, version, 1, data
            )


def test_api_versions_answer_kept_with_header_v0() -> None:
    from wherry.server.handlers.api_versions import api_keys

    data = {"error_code": 0, "api_keys": api_keys(), "throttle_time": 0}
    for _ in range(2):
        for version in _versions(18):
            assert encode_response(18, version, 9, data) == kio_response_frame(18, version, 9, data)


def test_a_keyed_answer_is_frozen_once_and_written_as_kio_writes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import wherry.protocol.response_cache as response_cache
    from wherry.server.handlers.api_versions import answer, features_of

    keyed = {v: KeyedAnswer(answer(features_of(2), v)) for v in _versions(18)}
    for version, data in keyed.items():
        assert data == answer(features_of(2), version) and data.key == frozen(dict(data))
    frozen_values: list[Any] = []
    real = response_cache._freeze
    monkeypatch.setattr(response_cache, "_freeze", lambda v: frozen_values.append(v) or real(v))
    for cid in range(3):  # kept after the first, and never frozen again
        for version, data in keyed.items():
            assert encode_response(18, version, cid, data) == kio_response_frame(
                18, version, cid, dict(data)
            )
    assert frozen_values == []
    monkeypatch.undo()
    # a throttled answer is a new, plain dict: frozen, kept apart
    throttled = {**KeyedAnswer(answer(features_of(2), 3)), "throttle_time": 5}
    assert type(throttled) is dict
    assert encode_response(18, 3, 1, throttled) == kio_response_frame(18, 3, 1, throttled)


def test_the_api_versions_handler_answers_one_kept_answer_per_version() -> None:
    import asyncio
    from types import SimpleNamespace

    from wherry.server.handlers import api_versions

    broker: Any = SimpleNamespace(config=SimpleNamespace(transaction_version=2))

    def ask(version: int) -> Any:
        return asyncio.run(api_versions.handle(broker, SimpleNamespace(api_version=version)))  # type: ignore[arg-type]

    first, again, other = ask(3), ask(3), ask(2)
    assert first is again and type(first) is KeyedAnswer
    assert first == api_versions.answer(api_versions.features_of(2), 3)
    assert other is not first and other == api_versions.answer(api_versions.features_of(2), 2)


def test_answers_with_other_values_are_encoded_and_not_kept() -> None:
    entity_cls = load_response_schema(12, 4)
    entity = entity_cls(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none)  # type: ignore[call-arg]
    assert encode_response(12, 4, 3, entity) == kio_response_frame(12, 4, 3, entity)
    data = {"throttle_time": 0, "error_code": 0, "extra": memoryview(b"x")}
    assert frozen(data) is None
    assert encode_response(12, 4, 3, data) == kio_response_frame(12, 4, 3, data)
    assert len(codec.RESPONSE_BODIES) == 0


def test_uncached_apis_keep_kio_frames() -> None:
    assert not {0, 1, 3, 36} & CACHED_KEYS  # Produce, Fetch and Metadata: writers of their own
    produce = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 41}],
            }
        ]
    }
    for version in _versions(0):
        assert encode_response(0, version, 2, produce) == kio_response_frame(0, version, 2, produce)
    assert len(codec.RESPONSE_BODIES) == 0


def test_frozen_tells_values_apart() -> None:
    assert frozen({"a": [1, 2]}) == frozen({"a": (1, 2)})
    assert frozen({"a": [1, 2]}) != frozen({"a": [2, 1]})
    assert frozen({"a": "1"}) != frozen({"a": b"1"}) != frozen({"a": 1})
    assert frozen({"a": [{"b": 1}]}) != frozen({"a": [{"c": 1}]})
    assert frozen({"a": None}) != frozen({"a": 0})
    assert frozen({"a": 1.0}) is None
    assert frozen({"a": ErrorCode.none}) == frozen({"a": 0})


def test_bounded_oldest_first() -> None:
    cache = ResponseBodyCache(max_entries=2, max_body_bytes=4)
    calls: list[int] = []

    def enc(n: int, size: int = 2) -> Any:
        return lambda: (calls.append(n), bytes(size))[1]

    cache.body(1, 0, {"v": 1}, enc(1))
    cache.body(1, 0, {"v": 2}, enc(2))
    cache.body(1, 0, {"v": 1}, enc(99))  # kept: not encoded again
    cache.body(1, 0, {"v": 3}, enc(3))  # the oldest (v=1) goes
    cache.body(1, 0, {"v": 1}, enc(4))
    cache.body(1, 0, {"v": 5}, enc(5, size=5))  # too large to keep
    cache.body(1, 0, {"v": 5}, enc(6, size=5))
    assert calls == [1, 2, 3, 4, 5, 6]
    assert len(cache) == 2
