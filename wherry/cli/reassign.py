"""`wherry reassign`: a kafka-reassign-partitions.sh look-alike speaking the Kafka protocol.

Subcommands (Kafka's `--generate`, `--execute`, `--verify`, `--cancel`, `--list`): generate,
execute, verify, cancel, list, with Kafka's option names and JSON formats. Every subcommand takes
`--bootstrap-server HOST:PORT`, `--command-config FILE` and `--timeout-ms` (also `--timeout`).

Differences, on purpose: `generate` plans with `reassign_plan` (balanced, fewest moves) instead of
Kafka's random placement; errors go to stderr as `Error: ...` with exit status 1; `verify --wait`
(wherry's) polls until the partitions (and log-dir moves) are done, printing progress on
stderr; a `log_dirs` entry that is neither "any" nor an absolute path is refused before anything
is sent (Kafka leaves it to the broker's LOG_DIR_NOT_FOUND).

Moves between log directories, as Kafka's tool: a replica whose `log_dirs` entry names a
directory is moved there by its broker (AlterReplicaLogDirs, `reassign_log_dirs`), after the
partition reassignment, which may first have to create the replica on a new broker;
`--replica-alter-log-dirs-throttle` sets `replica.alter.log.dirs.io.max.bytes.per.second` on
the brokers concerned; `verify` reports each move and, once every partition and every move is
done, removes that throttle with the others (unless `--preserve-throttles`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import ParamSpec, TypeVar

import click

from wherry.cli.common import CommandError, ErrorsReported, admin_options, exits_on_error
from wherry.cli.reassign_json import (
    TP,
    Replica,
    format_reassignment,
    parse_broker_list,
    parse_reassignment_with_dirs,
    parse_topics_to_move,
    tp_str,
    tps_str,
)
from wherry.cli.reassign_log_dirs import (
    describe_replica_dirs,
    move_status_lines,
    start_moves,
)
from wherry.cli.reassign_plan import (
    follower_throttles,
    leader_throttles,
    move_map,
    plan_reassignment,
    reassigning_brokers,
)
from wherry.cli.reassign_service import Ongoing, PartitionView, ReassignService

P = ParamSpec("P")
R = TypeVar("R")

CANNOT_EXECUTE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. The "
    "--additional flag can also be used to change the throttle by resubmitting the current "
    "reassignment.")
RUN_VERIFY = ("Warning: You must run --verify periodically, until the reassignment completes, "
              "to ensure the throttle is removed.")

_handle_errors = exits_on_error("Error: ")

METADATA_SETTLE_S = 10.0
"""`verify --wait`: how long, once no partition moves, the metadata may take to show the final
replica lists before the status is printed as it stands."""
_common_options = admin_options("Timeout of each request to the cluster, in ms.", "--timeout")


def _json_file_option(name: str, help_text: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    return click.option(name, "json_file", required=True, metavar="FILE", help=help_text,
                        type=click.Path(exists=True, dir_okay=False, path_type=Path))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise CommandError(f"Cannot read {path}: {e.strerror or e}") from e


@contextmanager
def _service(bootstrap_server: str, command_config: Path | None, timeout_ms: int
             ) -> Iterator[ReassignService]:
    svc = ReassignService.open(bootstrap_server, command_config, timeout_ms)
    try:
        yield svc
    finally:
        svc.close()


def _plural(n: int) -> str:
    return "" if n == 1 else "s"


@click.group()
def reassign() -> None:
    """Move partition replicas between brokers and between a broker's log dirs (like
    kafka-reassign-partitions)."""


# --------------------------------------------------------------------------------------------
# generate


@reassign.command()
@_common_options
@_json_file_option("--topics-to-move-json-file",
                   'Topics to move: {"topics":[{"topic":"foo"}],"version":1}')
@click.option("--broker-list", required=True, metavar="1,2,3",
              help="The brokers to place the partitions on.")
@click.option("--disable-rack-aware", is_flag=True, help="Ignore the brokers' racks.")
@_handle_errors
def generate(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
             json_file: Path, broker_list: str, disable_rack_aware: bool) -> None:
    """Propose a balanced assignment of the topics onto the brokers, moving few replicas."""
    topics = parse_topics_to_move(_read(json_file))
    brokers = parse_broker_list(broker_list)
    with _service(bootstrap_server, command_config, timeout_ms) as svc:
        live = svc.brokers()
        parts = svc.partitions(topics)
    for topic in topics:
        if not any(t == topic for t, _ in parts):
            raise CommandError(f"Topic {topic} not found.")
    usable = [b for b in brokers if b in live]
    for b in brokers:
        if b not in live:
            click.echo(f"Warning: broker {b} is not a live broker; it gets no replicas.",
                       err=True)
    racks = [live[b] for b in usable]
    if not disable_rack_aware and any(racks) and not all(racks):
        raise CommandError("Not all brokers have rack information. Add --disable-rack-aware "
                           "in command line to make replica assignment without rack "
                           "information.")
    current = {tp: list(view.replicas) for tp, view in parts.items()}
    rack_of = {b: r for b in usable if (r := live[b])} if not disable_rack_aware else {}
    proposed = plan_reassignment(current, usable, rack_of or None)
    click.echo(f"Current partition replica assignment\n{format_reassignment(current)}\n")
    click.echo(f"Proposed partition reassignment configuration\n{format_reassignment(proposed)}")


# --------------------------------------------------------------------------------------------
# execute


@reassign.command()
@_common_options
@_json_file_option("--reassignment-json-file",
                   'The reassignment to start: {"version":1,"partitions":[{"topic":"t",'
                   '"partition":0,"replicas":[1,2],"log_dirs":["any","/data/b"]}]}; '
                   '"log_dirs" (optional, as long as "replicas") gives each replica "any" or '
                   "the absolute path of the log dir to move it to on its broker.")
@click.option("--throttle", type=click.IntRange(min=-1), default=-1, metavar="BYTES_PER_SEC",
              help="Replication throttle of the brokers involved while moving (B/s).")
@click.option("--replica-alter-log-dirs-throttle", type=click.IntRange(min=-1), default=-1,
              metavar="BYTES_PER_SEC",
              help="Copy rate of the moves between log dirs on the brokers concerned "
                   "(replica.alter.log.dirs.io.max.bytes.per.second, B/s).")
@click.option("--additional", is_flag=True,
              help="Start even though other reassignments are running (or change a throttle).")
@_handle_errors
def execute(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
            json_file: Path, throttle: int, replica_alter_log_dirs_throttle: int,
            additional: bool) -> None:
    """Start a reassignment (AlterPartitionReassignments), then the moves between log dirs
    the JSON's log_dirs ask for (AlterReplicaLogDirs, retried until the replica exists on its
    new broker, within --timeout-ms); throttled if asked."""
    proposed, dir_moves = parse_reassignment_with_dirs(_read(json_file))
    with _service(bootstrap_server, command_config, timeout_ms) as svc:
        live = svc.brokers()
        for b in sorted({b for r in proposed.values() for b in r}):
            if b not in live:
                raise CommandError(f"Unknown broker id {b}")
        views = svc.partitions({t for t, _ in proposed})
        missing = sorted(tp for tp in proposed if tp not in views)
        if missing:
            raise CommandError(f"Unable to find partition: {tps_str(missing, ', ')}")
        ongoing = svc.list_reassignments()
        if ongoing and not additional:
            raise CommandError(CANNOT_EXECUTE)
        current = {tp: list(views[tp].replicas) for tp in proposed}
        click.echo(f"Current partition replica assignment\n\n{format_reassignment(current)}\n\n"
                   "Save this to use as the --reassignment-json-file option during rollback")
        if throttle >= 0 or replica_alter_log_dirs_throttle >= 0:
            click.echo(RUN_VERIFY)
        if throttle >= 0:
            moves = move_map({tp: (o.replicas, o.adding) for tp, o in ongoing.items()},
                             proposed, current)
            svc.set_topic_throttles(leader_throttles(moves), follower_throttles(moves))
            svc.set_broker_throttles(reassigning_brokers(moves), throttle)
            click.echo(f"The inter-broker throttle limit was set to {throttle} B/s")
        if replica_alter_log_dirs_throttle >= 0:
            svc.set_log_dir_throttle({b for _, _, b in dir_moves},
                                     replica_alter_log_dirs_throttle)
            click.echo("The replica-alter-dir throttle limit was set to "
                       f"{replica_alter_log_dirs_throttle} B/s")
        errors = {tp: e for tp, e in svc.alter_reassignments(proposed).items() if e}
        if errors:
            raise CommandError("Error reassigning partition(s):\n" + "\n".join(
                f"{tp_str(tp)}: {errors[tp]}" for tp in sorted(errors)))
        click.echo(f"Successfully started partition reassignment{_plural(len(proposed))} for "
                   f"{tps_str(proposed)}")
        if dir_moves:
            start_moves(svc.broker_addresses(), dir_moves, svc.timeout_s, svc.timeout_s,
                        click.echo)


# --------------------------------------------------------------------------------------------
# verify


def _status_lines(targets: Mapping[TP, Sequence[int]], ongoing: Mapping[TP, Ongoing],
                  views: Mapping[TP, PartitionView]) -> tuple[list[str], bool]:
    """Kafka's partitionReassignmentStatesToString, and whether every target is reached."""
    lines = ["Status of partition reassignment:"]
    all_done = True
    for tp in sorted(targets):
        target = list(targets[tp])
        if tp in ongoing:
            lines.append(f"Reassignment of partition {tp_str(tp)} is still in progress.")
            all_done = False
            continue
        current = list(views[tp].replicas) if tp in views else []
        if current == target:
            lines.append(f"Reassignment of partition {tp_str(tp)} is completed.")
        else:
            all_done = False
            lines.append(f"There is no active reassignment of partition {tp_str(tp)}, but "
                         f"replica set is {','.join(map(str, current))} rather than "
                         f"{','.join(map(str, target))}.")
    return lines, all_done


def _progress_line(targets: Mapping[TP, Sequence[int]], ongoing: Mapping[TP, Ongoing],
                   views: Mapping[TP, PartitionView], leos: Mapping[TP, int]) -> str:
    moving = sorted(tp for tp in targets if tp in ongoing)
    done = len(targets) - len(moving)
    parts = [f"{done}/{len(targets)} partitions completed"]
    for tp in moving:
        view = views.get(tp)
        isr = set(view.isr) if view else set()
        behind = [b for b in ongoing[tp].adding if b not in isr]
        leo = leos.get(tp)
        end = f", leader log end offset {leo}" if leo is not None else ""
        if behind:
            parts.append(f"{tp_str(tp)}: replica{_plural(len(behind))} "
                         f"{','.join(map(str, behind))} catching up (not in ISR yet{end})")
        else:
            parts.append(f"{tp_str(tp)}: new replicas in sync, removing "
                         f"{','.join(map(str, ongoing[tp].removing)) or 'none'}")
    return "; ".join(parts)


def _clear_throttles(svc: ReassignService, targets: Mapping[TP, Sequence[int]]) -> None:
    """Kafka's clearAllThrottles: every live broker and every broker of the targets."""
    brokers = sorted(set(svc.brokers()) | {b for r in targets.values() for b in r})
    click.echo(f"Clearing broker-level throttles on broker{_plural(len(brokers))} "
               f"{','.join(map(str, brokers))}")
    svc.clear_broker_throttles(brokers)
    topics = sorted({t for t, _ in targets})
    click.echo(f"Clearing topic-level throttles on topic{_plural(len(topics))} "
               f"{','.join(topics)}")
    svc.clear_topic_throttles(topics)


@reassign.command()
@_common_options
@_json_file_option("--reassignment-json-file", "The reassignment to check.")
@click.option("--preserve-throttles", is_flag=True, help="Leave the throttles in place.")
@click.option("--wait", is_flag=True,
              help="Poll until the partitions and the moves between log dirs are done, "
                   "printing progress (wherry extra).")
@click.option("--wait-timeout-ms", type=click.IntRange(min=0), default=0, show_default=True,
              help="With --wait: give up after this long (0: never).")
@click.option("--poll-interval-ms", type=click.IntRange(min=50), default=1000,
              show_default=True, help="With --wait: time between polls.")
@_handle_errors
def verify(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
           json_file: Path, preserve_throttles: bool, wait: bool, wait_timeout_ms: int,
           poll_interval_ms: int) -> None:
    """Show whether the reassignment (and its moves between log dirs) is done; once nothing
    moves, remove the throttles."""
    targets, dir_targets = parse_reassignment_with_dirs(_read(json_file))
    topics = {t for t, _ in targets}
    with _service(bootstrap_server, command_config, timeout_ms) as svc:
        deadline = time.monotonic() + wait_timeout_ms / 1000.0
        settle_by = 0.0

        def dir_states() -> tuple[list[str], bool]:
            if not dir_targets:
                return [], True
            found = describe_replica_dirs(svc.broker_addresses(), set(dir_targets),
                                          svc.timeout_s)
            return move_status_lines(dir_targets, found)

        while True:
            ongoing = svc.list_reassignments()
            views = svc.partitions(topics)
            moving = [tp for tp in targets if tp in ongoing]
            # Done once nothing moves and the metadata shows the targets: the controller answers
            # ListPartitionReassignments, while the replica lists come from a broker's metadata,
            # which may not have heard of the completion yet.
            settled = all(
                tp in views and list(views[tp].replicas) == list(targets[tp]) for tp in targets
            )
            dir_lines, dirs_done = dir_states()
            if not wait or (not moving and settled and dirs_done):
                break
            if not moving and not dirs_done:
                settle_by = 0.0  # log-dir moves still under way
            elif not moving:
                settle_by = settle_by or time.monotonic() + METADATA_SETTLE_S
                if time.monotonic() >= settle_by:
                    break  # ended elsewhere than planned: the status below says where
            leos = svc.log_end_offsets(moving)
            progress = _progress_line(targets, ongoing, views, leos)
            busy = sum(1 for line in dir_lines if "is still in progress" in line)
            if busy:
                progress += f"; {busy} log-dir move{_plural(busy)} in progress"
            click.echo(progress, err=True)
            if wait_timeout_ms and time.monotonic() >= deadline:
                click.echo("\n".join(_status_lines(targets, ongoing, views)[0] + dir_lines))
                raise CommandError(f"Timed out after {wait_timeout_ms} ms waiting for the "
                                   "reassignment to complete")
            time.sleep(poll_interval_ms / 1000.0)
        if wait:
            click.echo(_progress_line(targets, ongoing, views, {}), err=True)
        lines, all_done = _status_lines(targets, ongoing, views)
        click.echo("\n".join(lines + dir_lines))
        if not ongoing and dirs_done and not preserve_throttles:
            _clear_throttles(svc, targets)
    if wait and not (all_done and dirs_done):
        raise ErrorsReported()


# --------------------------------------------------------------------------------------------
# cancel, list


def _cancel_dir_moves(svc: ReassignService, dir_targets: Mapping[Replica, str]) -> None:
    """Kafka's cancel of log-dir moves: each replica being moved is asked to stay where it
    is (AlterReplicaLogDirs to its current dir, which drops the future log)."""
    addresses = svc.broker_addresses()
    found = describe_replica_dirs(addresses, set(dir_targets), svc.timeout_s)
    back = {r: d.current for r, d in found.items()
            if d.future is not None and d.current is not None}
    if back:
        start_moves(addresses, back, svc.timeout_s, svc.timeout_s, click.echo)
    else:
        click.echo("None of the specified partition moves are active.")


@reassign.command()
@_common_options
@_json_file_option("--reassignment-json-file", "The reassignment to cancel.")
@click.option("--preserve-throttles", is_flag=True, help="Leave the throttles in place.")
@_handle_errors
def cancel(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
           json_file: Path, preserve_throttles: bool) -> None:
    """Cancel the reassignment's ongoing partition moves (back to the original replicas) and
    its moves between log dirs (the replicas stay in their current dirs)."""
    targets, dir_targets = parse_reassignment_with_dirs(_read(json_file))
    with _service(bootstrap_server, command_config, timeout_ms) as svc:
        active = sorted(svc.list_reassignments(set(targets)))
        if active:
            errors = {tp: e for tp, e in svc.alter_reassignments(
                dict.fromkeys(active)).items() if e}
            if errors:
                raise CommandError(
                    f"Error cancelling partition reassignment{_plural(len(errors))} for:\n"
                    + "\n".join(f"{tp_str(tp)}: {errors[tp]}" for tp in sorted(errors)))
            click.echo(f"Successfully cancelled partition reassignment{_plural(len(active))} "
                       f"for: {tps_str(active)}")
        else:
            click.echo("None of the specified partition reassignments are active.")
        if dir_targets:
            _cancel_dir_moves(svc, dir_targets)
        if not preserve_throttles:
            _clear_throttles(svc, targets)


@reassign.command(name="list")
@_common_options
@_handle_errors
def list_(bootstrap_server: str, command_config: Path | None, timeout_ms: int) -> None:
    """List the ongoing reassignments."""
    with _service(bootstrap_server, command_config, timeout_ms) as svc:
        ongoing = svc.list_reassignments()
    if not ongoing:
        click.echo("No partition reassignments found.")
        return
    click.echo("Current partition reassignments:")
    for tp in sorted(ongoing):
        o = ongoing[tp]
        adding = f" adding: {','.join(map(str, o.adding))}." if o.adding else ""
        removing = f" removing: {','.join(map(str, o.removing))}." if o.removing else ""
        click.echo(f"{tp_str(tp)}: replicas: {','.join(map(str, o.replicas))}.{adding}{removing}")
