"""Connection limits as configured and accounted (no sockets): Kafka's keys, defaults and
checks, per-IP limits and overrides, listener and broker slots, and the creation rate's
throttle."""

from __future__ import annotations

import pytest

from wherry.server.config import BrokerConfig, BrokerConfigError
from wherry.server.config_keys import unknown_keys
from wherry.server.connection_limits import INT_MAX, ConnectionLimits, limits_from_props
from wherry.server.connection_quotas import ConnectionQuotas, SampledRate


def test_defaults_are_kafkas() -> None:
    limits = BrokerConfig.from_props({}).connection_limits
    assert limits.connections_max_idle_ms == 600_000
    assert limits.max_connections == limits.max_connections_per_ip == INT_MAX
    assert limits.max_connection_creation_rate == INT_MAX
    assert limits.queued_max_request_bytes == -1 and limits.pool_capacity is None
    assert dict(limits.max_connections_per_ip_overrides) == {}


def test_keys_are_known() -> None:
    keys = [
        "connections.max.idle.ms", "max.connections", "max.connections.per.ip",
        "max.connections.per.ip.overrides", "max.connection.creation.rate",
        "queued.max.request.bytes", "listener.name.plaintext.max.connections",
        "listener.name.internal.max.connection.creation.rate",
    ]
    assert unknown_keys(keys) == []


def test_values_are_read() -> None:
    cfg = BrokerConfig.from_props({
        "connections.max.idle.ms": "2000",
        "max.connections": "100",
        "max.connections.per.ip": "10",
        "max.connections.per.ip.overrides": "127.0.0.2:20, [::1]:5,localhost:3",
        "max.connection.creation.rate": "50",
        "queued.max.request.bytes": "209715200",
        "listener.name.plaintext.max.connections": "7",
        "listener.name.plaintext.max.connection.creation.rate": "3",
    })
    limits = cfg.connection_limits
    assert limits.connections_max_idle_ms == 2000
    assert limits.max_connections == 100 and limits.max_connections_per_ip == 10
    assert dict(limits.max_connections_per_ip_overrides) == {
        "127.0.0.2": 20, "::1": 5, "localhost": 3,
    }
    assert limits.max_connection_creation_rate == 50
    assert limits.pool_capacity == 209_715_200
    assert dict(limits.listener_max_connections) == {"PLAINTEXT": 7}
    assert dict(limits.listener_max_connection_creation_rate) == {"PLAINTEXT": 3}


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"max.connections.per.ip": "-1"},
         "Invalid value -1 for configuration max.connections.per.ip: Value must be at least 0"),
        ({"max.connections.per.ip": "0"},
         "max.connections.per.ip can be set to zero only if "
         "max.connections.per.ip.overrides property is set."),
        ({"max.connections.per.ip.overrides": "127.0.0.1"},
         "Map entry should be of form <key>:<value>"),
        ({"max.connections.per.ip.overrides": "127.0.0.1:x"}, "Not a number of type INT"),
        ({"max.connections": "lots"}, "Not a number of type INT"),
        ({"connections.max.idle.ms": "1.5"}, "Not a number of type LONG"),
        ({"queued.max.request.bytes": "1000"},
         "queued.max.request.bytes must be larger or equal to socket.request.max.bytes"),
        ({"listener.name.plaintext.max.connections": "-2"}, "Value must be at least 0"),
    ],
)
def test_bad_values_are_refused_with_kafkas_words(props: dict[str, str], message: str) -> None:
    with pytest.raises(BrokerConfigError) as e:
        BrokerConfig.from_props(props)
    assert message in str(e.value)


def test_small_pool_with_small_requests_is_accepted() -> None:
    limits = limits_from_props(
        {"queued.max.request.bytes": "2000000", "socket.request.max.bytes": "1000000"},
        1_000_000,
    )
    assert limits.pool_capacity == 2_000_000
    cfg = BrokerConfig.from_props(
        {"queued.max.request.bytes": "2000000", "socket.request.max.bytes": "1000000"}
    )
    assert cfg.connection_limits.pool_capacity == 2_000_000


def test_per_ip_limit_and_overrides() -> None:
    q = ConnectionQuotas(ConnectionLimits(max_connections_per_ip=2,
                                          max_connections_per_ip_overrides={"10.0.0.2": 3}))
    for _ in range(2):
        assert q.ip_limit_reached("10.0.0.1") is None
        q.add("PLAINTEXT", "10.0.0.1")
    assert q.ip_limit_reached("10.0.0.1") == 2
    for _ in range(3):
        assert q.ip_limit_reached("10.0.0.2") is None
        q.add("PLAINTEXT", "10.0.0.2")
    assert q.ip_limit_reached("10.0.0.2") == 3
    q.remove("PLAINTEXT", "10.0.0.1")
    assert q.ip_limit_reached("10.0.0.1") is None
    assert q.total == 4 and q.by_listener["PLAINTEXT"] == 4


def test_slots_of_the_broker_and_listeners_and_the_protected_inter_broker_listener() -> None:
    q = ConnectionQuotas(
        ConnectionLimits(max_connections=2, listener_max_connections={"EXTERNAL": 1}),
        inter_broker_listener="INTERNAL",
    )
    assert q.slot_available("EXTERNAL")
    q.add("EXTERNAL", "a")
    assert not q.slot_available("EXTERNAL")  # its own limit
    assert q.slot_available("CLIENTS")
    q.add("CLIENTS", "b")
    assert not q.slot_available("CLIENTS")  # the broker's limit
    assert q.slot_available("INTERNAL")  # the inter-broker listener may go over
    q.remove("CLIENTS", "b")
    assert q.slot_available("CLIENTS")


def test_sampled_rate_counts_at_least_the_window_span() -> None:
    rate = SampledRate(samples=11, window_ms=1000)
    for _ in range(50):
        rate.record(0)
    assert rate.rate(0) == pytest.approx(5.0)  # 50 over the 10 s minimum span
    assert rate.throttle_ms(10, 0) == 0
    for _ in range(100):
        rate.record(500)
    # 150 over 10.5 s (10 whole windows and the current half) against a quota of 10/s:
    # (150 / 10.5 - 10) / 10 * 10.5 s
    assert rate.throttle_ms(10, 500) == pytest.approx(4500, abs=1)
    # the samples age out
    assert rate.rate(30_000) == 0


def test_creation_rate_throttles_the_listener_and_the_broker() -> None:
    q = ConnectionQuotas(
        ConnectionLimits(max_connection_creation_rate=2,
                         listener_max_connection_creation_rate={"EXTERNAL": 1}),
        inter_broker_listener="INTERNAL",
    )
    throttles = [q.record_creation("EXTERNAL", 0) for _ in range(12)]
    assert throttles[:10] == [0] * 10 and throttles[10] > 0  # 11 / 10 s > 1/s
    assert all(q.record_creation("INTERNAL", 0) == 0 for _ in range(100))
    broker = [q.record_creation("CLIENTS", 0) for _ in range(10)]
    assert broker[-1] > 0  # with EXTERNAL's 12 the broker is over 2/s
