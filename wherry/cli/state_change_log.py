"""`wherry state-change-log merge`: the brokers' and the controller's state-change logs
merged in time order by a Spark job (`wherry.spark.state_change.merged`); Kafka's
StateChangeLogMerger's options.

    wherry state-change-log merge --logs d0/state-change.log,d1,d2 \
        [--logs-regex 'wherry-dev/broker-.*'] \
        [--start TIME] [--end TIME] [--topic REGEX] [--partitions 0,1] \
        [--output DIR --format parquet|json] [--master local[*]]

`--logs` takes a comma-separated list and may be repeated; a `--logs` directory stands for its
`state-change.log`. `--logs-regex DIR/REGEX` adds the files (or data dirs holding a
`state-change.log`) in DIR whose whole name matches REGEX (DIR defaults to the current
directory), as Kafka's `--logs-regex` does. TIME is ISO-8601 (UTC unless it has an offset;
Kafka's `2025-11-22 00:14:03,123` form too) or epoch milliseconds. Without `--output` the
merged lines are printed, the same lines as the pure merge (`merge_state_change_logs`) prints
for the same filters; with it the rows (`wherry.spark.state_change.COLUMNS`) are written as
Parquet or JSON. Needs `wherry[spark]`.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
from pathlib import Path

import click

from wherry.cli.common import CommandError, exits_on_error

_handle_errors = exits_on_error("Error: ")
STATE_CHANGE_LOG_FILE = "state-change.log"


def parse_time(text: str, what: str) -> int:
    """Epoch milliseconds of an ISO-8601 time (UTC when it has no offset) or of an integer."""
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(
            f"Invalid {what} time '{text}': expected ISO-8601 (2025-11-22T00:14:03.123Z) "
            "or epoch milliseconds"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000 + (0.5 if t.timestamp() >= 0 else -0.5))


def parse_partitions(text: str) -> list[int]:
    try:
        parts = [int(p) for p in text.split(",")]
    except ValueError:
        raise CommandError(f"Invalid partitions '{text}': expected a list like 0,1,2") from None
    if any(p < 0 for p in parts):
        raise CommandError(f"Invalid partitions '{text}': partitions are >= 0")
    return parts


def _log_file(p: Path) -> Path | None:
    f = p / STATE_CHANGE_LOG_FILE if p.is_dir() else p
    return f if f.is_file() else None


def logs_matching(regex: str) -> list[Path]:
    """Kafka's `--logs-regex DIR/REGEX`: the entries of DIR (the current directory when the
    value has no `/`) whose whole name matches REGEX, sorted; a directory counts when it
    holds a `state-change.log`."""
    cut = regex.rfind("/") + 1
    directory = Path(regex[: cut - 1] or "/") if cut else Path(".")
    try:
        pattern = re.compile(regex[cut:])
    except re.error as e:
        raise CommandError(f"Invalid --logs-regex '{regex}': {e}") from None
    try:
        entries = sorted(directory.iterdir())
    except OSError as e:
        raise CommandError(f"Cannot list {directory} for --logs-regex: "
                           f"{e.strerror or e}") from None
    found = [f for e in entries
             if pattern.fullmatch(e.name) and (f := _log_file(e)) is not None]
    if not found:
        raise CommandError(f"No state-change log matches --logs-regex '{regex}'")
    return found


def resolve_logs(paths: tuple[str, ...], regexes: tuple[str, ...] = ()) -> list[Path]:
    """The log files of the `--logs` values (comma-separated lists, repeatable) and the
    `--logs-regex` values, each file once, in the order given."""
    given = [Path(item.strip()) for value in paths for item in value.split(",") if item.strip()]
    if not given and not regexes:
        raise CommandError("Missing required option(s): logs or logs-regex")
    out: list[Path] = []
    for p in given:
        f = _log_file(p)
        if f is None:
            where = p / STATE_CHANGE_LOG_FILE if p.is_dir() else p
            raise CommandError(f"No state-change log at {where}")
        out.append(f.resolve())
    for regex in regexes:
        out.extend(f.resolve() for f in logs_matching(regex))
    return list(dict.fromkeys(out))


@click.group("state-change-log")
def state_change_log() -> None:
    """Tools for the brokers' state-change logs."""


@state_change_log.command("merge")
@click.option("--logs", "logs", multiple=True, metavar="PATH[,PATH...]",
              help="State-change logs (or data dirs holding one), comma-separated; repeatable.")
@click.option("--logs-regex", "logs_regex", multiple=True, metavar="DIR/REGEX",
              help="The logs (or data dirs) in DIR whose whole name matches REGEX.")
@click.option("--start", "--start-time", "start", default=None,
              help="Keep lines at or after TIME (ISO-8601 or epoch ms).")
@click.option("--end", "--end-time", "end", default=None, help="Keep lines at or before TIME.")
@click.option("--topic", default=None, help="Keep changes of topics matching this regex.")
@click.option("--partitions", default=None, help="Keep changes of these partitions: 0,1,2.")
@click.option("--output", default=None, type=click.Path(path_type=Path),
              help="Write the rows to this directory instead of printing the lines.")
@click.option("--format", "fmt", type=click.Choice(["parquet", "json"]), default="parquet",
              show_default=True, help="The format of --output.")
@click.option("--master", default="local[*]", show_default=True, help="Spark master.")
@_handle_errors
def merge(logs: tuple[str, ...], logs_regex: tuple[str, ...], start: str | None,
          end: str | None, topic: str | None, partitions: str | None, output: Path | None,
          fmt: str, master: str) -> None:
    """Merge state-change logs in time order (a Spark job)."""
    files = resolve_logs(logs, logs_regex)
    start_ms = parse_time(start, "start") if start is not None else None
    end_ms = parse_time(end, "end") if end is not None else None
    if start_ms is not None and end_ms is not None and end_ms < start_ms:
        raise CommandError("--end is before --start")
    if topic is not None:
        try:
            re.compile(topic)
        except re.error as e:
            raise CommandError(f"Invalid topic regex '{topic}': {e}") from None
    parts = parse_partitions(partitions) if partitions is not None else None
    if output is not None and output.exists() and any(output.iterdir()):
        raise CommandError(f"Output directory {output} exists and is not empty")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise CommandError(
            "PySpark is not installed (from a checkout: pip install -e '.[spark]')"
        ) from None
    from wherry.spark.state_change import merged

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName("wherry-state-change-merge")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = merged(spark, [str(f) for f in files], start_ms=start_ms, end_ms=end_ms,
                    topic=topic, partitions=parts)
        if output is None:
            for row in df.select("line").toLocalIterator():
                click.echo(row.line)
        else:
            df.write.mode("overwrite").format(fmt).save(str(output))
            click.echo(f"Wrote {spark.read.format(fmt).load(str(output)).count()} rows "
                       f"to {output} ({fmt})")
    finally:
        spark.stop()
