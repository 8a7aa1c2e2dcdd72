"""`wherry features describe` (kafka-features.sh) and `wherry cluster cluster-id`
(kafka-cluster.sh) against a real `wherry server`."""

from __future__ import annotations

import re

from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from wherry.cli.features import feature_lines
from wherry.cli.main import main


def test_lines_as_kafka_prints_them() -> None:
    assert feature_lines({"transaction.version": (0, 2), "a.version": (1, 3)},
                         {"transaction.version": 2}, 0) == [
        "Feature: a.version\tSupportedMinVersion: 1\tSupportedMaxVersion: 3\t"
        "FinalizedVersionLevel: 0\tEpoch: 0",
        "Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\t"
        "FinalizedVersionLevel: 2\tEpoch: 0",
    ]
    assert feature_lines({"x": (0, 1)}, {}, -1)[0].endswith("Epoch: -")


def test_features_and_cluster_id_of_a_broker(cli_bootstrap: str) -> None:
    run = CliRunner().invoke
    described = run(main, ["features", "describe", "--bootstrap-server", cli_bootstrap],
                    catch_exceptions=False)
    assert described.exit_code == 0, described.stderr
    assert described.stdout == (
        "Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\t"
        "FinalizedVersionLevel: 2\tEpoch: 0\n")
    ident = run(main, ["cluster", "cluster-id", "--bootstrap-server", cli_bootstrap],
                catch_exceptions=False)
    assert ident.exit_code == 0, ident.stderr
    expected = AdminClient({"bootstrap.servers": cli_bootstrap}).list_topics(timeout=10)
    assert re.fullmatch(r"Cluster ID: \S+\n", ident.stdout)
    assert ident.stdout == f"Cluster ID: {expected.cluster_id}\n"
