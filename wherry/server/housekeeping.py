"""A broker's housekeeping, scheduled in one place for `wherry server` and the simulator.

The jobs, with Kafka's names and the broker config keys that pace them:

- `kafka-log-retention` (`log.retention.check.interval.ms`): retention by time, size and log
  start offset, expired producer ids, files of deleted segments past `file.delete.delay.ms`;
- `kafka-delete-logs` (every second): directories of deleted logs removed when due, failed
  steps retried;
- `kafka-log-cleaner-thread-<n>` (`log.cleaner.threads`, `log.cleaner.backoff.ms`): compaction,
  when `log.cleaner.enable` (`cleaner_threads.py`); in `wherry server` the threads hand the
  reading and writing of each clean to a worker process (`cleaner_process.py`), in the
  simulator it runs inline like the other jobs;
- `kafka-log-flusher` (`log.flush.scheduler.interval.ms`): logs past their `flush.ms`, and
  rolled segments not yet flushed;
- `kafka-recovery-point-checkpoint` (`log.flush.offset.checkpoint.interval.ms`) and
  `kafka-log-start-offset-checkpoint` (`log.flush.start.offset.checkpoint.interval.ms`);
- `delete-expired-group-metadata` (`offsets.retention.check.interval.ms`): the group
  coordinator's expired offsets, when the broker runs one.

File work is a blocking job: on the loop's executor in `wherry server`, inline on the loop in
the simulator (a `Scheduler` built with `blocking_in_executor=False`: deterministic, no
threads). The log manager's tasks first run after Kafka's initial task delay (30 s, or one
period when shorter). Cancelling the scheduler's jobs ends the housekeeping: `shutdown()` at a
clean stop, `cancel_all()` at a simulated crash.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wherry.runtime.scheduler import Job, Scheduler
from wherry.server.startup import initial_task_delay_ms

if TYPE_CHECKING:
    from wherry.log.cleaner import LogCleaner
    from wherry.log.manager import LogManager
    from wherry.server.config import BrokerConfig

__all__ = ["DELETE_LOGS_INTERVAL_MS", "schedule_housekeeping"]

DELETE_LOGS_INTERVAL_MS = 1_000  # how often deleted logs' directories due to go are looked at


def schedule_housekeeping(
    scheduler: Scheduler,
    config: BrokerConfig,
    log_manager: LogManager,
    *,
    expire_group_offsets: Callable[[], Any] | None = None,
) -> LogCleaner | None:
    """Schedule the broker's housekeeping on `scheduler` (its clock is the broker's; it runs
    blocking jobs on the executor or inline); returns the log cleaner, None when
    `log.cleaner.enable` is false."""
    cfg, lm, now_ms = config, log_manager, scheduler.clock.now_ms
    s = scheduler
    s.schedule(
        "kafka-log-retention",
        lambda: lm.cleanup(now_ms()),
        period_ms=cfg.log_retention_check_interval_ms,
        delay_ms=initial_task_delay_ms(cfg.log_retention_check_interval_ms),
        executor=True,
    )
    s.schedule(
        "kafka-delete-logs",
        lambda: lm.delete_due_dirs(now_ms()),
        period_ms=DELETE_LOGS_INTERVAL_MS,
        delay_ms=DELETE_LOGS_INTERVAL_MS,
        executor=True,
    )
    cleaner: LogCleaner | None = None
    if cfg.log_cleaner_enable:
        from wherry.log.cleaner import CleanerConfig, LogCleaner
        from wherry.server.cleaner_threads import start as start_cleaner

        worker = None
        if s.blocking_in_executor:  # `wherry server`: the cleaning in a worker process
            from wherry.server.cleaner_process import CleanerProcess

            worker = CleanerProcess()
        cleaner = LogCleaner(
            lm.log_dirs,
            lm.all_logs,
            lm.log_dir_of,
            CleanerConfig(
                backoff_ms=cfg.log_cleaner_backoff_ms,
                dedupe_buffer_size=cfg.log_cleaner_dedupe_buffer_size,
                threads=cfg.log_cleaner_threads,
            ),
            runner=worker,
            close_runner=worker.close if worker is not None else None,
        )
        start_cleaner(s, cleaner, now_ms)
    file_tasks: list[tuple[str, Job, int]] = [
        (
            "kafka-log-flusher",
            lambda: lm.flush_dirty(now_ms()),
            cfg.log_flush_scheduler_interval_ms,
        ),
        (
            "kafka-recovery-point-checkpoint",
            lm.checkpoint_recovery_points,
            cfg.log_flush_offset_checkpoint_interval_ms,
        ),
        (
            "kafka-log-start-offset-checkpoint",
            lm.checkpoint_log_start_offsets,
            cfg.log_flush_start_offset_checkpoint_interval_ms,
        ),
    ]
    for name, task, interval_ms in file_tasks:
        delay_ms = initial_task_delay_ms(interval_ms)
        s.schedule(name, task, period_ms=interval_ms, delay_ms=delay_ms, executor=True)
    if expire_group_offsets is not None:
        s.schedule(
            "delete-expired-group-metadata",
            expire_group_offsets,
            period_ms=cfg.offsets_retention_check_interval_ms,
            delay_ms=cfg.offsets_retention_check_interval_ms,
        )
    return cleaner
