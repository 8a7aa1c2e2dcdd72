"""The state-change log merge as a Spark job: the brokers' and the controller's
``state-change.log`` files parsed with Spark SQL regexes (the same patterns as the pure parser in
`wherry.runtime.state_change_log`), merged in time order and filtered.

    from wherry.spark.state_change import merged
    df = merged(spark, ["b0/state-change.log", "b1/state-change.log"], topic="orders.*")

Rows are in the pure merge's order: by timestamp, ties by the order of ``paths``, then by line
within a file. `lines` collects the ``line`` column, which equals
``[r.line for r in merge_state_change_logs(paths, ...)]`` for the same filters. Needs PySpark.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

__all__ = ["COLUMNS", "lines", "merged"]

# The columns of `merged`, those of `StateChangeRecord` (isr as array<int>, fields left out),
# plus the timestamp as a Spark timestamp and the index of the source path.
COLUMNS = (
    "timestamp_ms", "timestamp", "level", "node_kind", "node_id", "node_epoch", "message",
    "line", "kind", "topic", "partition", "replica", "old_state", "new_state", "leader",
    "leader_epoch", "isr", "controller_epoch", "source",
)  # fmt: skip

# Java regexes with the pure parser's groups (see state_change_log._line_patterns).
_LINE = (
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ([A-Z]+) "
    r"\[(?:(Controller|Broker) id=(-?\d+)(?: epoch=(-?\d+))?)\] ?(.*)$"
)
_CHANGE = (
    r"^(Partition|Replica) (\S+)-(\d+)(?: replica=(-?\d+))? "
    r"(\S+) -> (\S+)((?: [a-z_]+=\S*)*)$"
)


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def merged(
    spark: Any,
    paths: Sequence[str | Path],
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
    topic: str | None = None,
    partitions: Collection[int] | None = None,
    changes_only: bool = False,
) -> Any:
    """A DataFrame of the parseable lines of ``paths`` in merge order, filtered: a time range
    ``[start_ms, end_ms]``, a topic regex (the whole name must match), partitions, and only
    change lines. As in the pure merge, a topic or partition filter drops non-change lines."""
    from pyspark.sql import functions as F

    if not paths:
        raise ValueError("no state-change logs given")
    frames = []
    for i, p in enumerate(paths):
        # One read per file: monotonically_increasing_id grows with the offset in one file
        # (its splits keep their order), which keeps the file order for equal timestamps.
        frames.append(
            spark.read.text(str(p))
            .withColumn("source", F.lit(i))
            .withColumn("_pos", F.monotonically_increasing_id())
        )
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)

    line = F.col("value")
    g = F.regexp_extract
    df = df.where(line.rlike(_LINE)).select(
        line.alias("line"),
        F.col("source"),
        F.col("_pos"),
        g(line, _LINE, 1).alias("_ts"),
        g(line, _LINE, 2).alias("level"),
        g(line, _LINE, 3).alias("node_kind"),
        g(line, _LINE, 4).cast("int").alias("node_id"),
        F.expr(f"try_cast(nullif(regexp_extract(value, {_sql_string(_LINE)}, 5), '') as int)")
        .alias("node_epoch"),
        g(line, _LINE, 6).alias("message"),
    )
    msg = F.col("message")
    is_change = msg.rlike(_CHANGE)

    def change(group: int) -> Any:
        return F.when(is_change, g(msg, _CHANGE, group))

    def field(name: str) -> Any:
        return F.when(is_change, g(F.col("_fields"), rf"(?:^| ){name}=(\S*)", 1))

    def int_field(name: str) -> Any:
        return F.expr(f"try_cast(nullif({_int_expr(name)}, 'none') as int)")

    df = df.withColumn("_fields", change(7))
    isr_text = field("isr")
    isr_inner = F.regexp_extract(isr_text, r"^\[(.*)\]$", 1)
    isr_ok = isr_text.rlike(r"^\[(-?\d+(,-?\d+)*)?\]$")
    df = df.select(
        (F.unix_millis(F.to_timestamp(F.concat(F.col("_ts"), F.lit("Z")),
                                      "yyyy-MM-dd'T'HH:mm:ss.SSSX"))).alias("timestamp_ms"),
        "level", "node_kind", "node_id", "node_epoch", "message", "line",
        change(1).alias("kind"),
        change(2).alias("topic"),
        change(3).cast("int").alias("partition"),
        F.when(is_change, F.expr(
            f"try_cast(nullif(regexp_extract(message, {_sql_string(_CHANGE)}, 4), '') as int)"
        )).alias("replica"),
        change(5).alias("old_state"),
        change(6).alias("new_state"),
        F.when(is_change, int_field("leader")).alias("leader"),
        F.when(is_change, int_field("leader_epoch")).alias("leader_epoch"),
        F.when(
            isr_ok,
            F.when(isr_inner == "", F.array().cast("array<int>")).otherwise(
                F.split(isr_inner, ",").cast("array<int>")
            ),
        ).alias("isr"),
        F.when(is_change, int_field("controller_epoch")).alias("controller_epoch"),
        "source", "_pos",
    )  # fmt: skip
    df = df.withColumn("timestamp", F.timestamp_millis(F.col("timestamp_ms")))

    ts = F.col("timestamp_ms")
    if start_ms is not None:
        df = df.where(ts >= start_ms)
    if end_ms is not None:
        df = df.where(ts <= end_ms)
    if changes_only:
        df = df.where(F.col("new_state").isNotNull())
    if topic is not None:
        df = df.where(F.col("topic").rlike(f"^(?:{topic})$"))
    if partitions is not None:
        df = df.where(F.col("partition").isin([int(p) for p in partitions]))
    return df.orderBy("timestamp_ms", "source", "_pos").select(*COLUMNS)


def _int_expr(name: str) -> str:
    pattern = _sql_string(rf"(?:^| ){name}=(\S*)")
    return f"regexp_extract(_fields, {pattern}, 1)"


def lines(df: Any) -> list[str]:
    """The ``line`` column of `merged`'s DataFrame, in order (collected to the driver)."""
    return [row.line for row in df.select("line").collect()]
