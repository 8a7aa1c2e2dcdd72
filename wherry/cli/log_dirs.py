"""`wherry log-dirs --describe`: a kafka-log-dirs.sh look-alike.

The brokers come from the cluster's metadata (confluent-kafka); each chosen broker is asked
DescribeLogDirs (API 35) directly with wherry's outbound client, as librdkafka has no such
call. Output is Kafka's: "Querying brokers for log directories information", "Received log
directory information from brokers 0,1,2" and one line of JSON
(`{"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":..,"error":null,"partitions":[
{"partition":"t-0","size":..,"offsetLag":..,"isFuture":false}]}]}]}`), `--topic-list`
filtering the partitions. Failures are `Error: ...` and exit status 1.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import click
from kio.schema.errors import ErrorCode

from wherry.cli.common import AdminService, CommandError, admin_options, exits_on_error
from wherry.outbound.client import RequestClient, RequestError
from wherry.outbound.connection import OutboundConnection

DESCRIBE_LOG_DIRS = 35
REQUEST_VERSION = 1  # Kafka 1.0+; no flexible fields needed
_ERROR_CLASSES = {
    ErrorCode.kafka_storage_error: "org.apache.kafka.common.errors.KafkaStorageException",
    ErrorCode.unknown_server_error: "org.apache.kafka.common.errors.UnknownServerException",
}

_handle_errors = exits_on_error("Error: ")


class LogDirsService(AdminService):
    CLIENT_ID = "wherry-log-dirs"


def parse_id_list(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise CommandError(f"{what} must be a comma-separated list of broker ids: {text!r}"
                           ) from None


def _error_name(code: int) -> str | None:
    if code == 0:
        return None
    err = ErrorCode(code)
    return _ERROR_CLASSES.get(err, f"org.apache.kafka.common.errors.{err.name}")


def log_dirs_json(answers: Iterable[tuple[int, Any]], topics: set[str]) -> str:
    """Kafka's `formatAsJson`: broker → log dirs → partitions (of `topics`, or all)."""
    brokers = []
    for broker, response in answers:
        dirs = []
        for result in response.results:
            partitions = [
                {"partition": f"{t.name}-{p.partition_index}", "size": int(p.partition_size),
                 "offsetLag": int(p.offset_lag), "isFuture": bool(p.is_future_key)}
                for t in result.topics if not topics or t.name in topics
                for p in t.partitions
            ]
            dirs.append({"logDir": result.log_dir, "error": _error_name(int(result.error_code)),
                         "partitions": partitions})
        brokers.append({"broker": broker, "logDirs": dirs})
    return json.dumps({"version": 1, "brokers": brokers}, separators=(",", ":"))


async def call_broker(address: tuple[str, int], api_key: int, version: int, body: Any,
                      timeout_s: float, client_id: str) -> Any:
    """One request to one broker (`address`) on a connection of its own; RequestError if
    unanswered."""
    conn = OutboundConnection(address[0], address[1], connect_timeout_s=timeout_s,
                              request_timeout_s=timeout_s)
    client = RequestClient(conn.connect, client_id=client_id,
                           peer=f"{address[0]}:{address[1]}")
    try:
        return await client.call(api_key, version, body)
    finally:
        await conn.close()


async def _describe_all(addresses: Sequence[tuple[int, tuple[str, int]]],
                        timeout_s: float) -> list[tuple[int, Any]]:
    answers = await asyncio.gather(*(
        call_broker(a, DESCRIBE_LOG_DIRS, REQUEST_VERSION, {"topics": None}, timeout_s,
                    LogDirsService.CLIENT_ID)
        for _, a in addresses))
    return [(b, r) for (b, _), r in zip(addresses, answers, strict=True)]


@click.command("log-dirs")
@admin_options("Timeout of each request, in ms (wherry extra).")
@click.option("--describe", is_flag=True, help="Describe the brokers' log directories.")
@click.option("--broker-list", metavar="0,1,2",
              help="The brokers to query (default: all of the cluster's).")
@click.option("--topic-list", metavar="t1,t2",
              help="Only the partitions of these topics (default: all).")
@_handle_errors
def log_dirs(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
             describe: bool, broker_list: str | None, topic_list: str | None) -> None:
    """Query brokers for their log directories and the partitions in them."""
    if not describe:
        raise CommandError("--describe is required (the only action)")
    wanted = parse_id_list(broker_list, "--broker-list")
    topics = {t.strip() for t in (topic_list or "").split(",") if t.strip()}
    service = LogDirsService.connect(bootstrap_server, command_config, timeout_ms)
    cluster = service.broker_addresses()
    chosen = sorted(cluster) if wanted is None else wanted
    missing = [b for b in chosen if b not in cluster]
    if missing:
        raise CommandError(
            f"The given brokers do not exist from --broker-list: {','.join(map(str, missing))}."
            f" Current existent brokers: {','.join(map(str, sorted(cluster)))}")
    click.echo("Querying brokers for log directories information")
    try:
        answers = asyncio.run(_describe_all([(b, cluster[b]) for b in chosen],
                                            service.timeout_s))
    except RequestError as e:
        raise CommandError(f"DescribeLogDirs failed: {e}") from e
    click.echo(f"Received log directory information from brokers {','.join(map(str, chosen))}")
    click.echo(log_dirs_json(answers, topics))
