"""The cut of a Spark JVM's thread dumps added to a stuck Spark test's report: the threads of
interest stay, the others go, and output the Python workers write into the same log while the
dump is written is neither lost nor taken for the dump's end."""

from __future__ import annotations

from tests.spark_jvm import LEFT_OUT, short_thread_dumps

WORKER_STACK = """Timeout (0:00:02)!
Thread 0x00007f (most recent call first):
  File "test_stuck.py", line 9 in sleeps_in_a_worker"""

HEAD = "2026-11-30 12:00:00\nFull thread dump OpenJDK 64-Bit Server VM (17.0.15 mixed mode):"
TASK = '"Executor task launch worker for task 0.0" #70 daemon\n   java.lang.Thread.State: RUNNABLE'
RPC = '"dispatcher-event-loop-1" #20 daemon\n   java.lang.Thread.State: WAITING'
GC = '"GC Thread#0" os_prio=0 cpu=120.12ms runnable  '
END = "JNI global refs: 49, weak refs: 4"
HEAP = "Heap\n garbage-first heap   total 215040K"


def test_a_dump_keeps_the_threads_of_interest_and_ends_at_its_last_line() -> None:
    text = "\n\n".join([WORKER_STACK, HEAD, TASK, RPC, GC, END, HEAP, WORKER_STACK])
    cut = short_thread_dumps(text)
    assert TASK in cut and RPC not in cut and GC not in cut
    assert f"{LEFT_OUT}\n{END}" in cut
    assert cut.endswith(HEAP + "\n\n" + WORKER_STACK)  # what follows the dump is all kept


def test_worker_output_written_into_a_dump_is_kept_and_the_end_still_found() -> None:
    # the worker's stack lands between two threads, and later glued to the dump's last line
    glued_end = f"{WORKER_STACK}\n{END}"
    text = "\n\n".join([HEAD, TASK, WORKER_STACK, RPC, glued_end, HEAP, WORKER_STACK])
    cut = short_thread_dumps(text)
    assert cut.count("in sleeps_in_a_worker") == 3
    assert RPC not in cut
    assert LEFT_OUT in cut
    assert cut.endswith(HEAP + "\n\n" + WORKER_STACK)
    # and glued to a thread's entry
    text = "\n\n".join([HEAD, TASK, f"{GC}\n{END}", HEAP])
    cut = short_thread_dumps(text)
    assert LEFT_OUT in cut and cut.endswith(HEAP)


def test_a_dump_cut_short_is_noted() -> None:
    cut = short_thread_dumps("\n\n".join([HEAD, TASK, RPC]))
    assert TASK in cut and RPC not in cut
    assert cut.endswith("(the thread dump ends here: the JVM was still writing it)")
    assert LEFT_OUT in cut


def test_a_log_without_a_dump_is_kept_whole() -> None:
    text = "\n\n".join(["starting", RPC, WORKER_STACK])
    assert short_thread_dumps(text) == text
