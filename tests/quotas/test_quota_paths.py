"""Quota entities as store paths and notification entity paths, both ways (names sanitized,
`<default>` for the default), and the notifications that are not about quotas."""

from __future__ import annotations

import pytest

from wherry.quotas.entities import DEFAULT, QuotaEntity
from wherry.quotas.store import entity_of_path, entity_path, node_path, quota_values


@pytest.mark.parametrize(("entity", "path"), [
    (QuotaEntity("alice", None), "users/alice"),
    (QuotaEntity(None, "app"), "clients/app"),
    (QuotaEntity("alice", "app"), "users/alice/clients/app"),
    (QuotaEntity(DEFAULT, None), "users/<default>"),
    (QuotaEntity(None, DEFAULT), "clients/<default>"),
    (QuotaEntity(DEFAULT, DEFAULT), "users/<default>/clients/<default>"),
    (QuotaEntity(DEFAULT, "a/b"), "users/<default>/clients/a%2Fb"),
    (QuotaEntity("CN=x y", None), "users/CN%3Dx%20y"),
    (QuotaEntity("<default>", None), "users/%3Cdefault%3E"),  # a user named so
])
def test_entity_paths_round_trip(entity: QuotaEntity, path: str) -> None:
    assert entity_path(entity) == path
    assert node_path(entity) == "/config/" + path
    assert entity_of_path(path) == entity


@pytest.mark.parametrize("path", [
    "topics/t", "brokers/1", "brokers/<default>", "users/", "users/a/clients/",
    "users/a/groups/b", "clients/a/users/b", "users//clients/c", "ips/1.2.3.4",
])
def test_other_notifications_are_not_quotas(path: str) -> None:
    assert entity_of_path(path) is None


def test_quota_values_ignore_other_keys_and_bad_numbers() -> None:
    assert quota_values({
        "producer_byte_rate": "1024", "request_percentage": "12.5",
        "SCRAM-SHA-256": "salt=...", "consumer_byte_rate": "fast",
    }) == {"producer_byte_rate": 1024.0, "request_percentage": 12.5}
