"""`wherry groups`: a kafka-consumer-groups.sh look-alike speaking the Kafka protocol.

Subcommands: list, describe, delete, reset-offsets, delete-offsets. All of them go over the wire
(through confluent-kafka's AdminClient; delete-offsets, which it lacks, with wherry's own client)
and take `--bootstrap-server HOST:PORT`, `--command-config FILE`
(client properties) and `--timeout-ms` (per-request timeout; Kafka's `--timeout` is accepted too).

Output follows Kafka 3.9's tool: the same column names, the same padding rules and the same
messages ("Consumer group 'g' has no active members.", "Assignments can only be reset if the group
'g' is inactive, but the current state is Stable.", ...). Differences, on purpose: every error
goes to stderr as `Error: ...` and makes the command exit with status 1 (Kafka prints some of them
on stdout and exits 0), trailing blanks of table lines are trimmed, and groups and partitions are
printed in sorted order.

This module holds the click commands; `group_model` the views of groups, `group_service` the
admin calls, `group_render` the tables, `group_reset` the planning of `reset-offsets` and
`group_offset_delete` the OffsetDelete requests of `delete-offsets`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import ParamSpec, TypeVar

import click
from confluent_kafka import KafkaException
from confluent_kafka.admin import OffsetSpec
from kio.schema.errors import ErrorCode

from wherry.cli import group_tool
from wherry.cli.client_security import client_security
from wherry.cli.common import CommandError, ErrorsReported, exits_on_error, load_properties_file
from wherry.cli.group_model import (
    REBALANCING,
    TP,
    CommandFailed,
    GroupView,
    OffsetRow,
    offset_rows,
    parse_states,
)
from wherry.cli.group_offset_delete import OffsetDeleteResult, delete_offsets
from wherry.cli.group_render import (
    render_deleted_offsets,
    render_group_states,
    render_members,
    render_offsets,
    render_reset,
    render_reset_csv,
    render_state,
)
from wherry.cli.group_reset import (
    ResetOptions,
    Scenario,
    parse_topic_arg,
    partitions_to_reset,
    plan_reset,
    reset_spec,
)
from wherry.cli.group_service import GroupService
from wherry.cli.kafka_errors import kafka_error_text, kafka_exception_text

P = ParamSpec("P")
R = TypeVar("R")


# --------------------------------------------------------------------------------------------
# Click plumbing


def _error_text(exc: CommandError | KafkaException) -> str:
    if isinstance(exc, CommandFailed):
        return f"Executing consumer group command failed due to {exc}"
    if isinstance(exc, CommandError):
        return str(exc)
    return f"Executing consumer group command failed due to {kafka_exception_text(exc)}"


_handle_errors = exits_on_error("Error: ", _error_text)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _resolve_groups(svc: GroupService, groups: Sequence[str], all_groups: bool) -> list[str]:
    return [g for g, _ in svc.list_groups()] if all_groups else _unique(groups)


def _should_print(group: GroupView, rows: int) -> bool:
    """Kafka's shouldPrintMemberState: messages for Dead/Empty/rebalancing groups."""
    if not group.exists:
        click.echo(f"Error: Consumer group '{group.group_id}' does not exist.", err=True)
        return False
    if group.state == "Empty":
        click.echo(f"\nConsumer group '{group.group_id}' has no active members.", err=True)
    elif group.state in REBALANCING:
        click.echo(f"\nWarning: Consumer group '{group.group_id}' is rebalancing.", err=True)
    return rows > 0


# --------------------------------------------------------------------------------------------
# Commands


@click.group()
def groups() -> None:
    """List, describe, delete consumer groups, reset or delete their offsets (like
    kafka-consumer-groups.sh)."""


@groups.command(name="list")
@group_tool.tool_options
@click.option("--state", "states", multiple=True, is_flag=False, flag_value="",
              metavar="[STATE[,STATE...]]",
              help="Show each group's state; with a value, only groups in these states.")
@_handle_errors
def list_(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
          states: tuple[str, ...]) -> None:
    """List consumer groups, one per line."""
    wanted = parse_states(states)
    svc = GroupService.connect(bootstrap_server, command_config, timeout_ms)
    listing = svc.list_groups(wanted)
    if states:
        click.echo(render_group_states(listing), nl=False)
    else:
        for group_id, _ in listing:
            click.echo(group_id)


@groups.command()
@_handle_errors
@group_tool.selection_options("consumer")
@group_tool.describe_view_options(
    members="Describe the members of the group.", state="Describe the state of the group.",
    offsets="Describe the group's offsets per partition (the default).",
    verbose="With --members: each member's assignment.")
def describe(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
             groups: tuple[str, ...], all_groups: bool, members: bool, state: bool,
             offsets: bool, verbose: bool) -> None:
    """Describe consumer groups: offsets and lag (default), --members or --state."""
    svc = GroupService.connect(bootstrap_server, command_config, timeout_ms)
    views = svc.describe_groups(_resolve_groups(svc, groups, all_groups))
    failed = False
    for group_id in sorted(views):
        group = views[group_id]
        failed |= not group.exists
        if members:
            if _should_print(group, len(group.members)):
                click.echo(render_members(group, verbose), nl=False)
        elif state:
            if _should_print(group, 1):
                click.echo(render_state(group), nl=False)
        else:
            rows: list[OffsetRow] = []
            if group.exists:
                committed = svc.committed_offsets(group_id)
                wanted = set(committed) | {tp for m in group.members for tp in m.assignment}
                log_end = svc.log_offsets(wanted, OffsetSpec.latest())
                rows = offset_rows(group, committed, log_end)
            if _should_print(group, len(rows)):
                click.echo(render_offsets(rows), nl=False)
    if failed:
        raise ErrorsReported


def _deletion(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
              groups: Sequence[str], all_groups: bool) -> dict[str, str | None] | None:
    svc = GroupService.connect(bootstrap_server, command_config, timeout_ms)
    ids = _resolve_groups(svc, groups, all_groups)
    if not ids:
        return None
    results = svc.delete_groups(ids)
    return {g: None if (e := results.get(g)) is None else kafka_exception_text(e) for g in ids}


delete = group_tool.add_delete_command(
    groups, "consumer", "Delete consumer groups (only groups without active members).",
    _handle_errors, _deletion)


def _read_plan(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise CommandError(f"Cannot read {path}: {e.strerror or e}") from e


@groups.command(name="reset-offsets")
@group_tool.selection_options("consumer", checked=False)
@group_tool.reset_options(
    "topic", "all-topics", "to-offset", "shift-by", "to-datetime", "by-duration", "to-earliest",
    "to-latest", "to-current", "from-file", "dry-run", "export",
    execute_help="Commit the new offsets.")
@_handle_errors
def reset_offsets(
    bootstrap_server: str, command_config: Path | None, timeout_ms: int,
    groups: tuple[str, ...], all_groups: bool, topics: tuple[str, ...], all_topics: bool,
    to_offset: int | None, shift_by: int | None, to_datetime: str | None,
    by_duration: str | None, to_earliest: bool, to_latest: bool, to_current: bool,
    from_file: Path | None, dry_run: bool, execute: bool, export: bool,
) -> None:
    """Reset the committed offsets of inactive groups."""
    if dry_run and execute:
        raise CommandError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
    group_tool.selected_groups("reset-offsets", groups, all_groups)
    options = ResetOptions(to_offset, shift_by, to_datetime, by_duration, to_earliest,
                           to_latest, to_current, from_file)
    spec = reset_spec(options, groups, int(time.time() * 1000), _read_plan)
    if topics and all_topics:
        raise CommandError('Option "[topic]" can\'t be used with option "[all-topics]"')
    if not topics and not all_topics and spec.scenario is not Scenario.FROM_FILE:
        raise CommandError("One of the reset scopes should be defined: --all-topics, --topic.")
    topic_args = [parse_topic_arg(t) for t in topics]
    if not execute and not dry_run:
        click.echo("WARN: No action will be performed as the --execute option is missing. "
                   "In a future major release, the default behavior of this command will be to "
                   "prompt the user before executing the reset rather than doing a dry run. You "
                   "should add the --dry-run option explicitly if you are scripting this command "
                   "and want to keep the current default behavior without prompting.", err=True)

    svc = GroupService.connect(bootstrap_server, command_config, timeout_ms)
    ids = _resolve_groups(svc, groups, all_groups)
    views = svc.describe_groups(ids)
    known = svc.topic_partitions() if ids else {}
    plans: dict[str, dict[TP, int]] = {}
    refused = False
    for group_id in ids:
        group = views[group_id]
        if group.state not in ("Empty", "Dead"):
            click.echo(f"Error: Assignments can only be reset if the group '{group_id}' is "
                       f"inactive, but the current state is {group.state}.", err=True)
            refused = True
            continue
        needs_committed = all_topics or spec.scenario in (Scenario.SHIFT_BY,
                                                          Scenario.TO_CURRENT)
        committed = svc.committed_offsets(group_id) if needs_committed else {}
        partitions = partitions_to_reset(spec, group_id, topic_args, all_topics, committed,
                                         known)
        if spec.scenario is Scenario.FROM_FILE and not partitions:
            click.echo(f"Error: No reset plan for group {group_id} found.", err=True)
        logs = svc.offsets_for_reset(spec, partitions, committed)
        plan, warnings = plan_reset(spec, group_id, partitions, logs)
        for w in warnings:
            click.echo(f"WARN: {w}", err=True)
        if execute:
            svc.alter_offsets(group_id, plan)
        plans[group_id] = plan
    if plans:
        if export:
            click.echo(render_reset_csv(plans, with_group=len(ids) > 1))
        else:
            click.echo(render_reset(plans), nl=False)
    if refused:
        raise ErrorsReported


# The request's own error, as Kafka's tool words it (a partition's error: see the table).
_DELETE_OFFSETS_ERRORS = {
    ErrorCode.invalid_group_id: "'{group}' is not valid.",
    ErrorCode.group_id_not_found: "'{group}' does not exist.",
    ErrorCode.group_authorization_failed: "Access to '{group}' is not authorized.",
    ErrorCode.non_empty_group: "Deleting offsets of a consumer group '{group}' is forbidden if "
                               "the group is not empty.",
    ErrorCode.group_subscribed_to_topic: "Encounter some partition level error, see the "
                                         "follow-up details:",
    ErrorCode.topic_authorization_failed: "Encounter some partition level error, see the "
                                          "follow-up details:",
    ErrorCode.unknown_topic_or_partition: "Encounter some partition level error, see the "
                                          "follow-up details:",
}


@groups.command(name="delete-offsets")
@group_tool.tool_options
@click.option("--group", "groups", multiple=True, metavar="GROUP", help="The consumer group.")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,P...]",
              help="Topic (optionally with partitions) whose offsets to delete (repeatable).")
@_handle_errors
def delete_offsets_(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
                    groups: tuple[str, ...], topics: tuple[str, ...]) -> None:
    """Delete a group's committed offsets of topics (not of topics it is consuming)."""
    if not groups or not topics:
        raise CommandError("Option [delete-offsets] takes the following options: [group], "
                           "[topic]")
    if len(set(groups)) > 1:
        raise CommandError("Option [delete-offsets] supports only one [group] at a time")
    group = groups[0]
    props = load_properties_file(command_config)
    topic_args = [parse_topic_arg(t) for t in topics]
    known: dict[str, list[int]] = {}
    if any(parts is None for _, parts in topic_args):
        known = GroupService.connect(bootstrap_server, command_config,
                                     timeout_ms).topic_partitions()
    statuses: dict[TP, str] = {}
    partitions: dict[TP, None] = {}
    for topic, parts in topic_args:
        if parts is None and topic not in known:  # Kafka's "Not Provided" row
            unknown = kafka_error_text(ErrorCode.unknown_topic_or_partition)
            statuses[(topic, -1)] = f"Error: {unknown}"
        for p in parts if parts is not None else known.get(topic, ()):
            partitions[(topic, p)] = None
    result = (delete_offsets(bootstrap_server, client_security(props), group, list(partitions),
                             timeout_ms / 1000,
                             props.get("client.id", GroupService.CLIENT_ID))
              if partitions else OffsetDeleteResult(ErrorCode.none, {}))
    for tp, err in result.partitions.items():
        statuses[tp] = "Successful" if err == ErrorCode.none else "Error: " + kafka_error_text(err)
    # Kafka's admin client fails the whole call with the first partition's error, if any
    error = result.error
    if error == ErrorCode.none:
        error = next((e for _, e in sorted(result.partitions.items()) if e != ErrorCode.none),
                     ErrorCode.none)
    if error == ErrorCode.none:
        click.echo(f"Request succeed for deleting offsets with topic {', '.join(topics)} "
                   f"group {group}")
    else:
        wording = _DELETE_OFFSETS_ERRORS.get(
            error, f"Encounter some unknown error: {error.name.upper()}")
        click.echo("Error: " + wording.format(group=group), err=True)
    click.echo(render_deleted_offsets(statuses), nl=False)
    if error != ErrorCode.none or any(s != "Successful" for s in statuses.values()):
        raise ErrorsReported
