"""Stopping the JVM PySpark started in the test process."""

from __future__ import annotations


def stop_spark_jvm() -> None:
    """Stop the session, the py4j gateway and the JVM PySpark started in this process, if any
    (the JVM by its own PID)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    jvm = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if jvm is not None:
        jvm.terminate()
        try:
            jvm.wait(timeout=20)
        except Exception:
            jvm.kill()
            jvm.wait(timeout=10)
