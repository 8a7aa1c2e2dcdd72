"""`wherry transactions`: a kafka-transactions.sh look-alike, to see transactions and to find
and abort hanging ones.

Subcommands, with Kafka's tables (columns padded to their widest cell, as Kafka's
prettyPrintTable pads them, trailing blanks cut):

* `list [--duration-filter MS]`: every coordinator's transactional ids (those whose transaction
  has run longer than MS) with their producer id and state;
* `describe --transactional-id ID`: its coordinator, producer id and epoch, state, timeout,
  the open transaction's start time and duration (None when none is open) and partitions;
* `describe-producers --topic T --partition P [--broker-id B]`: the producers the partition's
  leader (or broker B's replica) keeps state for, and the start offset of each one's open
  transaction;
* `find-hanging (--broker-id B | --topic T [--partition P]) [--max-transaction-timeout MIN]`:
  the open transactions older than MIN minutes (15) whose coordinator no longer has them in
  progress on that partition: their records hold back the partition's last stable offset, so
  read_committed consumers stop there;
* `abort --topic T --partition P --start-offset O` (or `--producer-id`, `--producer-epoch`,
  `--coordinator-epoch`): an ABORT marker for such a transaction, written by the partition's
  leader (WriteTxnMarkers: cluster action permission needed).

Errors are `Error: ...` on stderr, with Kafka's sentences, and exit status 1.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import ParamSpec, TypeVar

import click

from wherry.cli.common import CommandError, admin_options, exits_on_error
from wherry.cli.kafka_errors import kafka_error_message
from wherry.cli.reassign_json import TP, tp_str
from wherry.cli.transactions_wire import ProducerRow, TxnWire
from wherry.cli.wire_clients import BrokerClients, WireCallError

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

_CLIENT_ID = "wherry-transactions"
_handle_errors = exits_on_error("Error: ")
_common_options = admin_options("Timeout of each request to the cluster, in ms (wherry extra).")


def pretty_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Kafka's ToolsUtils.prettyPrintTable: each cell padded to its column's widest, cells
    apart by a tab (trailing blanks cut)."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = ["\t".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in [headers, *rows]]
    return "\n".join(lines)


def _failed(what: str, e: WireCallError) -> CommandError:
    """Kafka's printErrorAndExit: the sentence, then the exception's message."""
    why = kafka_error_message(e.code) if e.code is not None else str(e)
    return CommandError(f"{what}: {why}")


def _run(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
         work: Callable[[TxnWire], Awaitable[T]]) -> T:
    clients = BrokerClients.configured(command_config, timeout_ms, _CLIENT_ID)
    wire = TxnWire(bootstrap_server, clients)

    async def main() -> T:
        try:
            return await work(wire)
        finally:
            await clients.close()

    return asyncio.run(main())


def _producer_cells(p: ProducerRow) -> list[str]:
    return [str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
            str(p.last_sequence), str(p.last_timestamp),
            "None" if p.txn_start_offset is None else str(p.txn_start_offset)]


@click.group()
def transactions() -> None:
    """See transactions, find and abort hanging ones (like kafka-transactions.sh)."""


@transactions.command(name="list")
@_common_options
@click.option("--duration-filter", type=int, metavar="MS",
              help="Only transactions running longer than this (ms); < 0: all.")
@_handle_errors
def list_(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
          duration_filter: int | None) -> None:
    """List the transactional ids of every coordinator."""
    try:
        listed = _run(bootstrap_server, command_config, timeout_ms,
                      lambda w: w.list_transactions(duration_filter))
    except WireCallError as e:
        raise _failed("Failed to list transactions", e) from e
    rows = [[tid, str(coordinator), str(pid), state] for coordinator, tid, pid, state in listed]
    click.echo(pretty_table(["TransactionalId", "Coordinator", "ProducerId",
                             "TransactionState"], rows))


@transactions.command()
@_common_options
@click.option("--transactional-id", required=True, help="The transactional id.")
@_handle_errors
def describe(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
             transactional_id: str) -> None:
    """Describe the state of a transactional id."""
    try:
        d = _run(bootstrap_server, command_config, timeout_ms,
                 lambda w: w.describe_transaction(transactional_id))
    except WireCallError as e:
        raise _failed("Failed to describe transaction state of transactional-id "
                      f"`{transactional_id}`", e) from e
    now = int(time.time() * 1000)
    start = "None" if d.start_ms is None else str(d.start_ms)
    duration = "None" if d.start_ms is None else str(now - d.start_ms)
    click.echo(pretty_table(
        ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
         "TopicPartitions"],
        [[str(d.coordinator_id), d.transactional_id, str(d.producer_id),
          str(d.producer_epoch), d.state, str(d.timeout_ms), start, duration,
          ",".join(tp_str(tp) for tp in d.partitions)]]))


_PRODUCER_HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                     "LastTimestamp", "CurrentTransactionStartOffset"]


@transactions.command(name="describe-producers")
@_common_options
@click.option("--topic", required=True, help="The topic.")
@click.option("--partition", required=True, type=int, help="The partition.")
@click.option("--broker-id", type=int, help="A replica's broker (default: the leader).")
@_handle_errors
def describe_producers(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
                       topic: str, partition: int, broker_id: int | None) -> None:
    """Describe the producers a partition's replica keeps state for."""
    tp = (topic, partition)
    try:
        producers = _run(bootstrap_server, command_config, timeout_ms,
                         lambda w: w.describe_producers(tp, broker_id))
    except WireCallError as e:
        where = "leader" if broker_id is None else f"broker {broker_id}"
        raise _failed(f"Failed to describe producers for partition {tp_str(tp)} on {where}",
                      e) from e
    click.echo(pretty_table(_PRODUCER_HEADERS, [_producer_cells(p) for p in producers]))


@transactions.command()
@_common_options
@click.option("--topic", required=True, help="The topic.")
@click.option("--partition", required=True, type=int, help="The partition.")
@click.option("--start-offset", type=int, help="The start offset of the transaction to abort.")
@click.option("--producer-id", type=int, help="Instead of --start-offset: the producer id ...")
@click.option("--producer-epoch", type=int, help="... its epoch ...")
@click.option("--coordinator-epoch", type=int, help="... and its coordinator's epoch.")
@_handle_errors
def abort(bootstrap_server: str, command_config: Path | None, timeout_ms: int, topic: str,
          partition: int, start_offset: int | None, producer_id: int | None,
          producer_epoch: int | None, coordinator_epoch: int | None) -> None:
    """Abort a hanging transaction (cluster action permission needed)."""
    tp = (topic, partition)
    if start_offset is None and producer_id is None:
        raise CommandError("The transaction to abort must be identified either with "
                           "--start-offset (for brokers on 3.0 or above) or with "
                           "--producer-id, --producer-epoch, and --coordinator-epoch (for "
                           "older brokers)")
    if start_offset is None:
        if producer_epoch is None:
            raise CommandError("Missing required argument --producer-epoch")
        if coordinator_epoch is None:
            raise CommandError("Missing required argument --coordinator-epoch")

    async def work(w: TxnWire) -> None:
        if start_offset is None:
            assert producer_id is not None and producer_epoch is not None
            spec = (producer_id, producer_epoch, max(0, coordinator_epoch or 0))
        else:
            try:
                producers = await w.describe_producers(tp)
            except WireCallError as e:
                raise _failed(f"Failed to validate producer state for partition {tp_str(tp)}",
                              e) from e
            found = next((p for p in producers if p.txn_start_offset == start_offset), None)
            if found is None:
                raise CommandError("Could not find any open transactions starting at offset "
                                   f"{start_offset} on partition {tp_str(tp)}")
            # -1 when the producer has had no marker yet: 0 is at most any coordinator's
            spec = (found.producer_id, found.producer_epoch, max(0, found.coordinator_epoch))
        try:
            await w.abort(tp, *spec)
        except WireCallError as e:
            raise _failed(f"Failed to abort transaction of producer {spec[0]} (epoch "
                          f"{spec[1]}, coordinator epoch {spec[2]}) on partition "
                          f"{tp_str(tp)}", e) from e

    _run(bootstrap_server, command_config, timeout_ms, work)


_HANGING_HEADERS = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                    "StartOffset", "LastTimestamp", "Duration(min)"]


async def _hanging(w: TxnWire, topic: str | None, partition: int | None,
                   broker_id: int | None, max_timeout_ms: int, now_ms: int
                   ) -> list[tuple[TP, ProducerRow]]:
    """Kafka's find-hanging: the open transactions older than the timeout whose coordinator
    does not list their partition (or knows no transactional id of their producer)."""
    if topic is not None and partition is not None:
        tps: list[TP] = [(topic, partition)]
    else:
        _, parts = await w.partitions(None if topic is None else [topic])
        tps = [(p.topic, p.partition) for p in parts
               if broker_id is None or broker_id in p.replicas]
    candidates: list[tuple[TP, ProducerRow]] = []
    for tp, producers in sorted((await w.producers_of(tps, broker_id)).items()):
        if isinstance(producers, int):
            raise WireCallError(producers, f"DescribeProducers of {tp_str(tp)}")
        candidates += [(tp, p) for p in producers if p.txn_start_offset is not None
                       and now_ms - p.last_timestamp > max_timeout_ms]
    if not candidates:
        return []
    pids = sorted({p.producer_id for _, p in candidates})
    ids = {pid: tid for _, tid, pid, _ in await w.list_transactions(producer_ids=pids)}
    described: dict[str, set[TP] | None] = {}
    for tid in set(ids.values()):
        try:
            described[tid] = set((await w.describe_transaction(tid)).partitions)
        except WireCallError as e:
            if e.code is None:
                raise
            described[tid] = None  # no longer known: hanging
    hanging = []
    for tp, p in candidates:
        owner = ids.get(p.producer_id)
        in_progress = described.get(owner) if owner is not None else None
        if in_progress is None or tp not in in_progress:
            hanging.append((tp, p))
    return hanging


@transactions.command(name="find-hanging")
@_common_options
@click.option("--broker-id", type=int, help="Search the partitions this broker holds.")
@click.option("--topic", help="Search this topic's partitions.")
@click.option("--partition", type=int, help="Search only this partition (with --topic).")
@click.option("--max-transaction-timeout", type=int, default=15, show_default=True,
              metavar="MINUTES", help="Transactions open longer than this are candidates.")
@_handle_errors
def find_hanging(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
                 broker_id: int | None, topic: str | None, partition: int | None,
                 max_transaction_timeout: int) -> None:
    """Find hanging transactions."""
    if topic is None and broker_id is None:
        raise CommandError("The `find-hanging` command requires either --topic or --broker-id "
                           "to limit the scope of the search")
    if partition is not None and topic is None:
        raise CommandError("The --partition argument requires --topic to be provided")
    now = int(time.time() * 1000)
    try:
        found = _run(bootstrap_server, command_config, timeout_ms,
                     lambda w: _hanging(w, topic, partition, broker_id,
                                        max_transaction_timeout * 60_000, now))
    except WireCallError as e:
        raise _failed("Failed to find hanging transactions", e) from e
    rows = [[tp[0], str(tp[1]), str(p.producer_id), str(p.producer_epoch),
             str(p.coordinator_epoch), str(p.txn_start_offset), str(p.last_timestamp),
             str((now - p.last_timestamp) // 60_000)] for tp, p in found]
    click.echo(pretty_table(_HANGING_HEADERS, rows))
