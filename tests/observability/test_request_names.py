"""The `request` label of the request metrics is Kafka's name of the API for every API the
broker serves (Kafka's ApiKeys names), never a placeholder."""

from __future__ import annotations

from wherry.observability.request_stats import API_NAMES, request_name
from wherry.server.handlers.versions import SUPPORTED_VERSIONS


def test_every_served_api_has_kafkas_name() -> None:
    assert sorted(set(SUPPORTED_VERSIONS) - set(API_NAMES)) == []
    assert request_name(78) == "ShareFetch"
    assert request_name(61) == "DescribeProducers"
    assert (request_name(1), request_name(1, follower=True)) == ("FetchConsumer",
                                                                  "FetchFollower")
