"""Static registration of wherry's PySpark data source: with wherry installed,
`spark.read.format("wherry")` works in a fresh SparkSession without `wherry.spark.register`.

PySpark (4.x) looks, at the first use of a Python data source, for top-level modules named
``pyspark_*`` on the Python path and registers each one's ``DefaultSource`` under its
``name()`` (`pyspark/sql/worker/lookup_data_sources.py`). This module is that hook; it is
imported only by PySpark.
"""

from wherry.spark.source import WherryDataSource as DefaultSource

__all__ = ["DefaultSource"]
