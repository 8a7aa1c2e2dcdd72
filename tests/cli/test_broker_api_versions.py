"""`wherry broker-api-versions` (kafka-broker-api-versions.sh): Kafka's NodeApiVersions lines,
and each broker of a real `wherry server` with what it serves."""

from __future__ import annotations

import re

from click.testing import CliRunner

from wherry.cli.broker_api_versions import api_lines
from wherry.cli.main import main
from wherry.server.handlers.versions import SUPPORTED_VERSIONS


def test_lines_as_kafka_words_them() -> None:
    known = {0: ("Produce", 3, 13), 1: ("Fetch", 4, 17), 2: ("ListOffsets", 1, 11),
             3: ("Metadata", 0, 12), 38: ("CreateDelegationToken", 1, 3)}
    served = {0: (3, 13), 1: (4, 18), 2: (12, 12), 3: (0, 0), 999: (0, 2)}
    assert api_lines(served, known) == [
        "Produce(0): 3 to 13 [usable: 13]",
        "Fetch(1): 4 to 18 [usable: 17]",  # the newest both sides speak
        "ListOffsets(2): 12 [unusable: node too new]",
        "Metadata(3): 0 [usable: 0]",
        "CreateDelegationToken(38): UNSUPPORTED",
        "UNKNOWN(999): 0 to 2",
    ]
    assert api_lines({2: (0, 0)}, {2: ("ListOffsets", 1, 11)}) == [
        "ListOffsets(2): 0 [unusable: node too old]"]


def test_a_broker_and_what_it_serves(cli_bootstrap: str) -> None:
    result = CliRunner().invoke(main, ["broker-api-versions", "--bootstrap-server",
                                       cli_bootstrap], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"\S+:\d+ \(id: \d+ rack: null\) -> \(", lines[0]), lines[0]
    assert lines[-1] == ")"
    body = [line.removeprefix("\t").removesuffix(",") for line in lines[1:-1]]
    lo, hi = SUPPORTED_VERSIONS[0]
    assert body[0] == f"Produce(0): {lo} to {hi} [usable: {hi}]"
    assert "DescribeProducers(61): 0 [usable: 0]" in body
    assert "CreateDelegationToken(38): UNSUPPORTED" in body
    served = [line for line in body if "UNSUPPORTED" not in line]
    assert len(served) == len(SUPPORTED_VERSIONS)
