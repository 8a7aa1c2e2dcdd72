"""`wherry state-change-log merge`: the brokers' and the controller's state-change logs
(SPEC H12, T5) merged in time order by a Spark job (`wherry.spark.state_change.merged`).

    wherry state-change-log merge --logs d0/state-change.log --logs d1 --logs d2 \
        [--start TIME] [--end TIME] [--topic REGEX] [--partitions 0,1] \
        [--output DIR --format parquet|json] [--master local[*]]

A `--logs` directory stands for its `state-change.log`. TIME is ISO-8601 (UTC unless it has an
offset) or epoch milliseconds. Without `--output` the merged lines are printed, the same lines as
the pure merge (`merge_state_change_logs`) prints for the same filters; with it the rows
(`wherry.spark.state_change.COLUMNS`) are written as Parquet or JSON. Needs `wherry[spark]`.
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


def resolve_logs(paths: tuple[Path, ...]) -> list[Path]:
    if not paths:
        raise CommandError("Missing required option(s): logs")
    out = []
    for p in paths:
        f = p / STATE_CHANGE_LOG_FILE if p.is_dir() else p
        if not f.is_file():
            raise CommandError(f"No state-change log at {f}")
        out.append(f.resolve())
    return out


@click.group("state-change-log")
def state_change_log() -> None:
    """Tools for the brokers' state-change logs."""


@state_change_log.command("merge")
@click.option("--logs", "logs", multiple=True, type=click.Path(path_type=Path),
              help="A state-change.log (or a data dir holding one); repeat for each broker.")
@click.option("--start", default=None, help="Keep lines at or after TIME (ISO-8601 or epoch ms).")
@click.option("--end", default=None, help="Keep lines at or before TIME.")
@click.option("--topic", default=None, help="Keep changes of topics matching this regex.")
@click.option("--partitions", default=None, help="Keep changes of these partitions: 0,1,2.")
@click.option("--output", default=None, type=click.Path(path_type=Path),
              help="Write the rows to this directory instead of printing the lines.")
@click.option("--format", "fmt", type=click.Choice(["parquet", "json"]), default="parquet",
              show_default=True, help="The format of --output.")
@click.option("--master", default="local[*]", show_default=True, help="Spark master.")
@_handle_errors
def merge(logs: tuple[Path, ...], start: str | None, end: str | None, topic: str | None,
          partitions: str | None, output: Path | None, fmt: str, master: str) -> None:
    """Merge state-change logs in time order (a Spark job)."""
    files = resolve_logs(logs)
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
