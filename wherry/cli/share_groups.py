"""`wherry share-groups`: a kafka-share-groups.sh look-alike for share groups (KIP-932).

* `list [--state [STATES]]`: the share groups (with their states);
* `describe (--group G ... | --all-groups) [--offsets | --members | --state] [--verbose]`: the
  share-partitions' start offsets (with the leader epoch under `--verbose`) and the records
  left to deliver (LAG, -1 unless the share coordinator leads the partition); the members,
  their hosts, client ids and assignments; or the coordinator, state and member count;
* `delete (--group G ... | --all-groups)`: groups without members.

The requests go to the brokers with wherry's own client (ListGroups to every broker,
ShareGroupDescribe, DescribeShareGroupOffsets and DeleteGroups to the group's coordinator);
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

from wherry.cli.client_security import client_security
from wherry.cli.common import (
    CommandError,
    ErrorsReported,
    admin_options,
    exits_on_error,
    load_properties_file,
)
from wherry.cli.kafka_errors import kafka_error_text
from wherry.cli.wire_clients import BrokerClients, WireCallError, WireTool

T = TypeVar("T")

_LIST_GROUPS = (16, 5)
_SHARE_GROUP_DESCRIBE = (77, 1)
_DESCRIBE_SHARE_GROUP_OFFSETS = (90, 1)
_DELETE_GROUPS = (42, 2)
_GROUP_KEY = 0
_CLIENT_ID = "wherry-share-groups"
_STATES = {"empty": "Empty", "stable": "Stable", "dead": "Dead"}
MISSING = "-"

_handle_errors = exits_on_error("Error: ")
_common_options = admin_options("Timeout of each request to the cluster, in ms.", "--timeout")


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
    async def groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every broker's share groups, sorted."""
        out = []
        for address in (await self.brokers()).values():
            resp = await self.call(address, _LIST_GROUPS,
                                   {"states_filter": [], "types_filter": ["share"]})
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

    async def delete(self, group: str, timeout_s: float) -> int:
        _, resp = await self.at_coordinator(
            group, _GROUP_KEY, _DELETE_GROUPS, {"groups_names": [group]},
            lambda r: int(r.results[0].error_code), timeout_s)
        return int(resp.results[0].error_code)


def _run(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
         work: Callable[[ShareGroupsWire], Awaitable[T]]) -> T:
    props = load_properties_file(command_config)
    clients = BrokerClients(timeout_ms / 1000, props.get("client.id", _CLIENT_ID),
                            client_security(props))

    async def main() -> T:
        try:
            return await work(ShareGroupsWire(bootstrap_server, clients))
        except WireCallError as e:
            why = kafka_error_text(e.code) if e.code is not None else str(e)
            raise CommandError(f"Executing share group command failed due to {why}") from e
        finally:
            await clients.close()

    return asyncio.run(main())


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


def _selected(groups: tuple[str, ...], all_groups: bool, action: str) -> None:
    if groups and all_groups:
        raise CommandError('Option "[group]" can\'t be used with option "[all-groups]"')
    if not groups and not all_groups:
        raise CommandError(f"Option [{action}] takes one of these options: [all-groups], "
                           "[group]")


def _group_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--all-groups", is_flag=True, help="Apply to all share groups.")(fn)
    return click.option("--group", "groups", multiple=True, metavar="GROUP",
                        help="The share group (repeatable).")(fn)


@click.group(name="share-groups")
def share_groups() -> None:
    """List, describe or delete share groups (like kafka-share-groups.sh)."""


@share_groups.command(name="list")
@_common_options
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
@_common_options
@_group_options
@click.option("--offsets", is_flag=True, help="The share-partitions' start offsets (default).")
@click.option("--members", is_flag=True, help="The members and their assignments.")
@click.option("--state", is_flag=True, help="The coordinator, state and member count.")
@click.option("--verbose", is_flag=True, help="More columns.")
@_handle_errors
def describe(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
             groups: tuple[str, ...], all_groups: bool, offsets: bool, members: bool,
             state: bool, verbose: bool) -> None:
    """Describe share groups: offsets (default), members or state."""
    _selected(groups, all_groups, "describe")
    if offsets + members + state > 1:
        raise CommandError("Option [describe] takes at most one of these options: [members], "
                           "[offsets], [state]")

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


@share_groups.command()
@_common_options
@_group_options
@_handle_errors
def delete(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
           groups: tuple[str, ...], all_groups: bool) -> None:
    """Delete share groups (only those without members)."""
    _selected(groups, all_groups, "delete")

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

    results = _run(bootstrap_server, command_config, timeout_ms, work)
    done = ", ".join(f"'{g}'" for g, e in results.items() if e is None)
    failed = {g: e for g, e in results.items() if e is not None}
    if not failed:
        click.echo(f"Deletion of requested share groups ({done}) was successful.")
        return
    click.echo("Error: Deletion of some share groups failed:", err=True)
    for g, e in failed.items():
        click.echo(f"* Group '{g}' could not be deleted due to: {e}", err=True)
    if done:
        click.echo(f"\nThese share groups were deleted successfully: {done}")
    raise ErrorsReported
