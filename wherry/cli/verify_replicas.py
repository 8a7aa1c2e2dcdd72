"""`wherry verify-replicas`: a kafka-replica-verification.sh look-alike.

For every partition of the topics matching `--topics-include` (a regular expression matched
against the whole name), read the log of EVERY replica with Fetch requests sent straight to
the replica's broker as Kafka's debugging consumer (replica id -2, which a broker serves from
a follower too, up to its log end), then compare the replicas record by record (offset, key,
value, headers, timestamp) below the smallest log end offset, the leader's records being the
reference. Wire protocol through wherry's own `RequestClient` (no client library can fetch
from a follower).

One pass over the partitions (Kafka's tool loops forever): while it runs, every
`--report-interval-ms` it prints Kafka's progress line "<time>: max lag is N for partition t-0
at offset X among N partitions" for the partitions verified so far; at the end the line for
all of them, then one line per diverging partition (partition, offset, which replicas) and the
exit status 1 when any diverges.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from kio.schema.errors import ErrorCode

from wherry.cli.common import (
    CommandError,
    ErrorsReported,
    bootstrap_option,
    command_config_option,
    exits_on_error,
)
from wherry.cli.replica_compare import (
    PartitionCheck,
    compare_partition,
    decode_records,
    max_lag_line,
)
from wherry.cli.wire_clients import BrokerClients, bootstrap_addresses
from wherry.outbound.client import RequestClient, RequestError
from wherry.protocol.records import Record

DEBUGGING_CONSUMER_ID = -2
_FETCH = (1, 12)
_METADATA = (3, 12)
_CLIENT_ID = "replica-verification-tool"

_handle_errors = exits_on_error("Error: ")


@dataclass(frozen=True, slots=True)
class _Partition:
    topic: str
    index: int
    leader: int
    replicas: list[int]


def _now() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


async def _metadata(client: RequestClient, pattern: re.Pattern[str]
                    ) -> tuple[dict[int, tuple[str, int]], list[_Partition]]:
    resp = await client.call(*_METADATA, {"topics": None, "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
    brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in resp.brokers}
    parts: list[_Partition] = []
    for t in resp.topics:
        name = str(t.name)
        if t.error_code != ErrorCode.none or not pattern.fullmatch(name):
            continue
        for p in t.partitions:
            parts.append(_Partition(name, int(p.partition_index), int(p.leader_id),
                                    [int(r) for r in p.replica_nodes]))
    parts.sort(key=lambda p: (p.topic, p.index))
    return brokers, parts


async def _bootstrap_metadata(clients: BrokerClients, bootstrap: str, pattern: re.Pattern[str]
                              ) -> tuple[dict[int, tuple[str, int]], list[_Partition]]:
    """The metadata from the first of the comma-separated bootstrap servers that answers."""
    addresses = bootstrap_addresses(bootstrap)
    for i, address in enumerate(addresses):
        try:
            return await _metadata(clients.get(*address), pattern)
        except RequestError:
            if i == len(addresses) - 1:
                raise
    raise AssertionError("unreachable")


def _fetch_body(topic: str, partition: int, offset: int, fetch_size: int,
                max_wait_ms: int) -> dict[str, Any]:
    wanted = {"partition": partition, "fetch_offset": offset, "partition_max_bytes": fetch_size,
              "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}
    return {"replica_id": DEBUGGING_CONSUMER_ID, "max_wait": max_wait_ms, "min_bytes": 0,
            "max_bytes": fetch_size, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "topics": [{"topic": topic, "partitions": [wanted]}],
            "forgotten_topics_data": [], "rack_id": ""}


async def _read_replica(client: RequestClient, part: _Partition, replica: int,
                        fetch_size: int, max_wait_ms: int) -> tuple[list[Record], int]:
    """Every record of the replica's log and its log end offset."""
    records: list[Record] = []
    offset = 0
    retried_start = False
    while True:
        resp = await client.call(*_FETCH, _fetch_body(part.topic, part.index, offset,
                                                      fetch_size, max_wait_ms))
        answer = resp.responses[0].partitions[0]
        err = ErrorCode(answer.error_code)
        if err == ErrorCode.offset_out_of_range and not retried_start:
            retried_start = True
            offset = int(answer.log_start_offset)
            continue
        if err != ErrorCode.none:
            raise CommandError(f"Fetching {part.topic}-{part.index} from replica {replica} "
                               f"failed: {err.name.upper()}")
        got = [r for r in decode_records(bytes(answer.records or b"")) if r.offset >= offset]
        if not got:
            if answer.records and len(answer.records) >= fetch_size:
                raise CommandError(f"A record batch of {part.topic}-{part.index} at offset "
                                   f"{offset} is larger than --fetch-size {fetch_size}")
            return records, offset
        records.extend(got)
        offset = got[-1].offset + 1


async def _verify(clients: BrokerClients, bootstrap: str, pattern: re.Pattern[str], fetch_size: int,
                  max_wait_ms: int, report_interval_ms: int,
                  echo: Callable[[str], None]) -> list[PartitionCheck]:
    try:
        echo(f"{_now()}: Getting topic metadata...")
        brokers, parts = await _bootstrap_metadata(clients, bootstrap, pattern)
        echo(f"{_now()}: Verification process is started.")
        checks: list[PartitionCheck] = []
        last_report = time.monotonic()
        for part in parts:
            order = [part.leader] + [r for r in part.replicas if r != part.leader]
            records: dict[int, list[Record]] = {}
            ends: dict[int, int] = {}
            for rid in order:
                if rid not in brokers:
                    raise CommandError(f"Replica {rid} of {part.topic}-{part.index} is not "
                                       f"available (its broker is not in the metadata)")
                client = clients.get(*brokers[rid])
                records[rid], ends[rid] = await _read_replica(client, part, rid, fetch_size,
                                                              max_wait_ms)
            checks.append(compare_partition(part.topic, part.index, records, ends))
            if time.monotonic() - last_report >= report_interval_ms / 1000:
                last_report = time.monotonic()
                echo(max_lag_line(checks, _now()))
        return checks
    except RequestError as e:
        raise CommandError(str(e)) from e
    finally:
        await clients.close()


@click.command("verify-replicas")
@bootstrap_option("--broker-list")
@command_config_option("Property file of client settings (security.protocol, ssl.*, "
                       "sasl.mechanism, sasl.jaas.config, client.id).")
@click.option("--topics-include", default=None, show_default=".*",
              help="Verify the topics whose whole name matches this regular expression.")
@click.option("--topic-white-list", default=None, metavar="TEXT",
              help="Deprecated: use --topics-include (ignored when it is given).")
@click.option("--fetch-size", type=click.IntRange(min=1), default=1024 * 1024,
              show_default=True, help="Bytes to fetch per partition per request.")
@click.option("--max-wait-ms", type=click.IntRange(min=0), default=1000, show_default=True,
              help="The longest a fetch request waits.")
@click.option("--report-interval-ms", type=click.IntRange(min=1), default=30_000,
              show_default=True, help="How often the progress line is printed.")
@click.option("--timeout-ms", type=click.IntRange(min=1), default=15_000, show_default=True,
              help="Timeout of each request (and connection), in ms.")
@_handle_errors
def verify_replicas(bootstrap_server: str, command_config: Path | None,
                    topics_include: str | None, topic_white_list: str | None, fetch_size: int,
                    max_wait_ms: int, report_interval_ms: int, timeout_ms: int) -> None:
    """Check that every replica of the matching topics holds the same records."""
    if topic_white_list is not None:
        click.echo("--topic-white-list is deprecated: use --topics-include"
                   + (" (given, so --topic-white-list is ignored)." if topics_include else "."),
                   err=True)
    if topics_include is None:
        topics_include = ".*" if topic_white_list is None else topic_white_list
    clients = BrokerClients.configured(command_config, timeout_ms, _CLIENT_ID)
    try:
        pattern = re.compile(topics_include)
    except re.error as e:
        raise CommandError(f"Invalid --topics-include regular expression "
                           f"{topics_include!r}: {e}") from e
    bootstrap_addresses(bootstrap_server)
    checks = asyncio.run(_verify(clients, bootstrap_server, pattern, fetch_size, max_wait_ms,
                                 report_interval_ms, click.echo))
    click.echo(max_lag_line(checks, _now()))
    diverged = [c.divergence for c in checks if c.divergence is not None]
    for d in diverged:
        click.echo(d.describe())
    if diverged:
        click.echo(f"{len(diverged)} of {len(checks)} partitions diverge")
        raise ErrorsReported()
    click.echo(f"No divergence among {len(checks)} partitions")
