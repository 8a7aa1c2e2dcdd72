"""What the consumer group and share group tools share: their options (the connection's,
`--group`/`--all-groups`, the describe views, the offset resets), Kafka's checks of them, and
the `delete` command with Kafka's report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import wraps
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import click

from wherry.cli.common import CommandError, ErrorsReported, admin_options

P = ParamSpec("P")
R = TypeVar("R")


def _group_options(kind: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """The group tools' `--group` (repeatable, passed as `groups`) and `--all-groups`; `kind`
    names the groups in the help ("consumer", "share")."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        fn = click.option("--all-groups", is_flag=True, help=f"Apply to all {kind} groups.")(fn)
        return click.option("--group", "groups", multiple=True, metavar="GROUP",
                            help=f"The {kind} group (repeatable).")(fn)

    return decorate


_RESET_OPTIONS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "topic": (("--topic", "topics"), {
        "multiple": True, "metavar": "TOPIC[:P,P...]",
        "help": "Topic (optionally with partitions) whose offsets to reset (repeatable)."}),
    "all-topics": (("--all-topics",), {
        "is_flag": True, "help": "All topics the group has offsets for."}),
    "to-offset": (("--to-offset",), {
        "type": int, "help": "Reset to this offset (clamped to the log)."}),
    "shift-by": (("--shift-by",), {
        "type": int, "help": "Shift the committed offsets by N (may be < 0)."}),
    "to-datetime": (("--to-datetime",), {
        "metavar": "YYYY-MM-DDTHH:mm:SS.sss",
        "help": "Reset to the first offset at or after this time."}),
    "by-duration": (("--by-duration",), {
        "metavar": "PnDTnHnMnS",
        "help": "Reset to the first offset at or after now minus this duration."}),
    "to-earliest": (("--to-earliest",), {"is_flag": True, "help": "Reset to the earliest offset."}),
    "to-latest": (("--to-latest",), {"is_flag": True, "help": "Reset to the latest offset."}),
    "to-current": (("--to-current",), {
        "is_flag": True, "help": "Reset to the current committed offset."}),
    "from-file": (("--from-file",), {
        "type": click.Path(exists=True, dir_okay=False, path_type=Path),
        "help": "CSV plan: topic,partition,offset (or group,topic,partition,offset)."}),
    "dry-run": (("--dry-run",), {
        "is_flag": True, "help": "Only show the new offsets (the default)."}),
    "export": (("--export",), {
        "is_flag": True, "help": "Print the new offsets as CSV (a --from-file plan)."}),
}


def reset_options(*names: str, execute_help: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """The offset-reset tools' options, named without their dashes, in the order given, then
    `--execute` (whose help says what executing does)."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        fn = click.option("--execute", is_flag=True, help=execute_help)(fn)
        for name in reversed(names):
            decls, attrs = _RESET_OPTIONS[name]
            fn = click.option(*decls, **attrs)(fn)
        return fn

    return decorate


tool_options = admin_options("Timeout of each request to the cluster, in ms.", "--timeout")
"""The group tools' connection options (Kafka's `--timeout` among them)."""


def selection_options(kind: str, *, checked: bool = True
                            ) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A group tool's connection options, then its `--group` and `--all-groups`; `checked`:
    the command runs only with exactly one of the two (Kafka's check, naming the command), so
    this goes below the decorator that reports a CommandError."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        if checked:
            inner = fn

            @wraps(inner)
            def fn(*args: P.args, **kwargs: P.kwargs) -> R:
                action = click.get_current_context().info_name or ""
                selected_groups(action, kwargs["groups"], kwargs["all_groups"])  # type: ignore[arg-type]
                return inner(*args, **kwargs)

        return tool_options(_group_options(kind)(fn))

    return decorate


def describe_view_options(members: str, state: str, offsets: str, verbose: str
                          ) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A group tool's `describe` views, `--members`, `--state` and `--offsets` (at most one:
    Kafka's check), and `--verbose`, each with its help; goes below the decorator that reports
    a CommandError."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @wraps(fn)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            if sum(bool(kwargs[view]) for view in ("members", "state", "offsets")) > 1:
                raise CommandError("Option [describe] takes at most one of these options: "
                                   "[members], [offsets], [state]")
            return fn(*args, **kwargs)

        for name, text in (("verbose", verbose), ("offsets", offsets), ("state", state),
                           ("members", members)):
            checked = click.option(f"--{name}", is_flag=True, help=text)(checked)
        return checked

    return decorate


def selected_groups(action: str, groups: Sequence[str], all_groups: bool) -> None:
    """Kafka's check of `--group` and `--all-groups`: exactly one of them."""
    if groups and all_groups:
        raise CommandError('Option "[group]" can\'t be used with option "[all-groups]"')
    if not groups and not all_groups:
        raise CommandError(f"Option [{action}] takes one of these options: "
                           "[all-groups], [group]")


def _report_deletion(kind: str, outcome: dict[str, str | None]) -> None:
    """Kafka's report of a group deletion: each group's failure (None: deleted), in Kafka's
    sentences; ErrorsReported when any failed."""
    done = ", ".join(f"'{g}'" for g, why in outcome.items() if why is None)
    failed = {g: why for g, why in outcome.items() if why is not None}
    if not failed:
        click.echo(f"Deletion of requested {kind} groups ({done}) was successful.")
        return
    click.echo(f"Error: Deletion of some {kind} groups failed:", err=True)
    for g, why in failed.items():
        click.echo(f"* Group '{g}' could not be deleted due to: {why}", err=True)
    if done:
        click.echo(f"\nThese {kind} groups were deleted successfully: {done}")
    raise ErrorsReported


Deletion = Callable[
    [str, Path | None, int, Sequence[str], bool], dict[str, str | None] | None
]
"""(bootstrap servers, command config, timeout ms, groups named, --all-groups) -> each group
deleted (None) or why not (Kafka's sentence); None: nothing to report."""


def add_delete_command(cli: click.Group, kind: str, help_text: str,
                             on_error: Callable[[Callable[P, R]], Callable[P, R]],
                             deletion: Deletion) -> click.Command:
    """A group tool's `delete`: `--group`/`--all-groups` checked, `deletion` run, its outcome
    reported in Kafka's words (exit status 1 when any group was not deleted)."""

    def delete(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
               groups: tuple[str, ...], all_groups: bool) -> None:
        outcome = deletion(bootstrap_server, command_config, timeout_ms, groups, all_groups)
        if outcome is not None:
            _report_deletion(kind, outcome)

    delete.__doc__ = help_text
    fn = on_error(selection_options(kind)(delete))  # type: ignore[arg-type]
    return cli.command(name="delete")(fn)
