"""Client quota math: the sampled rate, Kafka's precedence of the 8 entity combinations and
the metric tags they share, the throttle time formula, unrecording, and the request-time
quota's cap. Pure: time is passed in."""

from __future__ import annotations

import pytest

from wherry.quotas.entities import DEFAULT, QuotaEntity, metric_tags, quota_for_tags
from wherry.quotas.manager import ClientQuotaManager, QuotaType
from wherry.quotas.rate import SampledRate

U, C = "alice", "app"
# Kafka's order, most specific first, with the tags each one shares its rate under.
PRECEDENCE = [
    (QuotaEntity(U, C), (U, C)),
    (QuotaEntity(U, DEFAULT), (U, C)),
    (QuotaEntity(U, None), (U, "")),
    (QuotaEntity(DEFAULT, C), (U, C)),
    (QuotaEntity(DEFAULT, DEFAULT), (U, C)),
    (QuotaEntity(DEFAULT, None), (U, "")),
    (QuotaEntity(None, C), ("", C)),
    (QuotaEntity(None, DEFAULT), ("", C)),
]


@pytest.mark.parametrize("level", range(len(PRECEDENCE)))
def test_the_most_specific_quota_wins(level: int) -> None:
    """With quotas on this level and every less specific one, this level's applies."""
    quotas = {entity: float(1000 + i) for i, (entity, _) in enumerate(PRECEDENCE[level:],
                                                                        start=level)}
    tags = metric_tags(quotas, U, C)
    assert tags == PRECEDENCE[level][1]
    assert quota_for_tags(quotas, tags) == 1000 + level


def test_no_quota_is_unlimited_and_others_do_not_match() -> None:
    quotas = {QuotaEntity("bob", None): 5.0, QuotaEntity(None, "other"): 6.0}
    tags = metric_tags(quotas, U, C)
    assert tags == ("", C)
    assert quota_for_tags(quotas, tags) is None
    assert metric_tags(quotas, "bob", C) == ("bob", "")


def test_an_entity_names_something() -> None:
    with pytest.raises(ValueError):
        QuotaEntity(None, None)


def test_rate_over_the_span_of_its_samples() -> None:
    rate = SampledRate(11, 1000)
    rate.record(500, 0)
    assert rate.measure(0) == 500.0  # at least one window
    rate.record(500, 1500)
    assert rate.window_size_ms(2000) == 2000
    assert rate.measure(2000) == 500.0
    # Samples older than 11 windows are reset.
    assert rate.total(11_000) == 500
    assert rate.total(12_600) == 0


def test_rate_keeps_at_most_its_samples() -> None:
    rate = SampledRate(3, 1000)
    for t in range(0, 5000, 1000):
        rate.record(100, t)
    assert rate.total(4000) == 300  # the last three windows


def test_throttle_time_is_kafkas_formula() -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE)
    m.update_quota(QuotaEntity(None, C), 1000.0)
    assert m.record(U, C, 1000, 0) == 0  # 1000 B over one window: at the bound
    # 3000 B over a 2 s span: 1500 B/s, (1500 - 1000) / 1000 * 2000 ms
    assert m.record(U, C, 2000, 2000) == 1000
    assert m.tags(U, C) == ("", C)


def test_nothing_is_recorded_without_quotas() -> None:
    m = ClientQuotaManager(QuotaType.FETCH)
    assert m.record(U, C, 10**9, 0) == 0
    assert m.stats == {}
    assert m.max_value_in_window(U, C) is None


def test_clients_of_one_user_share_a_user_quota() -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE)
    m.update_quota(QuotaEntity(U, None), 1000.0)
    assert m.record(U, "a", 1000, 0) == 0
    assert m.record(U, "b", 1000, 0) > 0  # the same (alice, "") rate
    assert m.record("bob", "b", 1000, 0) == 0  # no quota for bob
    assert set(m.stats) == {(U, ""), ("", "b")}  # bob: recorded, unbounded (as in Kafka)


def test_default_client_quota_bounds_each_client_on_its_own() -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE)
    m.update_quota(QuotaEntity(None, DEFAULT), 1000.0)
    assert m.record(U, "a", 1000, 0) == 0
    assert m.record(U, "b", 1000, 0) == 0
    assert m.record(U, "a", 1000, 100) > 0


def test_unrecord_takes_back_a_value() -> None:
    m = ClientQuotaManager(QuotaType.FETCH)
    m.update_quota(QuotaEntity(None, C), 1000.0)
    assert m.record(U, C, 900, 0) == 0
    throttle = m.record(U, C, 900, 10)
    assert throttle > 0
    m.unrecord(U, C, 900, 10)
    assert m.stats[("", C)].rate.total(10) == 900


def test_request_quota_throttle_is_capped_at_one_window() -> None:
    m = ClientQuotaManager(QuotaType.REQUEST, window_ms=1000)
    m.update_quota(QuotaEntity(None, C), 10.0)  # 10 % of a thread
    assert m.record(U, C, 10_000.0, 0) == 1000
    b = ClientQuotaManager(QuotaType.PRODUCE, window_ms=1000)
    b.update_quota(QuotaEntity(None, C), 10.0)
    assert b.record(U, C, 10_000.0, 0) > 1000  # byte rates are not capped


def test_quota_changes_apply_to_recorded_rates() -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE)
    m.update_quota(QuotaEntity(None, C), 100.0)
    assert m.record(U, C, 500, 0) > 0
    m.update_quota(QuotaEntity(None, C), 10_000.0)
    assert m.record(U, C, 1, 1) == 0
    m.update_quota(QuotaEntity(None, C), None)
    assert not m.enabled


def test_idle_clients_are_forgotten() -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE)
    m.update_quota(QuotaEntity(None, DEFAULT), 100.0)
    m.record(U, "old", 1, 0)
    m.record(U, "new", 1, 3_600_001)
    assert set(m.stats) == {("", "new")}


def test_throttle_metrics_average_the_throttled_requests() -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE)
    m.update_quota(QuotaEntity(None, C), 1000.0)
    m.record(U, C, 1000, 0)
    t = m.record(U, C, 2000, 2000)
    ((tags, rate, avg),) = m.snapshot(2000)
    assert tags == ("", C) and rate == 1500.0 and avg == t
