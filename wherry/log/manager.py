"""All partition logs of a broker across its log directories (Kafka 3.9's LogManager).

Each log dir holds `<topic>-<partition>` directories, the checkpoint files
(`recovery-point-offset-checkpoint`, `replication-offset-checkpoint`,
`log-start-offset-checkpoint`), a `.lock` file held while the broker runs and, between a clean
shutdown and the next start, the `.kafka_cleanshutdown` marker.

No threads or timers: the broker's scheduler calls `cleanup`, `flush_dirty` and the
`checkpoint_*` methods periodically (possibly from an executor; each Log has its own lock and
the manager's maps are guarded by a lock too).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from wherry.common.topic_partition import TopicPartition
from wherry.log.checkpoint import (
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
    atomic_write,
    fsync_dir,
)
from wherry.log.config import DEFAULT_PRODUCER_ID_EXPIRATION_MS, LogConfig
from wherry.log.errors import LogDirLockedError, LogError, StorageError

if TYPE_CHECKING:
    from wherry.log.log import Log

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["CLEAN_SHUTDOWN_FILE", "DELETE_DIR_SUFFIX", "LOCK_FILE", "LogManager"]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class LogManager:
    """Creates, loads, checkpoints, cleans and shuts down partition logs. Call `startup()`."""

    def __init__(
        self,
        log_dirs: Sequence[Path],
        default_config: LogConfig,
        now_ms_fn: Callable[[], int] = _wall_clock_ms,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        topic_configs: Mapping[str, LogConfig] | None = None,
        lock_dirs: bool = True,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [Path(d).absolute() for d in log_dirs]
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"duplicate log dirs in {log_dirs}")
        self.default_config = default_config
        self.now_ms_fn = now_ms_fn
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._topic_configs: dict[str, LogConfig] = dict(topic_configs or {})
        self._lock_dirs = lock_dirs
        self._lock_fds: dict[Path, int] = {}
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._partitions_in: dict[Path, int] = dict.fromkeys(self.log_dirs, 0)
        self._pending_dir_deletes: list[tuple[int, Path]] = []
        self._had_clean_shutdown: dict[Path, bool] = {}
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        self._started = False
        self._shut_down = False

    # ----------------------------------------------------------------------------------
    # Startup
    # ----------------------------------------------------------------------------------

    def startup(self, topic_configs: Mapping[str, LogConfig] | None = None) -> None:
        """Lock the dirs and load every partition log, recovering after an unclean shutdown.

        `topic_configs` (topic -> LogConfig) gives per-topic configs; others use the default.
        """
        with self._lock:
            if self._started:
                return
            if topic_configs:
                self._topic_configs.update(topic_configs)
            for dir in self.log_dirs:
                dir.mkdir(parents=True, exist_ok=True)
                self._lock_dir(dir)
            for dir in self.log_dirs:
                self._load_dir(dir)
            self._started = True

    def _lock_dir(self, dir: Path) -> None:
        if not self._lock_dirs or fcntl is None:
            return
        fd = os.open(dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LogDirLockedError(
                f"failed to acquire lock on {dir / LOCK_FILE}: another process or broker "
                f"instance is using this directory"
            ) from None
        self._lock_fds[dir] = fd

    def _unlock_dirs(self) -> None:
        for fd in self._lock_fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._lock_fds.clear()

    @staticmethod
    def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(path).read()
        except LogError as exc:
            log.warning("error reading checkpoint %s, ignoring it: %s", path, exc)
            return {}

    @staticmethod
    def _dir_state(dir: Path, clean: bool) -> str:
        """How the dir was left: a clean or an unclean shutdown, or never used (no partition
        directory and no checkpoint yet: a fresh dir is not an unclean shutdown)."""
        if clean:
            return "clean shutdown"
        used = any(
            (child.is_dir() and _looks_like_partition(child.name))
            or child.name.endswith("-checkpoint")
            for child in dir.iterdir()
        )
        return "unclean shutdown" if used else "new log dir"

    def _load_dir(self, dir: Path) -> None:
        marker = dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        self._had_clean_shutdown[dir] = clean
        recovery_points = self._read_checkpoint(dir / RECOVERY_POINT_CHECKPOINT)
        log_starts = self._read_checkpoint(dir / LOG_START_OFFSET_CHECKPOINT)
        high_watermarks = self._read_checkpoint(dir / HIGH_WATERMARK_CHECKPOINT)
        now_ms = self.now_ms_fn()
        log.info("loading logs from %s (%s)", dir, self._dir_state(dir, clean))
        for child in sorted(dir.iterdir()):
            if not child.is_dir():
                continue
            name = child.name
            if name.endswith(DELETE_DIR_SUFFIX):
                log.info("removing partition directory %s left from a deletion", child)
                shutil.rmtree(child, ignore_errors=True)
                continue
            if name.endswith((FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
                log.warning("ignoring partition directory %s", child)
                continue
            try:
                tp = TopicPartition.parse(name)
            except ValueError:
                # e.g. the embedded metadata store's "__meta"; Kafka ignores such dirs too
                log.debug("ignoring non-partition directory %s", child)
                continue
            if tp in self._logs:
                raise StorageError(
                    f"duplicate log directories for {tp}: {self._dir_of[tp]} and {dir}"
                )
            from wherry.log.log import Log  # imported once there is a partition

            self._logs[tp] = Log.open(
                child,
                self.config_for(tp.topic),
                topic_partition=tp,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp, 0),
                now_ms=now_ms,
                had_clean_shutdown=clean,
                high_watermark=high_watermarks.get(tp),
                producer_id_expiration_ms=self.producer_id_expiration_ms,
            )
            self._dir_of[tp] = dir
            self._partitions_in[dir] += 1
        if clean:
            marker.unlink(missing_ok=True)
            fsync_dir(dir)

    # ----------------------------------------------------------------------------------
    # Lookup / creation / deletion
    # ----------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._started

    def had_clean_shutdown(self, dir: Path) -> bool:
        """Whether `dir` had the clean-shutdown marker at startup."""
        return self._had_clean_shutdown.get(Path(dir).absolute(), False)

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def log_dir_of(self, tp: TopicPartition) -> Path | None:
        return self._dir_of.get(tp)

    def all_logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def topic_partitions(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._logs)

    def _check_running(self) -> None:
        if not self._started:
            raise StorageError("LogManager.startup() has not been called")
        if self._shut_down:
            raise StorageError("LogManager has been shut down")

    def get_or_create_log(self, tp: TopicPartition, config: LogConfig | None = None) -> Log:
        """The log of `tp`, created (in the log dir with the fewest partitions) if missing.

        A given `config` becomes the topic's config.
        """
        with self._lock:
            self._check_running()
            if config is not None:
                self._topic_configs[tp.topic] = config
            existing = self._logs.get(tp)
            if existing is not None:
                if config is not None and existing.config != config:
                    existing.update_config(config)
                return existing
            counts = self._partitions_in
            dir = min(self.log_dirs, key=lambda d: (counts[d], self.log_dirs.index(d)))
            log_dir = dir / tp.dir_name
            from wherry.log.log import Log

            created = Log.open(
                log_dir,
                self.config_for(tp.topic),
                topic_partition=tp,
                now_ms=self.now_ms_fn(),
                had_clean_shutdown=True,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
            )
            fsync_dir(dir)
            self._logs[tp] = created
            self._dir_of[tp] = dir
            self._partitions_in[dir] += 1
            log.info("created log for %s in %s", tp, dir)
            return created

    def delete_log(self, tp: TopicPartition) -> bool:
        """Close the log, rename its dir to `<tp>.<uuid>-delete` and remove it after
        file.delete.delay.ms (by `cleanup`); False if there is no such log."""
        with self._lock:
            self._check_running()
            existing = self._logs.pop(tp, None)
            dir = self._dir_of.pop(tp, None)
            if dir is not None:
                self._partitions_in[dir] -= 1
        if existing is None or dir is None:
            return False
        delay = existing.config.file_delete_delay_ms
        existing.close()
        target = dir / f"{tp.dir_name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        existing.rename_dir(target)
        fsync_dir(dir)
        if delay <= 0:
            shutil.rmtree(target, ignore_errors=True)
        else:
            with self._lock:
                self._pending_dir_deletes.append((self.now_ms_fn() + delay, target))
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        log.info("deleted log for %s", tp)
        return True

    def update_config(self, topic: str, config: LogConfig) -> None:
        """Set a topic's config and apply it to its open logs."""
        with self._lock:
            self._topic_configs[topic] = config
            for tp, existing in self._logs.items():
                if tp.topic == topic:
                    existing.update_config(config)

    def update_default_config(self, config: LogConfig) -> None:
        """Change the broker-wide default (applies to topics without their own config)."""
        with self._lock:
            self.default_config = config
            for tp, existing in self._logs.items():
                if tp.topic not in self._topic_configs:
                    existing.update_config(config)

    # ----------------------------------------------------------------------------------
    # Checkpoints
    # ----------------------------------------------------------------------------------

    def _logs_in(self, dir: Path) -> dict[TopicPartition, Log]:
        return {tp: lg for tp, lg in self._logs.items() if self._dir_of.get(tp) == dir}

    def _write_checkpoints(
        self,
        name: str,
        offsets_for: Callable[[Path, dict[TopicPartition, Log]], dict[TopicPartition, int]],
    ) -> None:
        # The checkpoint lock keeps writers ordered (a stale write never lands last); the
        # manager lock is only held while collecting offsets.
        with self._checkpoint_lock:
            with self._lock:
                per_dir = {d: offsets_for(d, self._logs_in(d)) for d in self.log_dirs}
            for dir, offsets in per_dir.items():
                OffsetCheckpointFile(dir / name).write(offsets)

    def checkpoint_recovery_points(self) -> None:
        self._write_checkpoints(
            RECOVERY_POINT_CHECKPOINT,
            lambda _, logs: {tp: lg.recovery_point for tp, lg in logs.items()},
        )

    def checkpoint_log_start_offsets(self) -> None:
        self._write_checkpoints(
            LOG_START_OFFSET_CHECKPOINT,
            lambda _, logs: {tp: lg.log_start_offset for tp, lg in logs.items()},
        )

    def checkpoint_high_watermarks(
        self, high_watermarks: Mapping[TopicPartition, int] | None = None
    ) -> None:
        """Write replication-offset-checkpoint in every dir: the given high watermarks (for
        partitions with a log in that dir) or, by default, each log's `high_watermark`."""

        def offsets(_: Path, logs: dict[TopicPartition, Log]) -> dict[TopicPartition, int]:
            if high_watermarks is None:
                return {tp: lg.high_watermark for tp, lg in logs.items()}
            return {tp: hw for tp, hw in high_watermarks.items() if tp in logs}

        self._write_checkpoints(HIGH_WATERMARK_CHECKPOINT, offsets)

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        """High watermarks from every dir's replication-offset-checkpoint."""
        out: dict[TopicPartition, int] = {}
        for dir in self.log_dirs:
            out.update(self._read_checkpoint(dir / HIGH_WATERMARK_CHECKPOINT))
        return out

    # ----------------------------------------------------------------------------------
    # Periodic work
    # ----------------------------------------------------------------------------------

    def cleanup(self, now_ms: int | None = None) -> int:
        """Retention pass over all logs (plus expired producer ids and files of deleted
        segments/partitions whose delay passed); returns segments deleted."""
        now = self.now_ms_fn() if now_ms is None else now_ms
        deleted = 0
        for lg in self.all_logs():
            if lg.closed:
                continue
            try:
                deleted += lg.delete_old_segments(now)
                lg.remove_expired_producers(now)
            except StorageError:
                log.exception("retention failed for %s", lg.topic_partition)
        with self._lock:
            due = [p for t, p in self._pending_dir_deletes if t <= now]
            self._pending_dir_deletes = [(t, p) for t, p in self._pending_dir_deletes if t > now]
        for path in due:
            shutil.rmtree(path, ignore_errors=True)
        return deleted

    def flush_dirty(self, now_ms: int | None = None) -> int:
        """Flush logs whose flush.ms elapsed or that rolled since their last flush; returns
        how many were flushed."""
        now = self.now_ms_fn() if now_ms is None else now_ms
        flushed = 0
        for lg in self.all_logs():
            try:
                if lg.flush_if_needed(now):
                    flushed += 1
            except OSError:
                log.exception("flush failed for %s", lg.topic_partition)
        return flushed

    # ----------------------------------------------------------------------------------
    # Shutdown
    # ----------------------------------------------------------------------------------

    def shutdown(
        self,
        high_watermarks: Mapping[TopicPartition, int] | None = None,
        *,
        broker_epoch: int = -1,
    ) -> None:
        """Flush and close every log, write all checkpoints and the clean-shutdown marker."""
        with self._lock:
            if self._shut_down or not self._started:
                self._unlock_dirs()
                return
            self._shut_down = True  # no new logs from here on
            logs = list(self._logs.items())
        failed_dirs: set[Path] = set()
        now = self.now_ms_fn()
        for tp, lg in logs:
            try:
                lg.flush(now_ms=now)
                lg.close()
            except (OSError, LogError):
                log.exception("error closing log %s", tp)
                failed_dirs.add(self._dir_of[tp])
        try:
            self.checkpoint_high_watermarks(high_watermarks)
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()
        except (OSError, LogError):
            log.exception("error writing checkpoints at shutdown")
            failed_dirs.update(self.log_dirs)
        marker = json.dumps({"version": 0, "brokerEpoch": broker_epoch}).encode()
        for dir in self.log_dirs:
            if dir not in failed_dirs:
                atomic_write(dir / CLEAN_SHUTDOWN_FILE, marker)
        with self._lock:
            self._unlock_dirs()
        log.info("log manager shut down (%d logs)", len(logs))

    def abandon(self) -> None:
        """Release the dir locks without flushing, closing, checkpointing or writing the
        clean-shutdown marker (simulates a crash in tests; the logs stay as they are)."""
        with self._lock:
            self._shut_down = True
            self._unlock_dirs()


def _looks_like_partition(name: str) -> bool:
    try:
        TopicPartition.parse(
            name.rsplit(".", 1)[0]
            if name.endswith((DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX))
            else name
        )
    except ValueError:
        return False
    return True
