"""The JVM PySpark started in the test process: stopping it, and its thread dumps cut to the
threads worth reading in a failing test's report."""

from __future__ import annotations

import re

# Threads of a JVM thread dump worth reading when a test is stuck: those that run queries,
# tasks, Python workers and calls from Python. The dump's other threads (RPC loops, GC,
# dispatchers) are left out of the report.
_THREADS_OF_INTEREST = re.compile(
    r'^"(main|Thread-\d+|Executor task launch.*|stream execution.*|.*[Pp]ython.*)"'
)
_DUMP_END = re.compile(r"^JNI global refs", re.MULTILINE)
LEFT_OUT = "(other threads left out)"


def short_thread_dumps(text: str) -> str:
    """`text` (a JVM's log) with each thread dump in it cut to the threads of interest.

    A thread's entry in a dump starts with its quoted name. Whatever else is written into the
    log while the JVM writes its dump (the Python workers write their stacks into the same
    file) is kept, and the dump ends at its "JNI global refs" line even when other output is
    glued to that line's paragraph. A dump cut short (the JVM still writing it) is noted."""
    out: list[str] = []
    in_dump = False
    for block in text.split("\n\n"):
        if "Full thread dump" in block:
            in_dump = True
            out.append(block)
        elif in_dump and _DUMP_END.search(block):
            in_dump = False
            out.append(f"{LEFT_OUT}\n{block}")
        elif not in_dump or not block.startswith('"') or _THREADS_OF_INTEREST.match(block):
            out.append(block)
    if in_dump:
        out.append(f"{LEFT_OUT}\n(the thread dump ends here: the JVM was still writing it)")
    return "\n\n".join(out)


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
