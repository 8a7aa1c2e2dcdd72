"""A PySpark source and sink for Kafka topics: ``format("wherry")`` (needs ``wherry[spark]``).

    from wherry.spark import register
    register(spark)
    df = (spark.readStream.format("wherry")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

Options and row schema follow Spark's own Kafka connector; see docs/spark.md. This package's
pure parts (`options`, `planning`) import without PySpark; `register` and `source` need it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the ``wherry`` data source with a SparkSession (once per session)."""
    from wherry.spark.source import WherryDataSource

    spark.dataSource.register(WherryDataSource)
