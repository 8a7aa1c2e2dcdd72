"""The console's page of a broker shows the settings it was started with, secrets hidden
(as Kafka's DescribeConfigs answers null for a sensitive value), sorted by key."""

from __future__ import annotations

from wherry.observability.broker_detail import HIDDEN, shown_config


def test_secrets_are_hidden_and_the_rest_shown_sorted() -> None:
    raw = {
        "listeners": "PLAINTEXT://127.0.0.1:9092",
        "ssl.keystore.password": "k-secret",
        "ssl.key.password": "k2",
        "ssl.truststore.password": "t-secret",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": "user_alice=\"pw\";",
        "zookeeper.digest.password": "z",
        "delegation.token.secret.key": "d",
        "offsets.topic.num.partitions": "50",
    }
    shown = dict(map(tuple, shown_config(raw)))
    assert [k for k, _ in shown_config(raw)] == sorted(raw)
    assert shown["listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert shown["offsets.topic.num.partitions"] == "50"
    for key in raw:
        if key not in ("listeners", "offsets.topic.num.partitions"):
            assert shown[key] == HIDDEN, key
    assert not any(v in str(shown) for v in ("k-secret", "t-secret", "pw"))
