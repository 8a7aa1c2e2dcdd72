"""`wherry share-groups`: a kafka-share-groups.sh look-alike for share groups (KIP-932).

* `list [--state [STATES]]`: the share groups (with their states);
* `describe (--group G ... | --all-groups) [--offsets | --members | --state] [--verbose]`: the
  share-partitions' start offsets (with the leader epoch under `--verbose`) and the records
  left to deliver (LAG, -1 unless the share coordinator leads the partition); the members,
  their hosts, client ids and assignments; or the coordinator, state and member count;
* `delete (--group G ... | --all-groups)`: groups without members;
* `reset-offsets --group G (--topic T[:P,...] | --all-topics) (--to-earliest | --to-latest |
  --to-datetime T) [--dry-run | --execute]`: a group without members starts again there;
* `delete-offsets --group G --topic T ...`: its state of those topics is forgotten.

The requests go to the brokers with wherry's own client (ListGroups to every broker,
ShareGroupDescribe, Describe/Alter/DeleteShareGroupOffsets and DeleteGroups to the group's
coordinator; the log offsets of a reset through confluent-kafka);
confluent-kafka's AdminClient has no share-group calls. The tables and messages are Kafka's;
errors go to stderr as `Error: ...` with exit status 1, trailing blanks are cut and groups are
printed in sorted order, as `wherry groups` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from kio.schema.errors import ErrorCode

from wherry.cli import group_tool
from wherry.cli.common import CommandError, ErrorsReported, exits_on_error
from wherry.cli.kafka_errors import kafka_error_text
from wherry.cli.wire_clients import BrokerClients, WireCallError, WireTool

T = TypeVar("T")

_LIST_GROUPS = (16, 5)
_SHARE_GROUP_DESCRIBE = (77, 1)
_DESCRIBE_SHARE_GROUP_OFFSETS = (90, 1)
_DELETE_GROUPS = (42, 2)
_ALTER_SHARE_GROUP_OFFSETS = (91, 0)
_DELETE_SHARE_GROUP_OFFSETS = (92, 0)
_GROUP_KEY = 0
_CLIENT_ID = "wherry-share-groups"
_STATES = {"empty": "Empty", "stable": "Stable", "dead": "Dead"}
MISSING = "-"

_handle_errors = exits_on_error("Error: ")


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    host: str
    client_id: str
    epoch: int
    assignment: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ShareGroup:
    group_id: str
    coordinator: str  # host:port  (id)
    state: str  # Kafka's GroupState name; Dead: no such group
    group_epoch: int
    assignment_epoch: int
    members: tuple[Member, ...]


class ShareGroupsWire(WireTool):
    async def groups(self, types: Sequence[str] = ("share",)) -> list[tuple[str, str]]:
        """(group id, state) of every broker's groups of `types` (none: every type),
        sorted."""
        out = []
        for address in (await self.brokers()).values():
            resp = await self.call(address, _LIST_GROUPS,
                                   {"states_filter": [], "types_filter": list(types)})
            if resp.error_code != ErrorCode.none:
                raise WireCallError(int(resp.error_code))
            out += [(str(g.group_id), str(g.group_state)) for g in resp.groups]
        return sorted(out)

    async def describe(self, group: str, timeout_s: float) -> ShareGroup:
        brokers = await self.brokers()
        coordinator, resp = await self.at_coordinator(
            group, _GROUP_KEY, _SHARE_GROUP_DESCRIBE,
            {"group_ids": [group], "include_authorized_operations": False},
            lambda r: int(r.groups[0].error_code), timeout_s)
        (g,) = resp.groups
        host, port = brokers.get(coordinator, ("?", -1))
        where = f"{host}:{port}  ({coordinator})"
        if g.error_code == ErrorCode.group_id_not_found:
            return ShareGroup(group, where, "Dead", -1, -1, ())
        if g.error_code != ErrorCode.none:
            raise WireCallError(int(g.error_code), str(g.error_message or ""))
        members = tuple(sorted((Member(
            str(m.member_id), str(m.client_host), str(m.client_id), int(m.member_epoch),
            tuple(sorted((str(tp.topic_name), int(p)) for tp in m.assignment.topic_partitions
                         for p in tp.partitions)))
            for m in g.members), key=lambda m: m.member_id))
        return ShareGroup(group, where, str(g.group_state), int(g.group_epoch),
                          int(g.assignment_epoch), members)

    async def offsets(self, group: str, timeout_s: float
                      ) -> list[tuple[str, int, int, int, int]]:
        """(topic, partition, start offset, leader epoch, lag) of the group's share-partitions."""
        _, resp = await self.at_coordinator(
            group, _GROUP_KEY, _DESCRIBE_SHARE_GROUP_OFFSETS,
            {"groups": [{"group_id": group, "topics": None}]},
            lambda r: int(r.groups[0].error_code), timeout_s)
        (g,) = resp.groups
        if g.error_code not in (ErrorCode.none, ErrorCode.group_id_not_found):
            raise WireCallError(int(g.error_code), str(g.error_message or ""))
        return sorted((str(t.topic_name), int(p.partition_index), int(p.start_offset),
                       int(p.leader_epoch), int(p.lag))
                      for t in g.topics for p in t.partitions
                      if p.error_code == ErrorCode.none)

    async def alter(self, group: str, offsets: dict[tuple[str, int], int],
                    timeout_s: float) -> dict[tuple[str, int], int]:
        """AlterShareGroupOffsets: each partition's error code (the request's, if any)."""
        topics: dict[str, list[dict[str, int]]] = {}
        for (t, p), offset in sorted(offsets.items()):
            topics.setdefault(t, []).append({"partition_index": p, "start_offset": offset})
        _, resp = await self.at_coordinator(
            group, _GROUP_KEY, _ALTER_SHARE_GROUP_OFFSETS,
            {"group_id": group, "topics": [{"topic_name": t, "partitions": ps}
                                           for t, ps in topics.items()]},
            lambda r: int(r.error_code), timeout_s)
        if resp.error_code != ErrorCode.none:
            return dict.fromkeys(offsets, int(resp.error_code))
        return {(str(t.topic_name), int(p.partition_index)): int(p.error_code)
                for t in resp.responses for p in t.partitions}

    async def delete_offsets(self, group: str, topics: Sequence[str], timeout_s: float
                             ) -> tuple[int, str | None, dict[str, tuple[int, str | None]]]:
        """DeleteShareGroupOffsets: the request's error and message, each topic's."""
        _, resp = await self.at_coordinator(
            group, _GROUP_KEY, _DELETE_SHARE_GROUP_OFFSETS,
            {"group_id": group, "topics": [{"topic_name": t} for t in topics]},
            lambda r: int(r.error_code), timeout_s)
        per_topic = {str(t.topic_name): (int(t.error_code), t.error_message)
                     for t in resp.responses}
        return int(resp.error_code), resp.error_message, per_topic

    async def delete(self, group: str, timeout_s: float) -> int:
        _, resp = await self.at_coordinator(
            group, _GROUP_KEY, _DELETE_GROUPS, {"groups_names": [group]},
            lambda r: int(r.results[0].error_code), timeout_s)
        return int(resp.results[0].error_code)


def _run(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
         work: Callable[[ShareGroupsWire], Awaitable[T]]) -> T:
    clients = BrokerClients.configured(command_config, timeout_ms, _CLIENT_ID)

    async def main() -> T:
        try:
            return await work(ShareGroupsWire(bootstrap_server, clients))
        except WireCallError as e:
            why = kafka_error_text(e.code) if e.code is not None else str(e)
            raise CommandError(f"Executing share group command failed due to {why}") from e
        finally:
            await clients.close()

    return asyncio.run(main())


def group_ids(bootstrap_server: str, command_config: Path | None, timeout_ms: int) -> list[str]:
    """The id of every group of the cluster, of every type (classic, consumer, share)."""
    async def work(w: ShareGroupsWire) -> list[str]:
        return [g for g, _ in await w.groups(types=())]

    return _run(bootstrap_server, command_config, timeout_ms, work)


def _table(widths: Sequence[int], rows: Sequence[Sequence[object]]) -> str:
    """Java's `%-Ns` columns a blank apart, the last unpadded, after an empty line."""
    lines = []
    for row in rows:
        cells = [str(c) for c in row]
        lines.append(" ".join([*(c.ljust(w) for c, w in zip(cells[:-1], widths,
                                                           strict=False)), cells[-1]]).rstrip())
    return "\n" + "\n".join(lines) + "\n"


def _assignment(member: Member) -> str:
    """Kafka's `topic:0,1;other:2`."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in member.assignment:
        by_topic.setdefault(topic, []).append(partition)
    return ";".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items()))


def render_offsets(group: str, rows: Sequence[tuple[str, int, int, int, int]],
                   verbose: bool) -> str:
    topic_w = max([15, *(len(r[0]) for r in rows)])
    group_w = max(15, len(group))
    if verbose:
        return _table((group_w, topic_w, 10, 13, 13), [
            ("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"),
            *((group, t, p, e if e >= 0 else MISSING, o, lag) for t, p, o, e, lag in rows)])
    return _table((group_w, topic_w, 10, 13), [
        ("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"),
        *((group, t, p, o, lag) for t, p, o, _, lag in rows)])


def render_members(g: ShareGroup, verbose: bool) -> str:
    widths = [max(15, len(g.group_id)),
              max([15, *(len(m.member_id) for m in g.members)]),
              max([15, *(len(m.host) for m in g.members)]),
              max([15, *(len(m.client_id) for m in g.members)]), 12]
    header: list[object] = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        widths.append(13)
        header.append("MEMBER-EPOCH")
    rows: list[Sequence[object]] = [[*header, "ASSIGNMENT"]]
    for m in g.members:
        row: list[object] = [g.group_id, m.member_id, m.host, m.client_id, len(m.assignment)]
        if verbose:
            row.append(m.epoch)
        rows.append([*row, _assignment(m)])
    return _table(widths, rows)


def render_state(g: ShareGroup, verbose: bool) -> str:
    widths = [max(15, len(g.group_id)), max(25, len(g.coordinator)), 15]
    if verbose:
        return _table([*widths, 12, 17], [
            ("GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"),
            (g.group_id, g.coordinator, g.state, g.group_epoch, g.assignment_epoch,
             len(g.members))])
    return _table(widths, [("GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"),
                           (g.group_id, g.coordinator, g.state, len(g.members))])


@click.group(name="share-groups")
def share_groups() -> None:
    """List, describe, delete share groups, reset or delete their offsets (like
    kafka-share-groups.sh)."""


@share_groups.command(name="list")
@group_tool.tool_options
@click.option("--state", "states", is_flag=False, flag_value="", default=None,
              metavar="[STATE[,STATE...]]",
              help="Show each group's state; with a value, only groups in those states.")
@_handle_errors
def list_(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
          states: str | None) -> None:
    """List the share groups, one per line."""
    wanted: set[str] = set()
    if states:
        for s in (x.strip() for x in states.split(",")):
            if s.lower() not in _STATES:
                raise CommandError(f"Invalid state list '{states}'. Valid states are: "
                                   + ", ".join(_STATES.values()))
            wanted.add(_STATES[s.lower()])
    listed = _run(bootstrap_server, command_config, timeout_ms, lambda w: w.groups())
    if states is None:
        for group, _ in listed:
            click.echo(group)
        return
    shown = [(g, s) for g, s in listed if not wanted or s in wanted]
    width = max([15, *(len(g) for g, _ in shown)])
    click.echo(_table([width], [("GROUP", "STATE"), *shown]).removeprefix("\n"), nl=False)


@share_groups.command()
@_handle_errors
@group_tool.selection_options("share")
@group_tool.describe_view_options(
    members="The members and their assignments.",
    state="The coordinator, state and member count.",
    offsets="The share-partitions' start offsets (default).", verbose="More columns.")
def describe(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
             groups: tuple[str, ...], all_groups: bool, offsets: bool, members: bool,
             state: bool, verbose: bool) -> None:
    """Describe share groups: offsets (default), members or state."""

    async def work(w: ShareGroupsWire) -> list[tuple[ShareGroup, Any]]:
        ids = [g for g, _ in await w.groups()] if all_groups else list(dict.fromkeys(groups))
        out = []
        for gid in sorted(ids):
            g = await w.describe(gid, timeout_ms / 1000)
            rows = (await w.offsets(gid, timeout_ms / 1000)
                    if not (members or state) and g.state != "Dead" else None)
            out.append((g, rows))
        return out

    failed = False
    for g, rows in _run(bootstrap_server, command_config, timeout_ms, work):
        if g.state == "Dead":
            click.echo(f"Error: Share group '{g.group_id}' does not exist.", err=True)
            failed = True
            continue
        if g.state == "Empty" and not state:
            click.echo(f"\nShare group '{g.group_id}' has no active members.", err=True)
        if state:
            click.echo(render_state(g, verbose), nl=False)
        elif members:
            if g.members:
                click.echo(render_members(g, verbose), nl=False)
        elif rows:
            click.echo(render_offsets(g.group_id, rows, verbose), nl=False)
    if failed:
        raise ErrorsReported


def _deletion(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
              groups: Sequence[str], all_groups: bool) -> dict[str, str | None]:
    async def work(w: ShareGroupsWire) -> dict[str, str | None]:
        listed = dict(await w.groups())
        ids = list(listed) if all_groups else list(dict.fromkeys(groups))
        out: dict[str, str | None] = {}
        for gid in ids:
            if gid not in listed:
                out[gid] = (f"java.lang.IllegalArgumentException: Group '{gid}' is not a share "
                            "group.")
            elif listed[gid] != "Empty":
                out[gid] = ("org.apache.kafka.common.errors.GroupNotEmptyException: Share group "
                            f"'{gid}' is not EMPTY.")
            else:
                code = await w.delete(gid, timeout_ms / 1000)
                out[gid] = None if code == ErrorCode.none else kafka_error_text(code)
        return out

    return _run(bootstrap_server, command_config, timeout_ms, work)


delete = group_tool.add_delete_command(
    share_groups, "share", "Delete share groups (only those without members).", _handle_errors,
    _deletion)


_SCENARIOS = ("to-datetime", "to-earliest", "to-latest")


@share_groups.command(name="reset-offsets")
@group_tool.tool_options
@click.option("--group", required=True, help="The share group.")
@group_tool.reset_options(
    "topic", "all-topics", "to-earliest", "to-latest", "to-datetime", "dry-run",
    execute_help="Set the new start offsets.")
@_handle_errors
def reset_offsets(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
                  group: str, topics: tuple[str, ...], all_topics: bool, to_earliest: bool,
                  to_latest: bool, to_datetime: str | None, dry_run: bool,
                  execute: bool) -> None:
    """Reset the start offsets of a share group without members."""
    from wherry.cli.group_render import render_reset
    from wherry.cli.group_reset import (
        ResetOptions,
        parse_topic_arg,
        partitions_to_reset,
        plan_reset,
        reset_spec,
    )
    from wherry.cli.group_service import GroupService

    given = [n for n, v in zip(_SCENARIOS, (to_datetime is not None, to_earliest, to_latest),
                               strict=True) if v]
    if not given:
        raise CommandError("Option [reset-offsets] requires one of the following scenarios: "
                           f"[{', '.join(_SCENARIOS)}]")
    if len(given) > 1:
        raise CommandError(f'Option "[{given[0]}]" can\'t be used with option "[{given[1]}]"')
    if dry_run and execute:
        raise CommandError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
    if topics and all_topics:
        raise CommandError('Option "[topic]" can\'t be used with option "[all-topics]"')
    if not topics and not all_topics:
        raise CommandError("One of the reset scopes should be defined: --all-topics, --topic.")
    spec = reset_spec(ResetOptions(to_datetime=to_datetime, to_earliest=to_earliest,
                                   to_latest=to_latest), [group], 0, lambda _: "")
    topic_args = [parse_topic_arg(t) for t in topics]
    timeout_s = timeout_ms / 1000

    async def current(w: ShareGroupsWire) -> tuple[ShareGroup, dict[tuple[str, int], int]]:
        g = await w.describe(group, timeout_s)
        rows = await w.offsets(group, timeout_s) if all_topics else []
        return g, {(t, p): o for t, p, o, _, _ in rows if o >= 0}

    g, starts = _run(bootstrap_server, command_config, timeout_ms, current)
    if g.state not in ("Empty", "Dead"):
        raise CommandError(f"Share group '{group}' is not empty.")
    svc = GroupService.connect(bootstrap_server, command_config, timeout_ms)
    partitions = partitions_to_reset(spec, group, topic_args, all_topics, starts,
                                     svc.topic_partitions())
    plan, warnings = plan_reset(spec, group, partitions,
                                svc.offsets_for_reset(spec, partitions, starts))
    for w in warnings:
        click.echo(f"WARN: {w}", err=True)
    if execute and plan:
        errors = _run(bootstrap_server, command_config, timeout_ms,
                      lambda w: w.alter(group, plan, timeout_s))
        failed = {tp: code for tp, code in errors.items() if code != ErrorCode.none}
        if failed:
            raise CommandError("; ".join(f"{t}-{p}: {kafka_error_text(code)}"
                                         for (t, p), code in sorted(failed.items())))
    click.echo(render_reset({group: plan}), nl=False)


# The request's errors as Kafka's tool words them; the others are the topics' (see the table)
_TOPIC_LEVEL = frozenset((ErrorCode.topic_authorization_failed,
                          ErrorCode.unknown_topic_or_partition))


@share_groups.command(name="delete-offsets")
@group_tool.tool_options
@click.option("--group", required=True, help="The share group.")
@click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC",
              help="A topic whose offsets to delete (repeatable).")
@_handle_errors
def delete_offsets(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
                   group: str, topics: tuple[str, ...]) -> None:
    """Delete a share group's offsets of topics (the group without members)."""
    from wherry.cli.kafka_errors import kafka_error_message

    wanted = list(dict.fromkeys(topics))
    error, message, per_topic = _run(
        bootstrap_server, command_config, timeout_ms,
        lambda w: w.delete_offsets(group, wanted, timeout_ms / 1000))
    failed = error != ErrorCode.none
    if failed and error not in _TOPIC_LEVEL:
        why = message or kafka_error_message(error)
        click.echo(f"Error: {why}" if error in (
            ErrorCode.invalid_group_id, ErrorCode.group_id_not_found,
            ErrorCode.group_authorization_failed, ErrorCode.non_empty_group)
            else f"Error: Encounter some unknown error: {kafka_error_text(error)}", err=True)
    width = max([15, *(len(t) for t in wanted)])
    lines = [f"{'TOPIC':<{width}} STATUS"]
    for topic in sorted(wanted):
        code, topic_why = per_topic.get(topic, (error, message))
        failed = failed or code != ErrorCode.none
        status = ("Successful" if code == ErrorCode.none
                  else f"Error: {topic_why or kafka_error_message(code)}")
        lines.append(f"{topic:<{width}} {status}")
    click.echo("\n" + "\n".join(lines))
    if failed:
        raise ErrorsReported
