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
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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
from wherry.log.config import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    LogConfig,
    message_format_ignored_warning,
    topic_message_format_warning,
)
from wherry.log.dir_deletions import DirDeletions
from wherry.log.dir_failure import LogDirFailureChannel, storage_error
from wherry.log.dir_lock import lock_dir, unlock_dir
from wherry.log.dir_names import (
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    STRAY_DIR_SUFFIX,
    delete_dir_name,
    future_dir_name,
    is_delete_dir,
    parse_future_dir_name,
)
from wherry.log.errors import LogDirNotFoundError, LogError, StorageError
from wherry.log.future_log import CopyStep, copy_step

if TYPE_CHECKING:
    from wherry.log.log import Log

__all__ = ["CLEAN_SHUTDOWN_FILE", "DELETE_DIR_SUFFIX", "LogManager"]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


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
        dir_failure: LogDirFailureChannel | None = None,
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
        # Directories of deleted logs: renamed `-delete`, removed, retried on errors.
        self._deletions = DirDeletions(now_ms_fn)
        self._had_clean_shutdown: dict[Path, bool] = {}
        # AlterReplicaLogDirs: future logs being filled in another dir, and the dir a replica
        # not created yet goes to.
        self._futures: dict[TopicPartition, Log] = {}
        self._future_dir_of: dict[TopicPartition, Path] = {}
        self._preferred_dirs: dict[TopicPartition, Path] = {}
        self._found_futures: dict[TopicPartition, list[tuple[Path, Path]]] = {}
        self._log_starts_found: dict[TopicPartition, int] = {}
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        self._dir_syncs = threading.local()  # `batched_dir_syncs`: the dirs to fsync at its end
        self._started = False
        self._shut_down = False
        # KIP-112: log dirs taken offline by an I/O error (`dir_failure.py`).
        self.dir_failure = dir_failure if dir_failure is not None else LogDirFailureChannel()

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
            # Every dir's log start offsets: a log moved by AlterReplicaLogDirs may find its
            # entry in its old dir's checkpoint still (a crash before the next checkpoint).
            for dir in self.log_dirs:
                for tp, offset in self._read_checkpoint(dir / LOG_START_OFFSET_CHECKPOINT).items():
                    self._log_starts_found.setdefault(tp, offset)
            for dir in self.log_dirs:
                try:
                    self._load_dir(dir)
                except OSError as e:  # Kafka: the dir goes offline, the others load
                    self.dir_failure.maybe_add_offline(dir, "loading logs", e)
                    self._forget_dir(dir)
                    for found in self._found_futures.values():
                        found[:] = [(p, d) for p, d in found if d != dir]
            if not self.live_log_dirs:
                raise StorageError(
                    "Shutdown broker because all log dirs in "
                    f"{', '.join(str(d) for d in self.log_dirs)} have failed"
                )
            self._deletions.run_due(self.now_ms_fn())  # what earlier runs left to delete
            self._load_future_logs()
            self._started = True

    def _lock_dir(self, dir: Path) -> None:
        if self._lock_dirs and (fd := lock_dir(dir)) is not None:
            self._lock_fds[dir] = fd

    def _unlock_dirs(self) -> None:
        for fd in self._lock_fds.values():
            unlock_dir(fd)
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
            if is_delete_dir(name):
                log.info("removing partition directory %s left from a deletion", child)
                self._deletions.schedule_removal(child, 0)
                continue
            future_of = parse_future_dir_name(name)
            if future_of is not None:
                self._found_futures.setdefault(future_of, []).append((child, dir))
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
            self._logs[tp] = self._open(
                child,
                tp,
                now_ms,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp, self._log_starts_found.get(tp, 0)),
                had_clean_shutdown=clean,
                high_watermark=high_watermarks.get(tp),
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

    # --- failed log dirs (KIP-112; the channel is `dir_failure.py`) --------------------------

    def _open(
        self,
        path: Path,
        tp: TopicPartition,
        now_ms: int,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        high_watermark: int | None = None,
    ) -> Log:
        """`Log.open` of `tp`'s log in `path` with its topic's config, its I/O errors reported
        to the failure channel."""
        from wherry.log.log import Log  # imported once there is a partition

        lg = Log.open(
            path,
            self.config_for(tp.topic),
            topic_partition=tp,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            now_ms=now_ms,
            had_clean_shutdown=had_clean_shutdown,
            high_watermark=high_watermark,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )
        lg.on_io_error = self.dir_failure.maybe_add_offline
        return lg

    @property
    def live_log_dirs(self) -> list[Path]:
        """The log dirs not taken offline by an I/O error, in `log.dirs` order."""
        return [d for d in self.log_dirs if not self.dir_failure.has_offline(d)]

    def is_dir_offline(self, dir: Path) -> bool:
        return self.dir_failure.has_offline(dir)

    def handle_log_dir_failure(self, dir: Path) -> list[TopicPartition]:
        """Kafka's LogManager.handleLogDirFailure: forget the logs (current and future) of
        offline `dir` and close their files without writing anything; returns the partitions
        whose current log was there. Nothing is written to `dir` again (no checkpoint, no
        clean-shutdown marker: the next start recovers it)."""
        return self._forget_dir(dir)

    def _forget_dir(self, dir: Path) -> list[TopicPartition]:
        with self._lock:
            gone = [tp for tp, d in self._dir_of.items() if d == dir]
            logs = [self._logs.pop(tp) for tp in gone if tp in self._logs]
            for tp in gone:
                del self._dir_of[tp]
            moving = [tp for tp, d in self._future_dir_of.items() if d == dir]
            logs += [self._futures.pop(tp) for tp in moving]
            for tp in moving:
                del self._future_dir_of[tp]
            self._partitions_in[dir] = 0
            fd = self._lock_fds.pop(dir, None)
        for lg in logs:
            lg.on_io_error = None
            with contextlib.suppress(Exception):
                lg.abandon()
        if fd is not None:
            unlock_dir(fd)
        if logs:
            log.warning("logs in offline dir %s closed: %d partitions (%d moving there)",
                        dir, len(gone), len(moving))
        return gone

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

    def get_or_create_log(
        self, tp: TopicPartition, config: LogConfig | None = None, *, is_new: bool = True
    ) -> Log:
        """The log of `tp`, created (in the log dir with the fewest partitions) if missing.

        A given `config` becomes the topic's config. As Kafka's, a replica that is not new
        (`is_new` False: the controller says it existed) is not created while a log dir is
        offline: its log may be in that dir (StorageError).
        """
        with self._lock:
            self._check_running()
            if config is not None:
                self._topic_configs[tp.topic] = config
                _warn_message_format(tp.topic, config)
            existing = self._logs.get(tp)
            if existing is not None:
                if config is not None and existing.config != config:
                    existing.update_config(config)
                return existing
            self._check_no_deleted_dir(tp)
            counts, live = self._partitions_in, self.live_log_dirs
            if not is_new and len(live) < len(self.log_dirs):
                raise StorageError(
                    f"cannot create the log of {tp}: log dirs "
                    f"{', '.join(str(d) for d in self.log_dirs if d not in live)} are offline"
                )
            if not live:
                raise StorageError(f"no log dir is online to create {tp}: all of {self.log_dirs}")
            dir = self._preferred_dirs.pop(tp, None) or min(
                live, key=lambda d: (counts[d], self.log_dirs.index(d))
            )
            if self.dir_failure.has_offline(dir):
                raise StorageError(f"cannot create {tp}: log dir {dir} is offline")
            log_dir = dir / tp.dir_name
            try:
                created = self._open(log_dir, tp, self.now_ms_fn(), had_clean_shutdown=True)
                if (batch := getattr(self._dir_syncs, "dirs", None)) is None:
                    fsync_dir(dir)
                else:
                    batch[dir] = None
            except OSError as e:
                self.dir_failure.maybe_add_offline(dir, f"creating {log_dir.name}", e)
                raise storage_error(f"creating {log_dir.name}", dir, e) from e
            self._logs[tp] = created
            self._dir_of[tp] = dir
            self._partitions_in[dir] += 1
            log.info("created log for %s in %s", tp, dir)
            return created

    @contextlib.contextmanager
    def batched_dir_syncs(self) -> Iterator[None]:
        """Logs this thread creates inside are made durable by one fsync of each log dir at
        the end, not one per log (a LeaderAndIsr of many new partitions); nothing may serve
        or acknowledge them before it ends (a LeaderAndIsr applies them with no await)."""
        if getattr(self._dir_syncs, "dirs", None) is not None:
            yield  # an outer batch syncs
            return
        dirs: dict[Path, None] = {}
        self._dir_syncs.dirs = dirs
        try:
            yield
        finally:
            self._dir_syncs.dirs = None
            for d in dirs:
                fsync_dir(d)

    def delete_log(self, tp: TopicPartition) -> bool:
        """Close the log, rename its dir to `<tp>.<uuid>-delete` (the topic shortened when the
        name would not fit) and remove it after file.delete.delay.ms; False if there is no such
        log. A file system error is not raised: the rename or removal is retried
        (`dir_deletions`)."""
        return bool(self.delete_logs([tp]))

    def delete_logs(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """`delete_log` for each of `tps`, with the checkpoints written once at the end (not
        once per log, which made deleting many partitions quadratic); returns those that had a
        log. A deleted log is closed without a producer snapshot, and the renames are made
        durable by one fsync of each parent directory once all are done (not one per log),
        before this returns: the broker answers the controller only after that."""
        deleted: list[TopicPartition] = []
        parents: dict[Path, None] = {}
        remove_now = False  # a log with file.delete.delay.ms 0
        for tp in tps:
            self.remove_future_log(tp)
            with self._lock:
                self._check_running()
                existing = self._logs.pop(tp, None)
                dir = self._dir_of.pop(tp, None)
                if dir is not None:
                    self._partitions_in[dir] -= 1
            if existing is None or dir is None:
                continue
            existing.close(keep_state=False)
            parents[existing.dir.parent] = None
            remove_now |= existing.config.file_delete_delay_ms <= 0
            self._deletions.rename_and_schedule(
                tp, existing.dir, existing.config.file_delete_delay_ms, existing.rename_dir,
                sync=False,
            )
            deleted.append(tp)
            log.info("deleted log for %s", tp)
        for parent in parents:
            fsync_dir(parent)
        if remove_now:
            self._deletions.run_due(self.now_ms_fn())
        if deleted:
            try:
                self.checkpoint_recovery_points()
                self.checkpoint_log_start_offsets()
            except (OSError, LogError) as e:  # written again by the periodic checkpoints
                log.warning("could not write the checkpoints after deleting %s: %s", deleted, e)
        return deleted

    def update_config(self, topic: str, config: LogConfig) -> None:
        """Set a topic's config and apply it to its open logs."""
        _warn_message_format(topic, config)
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
    # Future logs (AlterReplicaLogDirs)
    # ----------------------------------------------------------------------------------

    def _load_future_logs(self) -> None:
        """Future logs found at startup. Next to their current log, they are resumed. Without
        one, the crash hit a promotion between its two renames (the current log renamed away
        only once the future had caught up and was flushed): the future becomes the log."""
        now_ms = self.now_ms_fn()
        for tp, found in sorted(self._found_futures.items()):
            if not found:
                continue
            (path, dir), *extra = found
            for other, _other_dir in extra:
                log.warning("removing duplicate future log %s of %s", other, tp)
                self._discard_dir(tp, other, delay_ms=0)
            if tp in self._logs:
                if dir == self._dir_of[tp]:  # a future in the current log's own dir: useless
                    self._discard_dir(tp, path, delay_ms=0)
                    continue
                future = self._open(path, tp, now_ms)
                self._futures[tp] = future
                self._future_dir_of[tp] = dir
                log.info("resuming the move of %s to %s (future log at offset %d)",
                         tp, dir, future.log_end_offset)
                continue
            target = dir / tp.dir_name
            path.rename(target)
            fsync_dir(dir)
            self._logs[tp] = self._open(
                target, tp, now_ms, log_start_offset=self._log_starts_found.get(tp, 0)
            )
            self._dir_of[tp] = dir
            self._partitions_in[dir] += 1
            log.warning("promoted the future log of %s in %s: its current log was gone", tp, dir)
        self._found_futures.clear()
        self._log_starts_found.clear()

    def _discard_dir(self, tp: TopicPartition, path: Path, *, delay_ms: int) -> None:
        """Rename a directory of `tp` to `<tp>.<uuid>-delete`; removed after `delay_ms`."""
        self._deletions.rename_and_schedule(tp, path, delay_ms, path.rename)

    def _check_no_deleted_dir(self, tp: TopicPartition) -> None:
        """A log of `tp` deleted earlier whose directory could not be renamed yet still has
        the live name: try again now; a new log cannot be created while it is there."""
        for dir in self.log_dirs:
            path = dir / tp.dir_name
            if self._deletions.awaiting_rename(path) and not self._deletions.retry_now(path):
                raise StorageError(
                    f"the directory {path} of a deleted log of {tp} could not be renamed yet"
                )

    def delete_due_dirs(self, now_ms: int | None = None) -> int:
        """Rename and remove the directories of deleted logs that are due (Kafka's
        kafka-delete-logs task); returns how many were removed."""
        now = self.now_ms_fn() if now_ms is None else now_ms
        due = self._deletions.next_due_ms()
        if due is None or due > now:
            return 0
        return self._deletions.run_due(now)

    def pending_dir_deletions(self) -> list[Path]:
        """Directories of deleted logs still to be renamed or removed."""
        return self._deletions.pending()

    def log_dir_online(self, dir: Path | str) -> Path:
        """The configured log dir `dir` names (absolute); LogDirNotFoundError when it is not one
        of `log.dirs`, StorageError when it cannot be written (Kafka: an offline dir)."""
        path = Path(dir)
        if not path.is_absolute() or path not in self.log_dirs:
            raise LogDirNotFoundError(f"Log dir {dir} is not found in the config.")
        if self.dir_failure.has_offline(path) or not (
            path.is_dir() and os.access(path, os.W_OK | os.X_OK)
        ):
            raise StorageError(f"Log directory {dir} is offline")
        return path

    def future_log(self, tp: TopicPartition) -> Log | None:
        return self._futures.get(tp)

    def future_logs(self) -> list[Log]:
        with self._lock:
            return list(self._futures.values())

    def placements(self) -> tuple[list[tuple[Log, Path]], list[tuple[Log, Path, Log]]]:
        """Each log with its dir, and each future log with its dir and current log, read
        together: a move's finish changes both at once, and a view taken half before and half
        after it would show the replica in neither place as moving nor moved."""
        with self._lock:
            logs = [(lg, self._dir_of[tp]) for tp, lg in self._logs.items() if tp in self._dir_of]
            return logs, [(f, self._future_dir_of[tp], self._logs[tp])
                          for tp, f in self._futures.items() if tp in self._logs]

    def future_dir_of(self, tp: TopicPartition) -> Path | None:
        return self._future_dir_of.get(tp)

    def set_preferred_dir(self, tp: TopicPartition, dir: Path) -> None:
        """The dir the replica of `tp` is created in if it does not exist yet."""
        with self._lock:
            if tp not in self._logs:
                self._preferred_dirs[tp] = dir

    def create_future_log(self, tp: TopicPartition, dest: Path) -> bool:
        """Start moving `tp`'s log to `dest`: True if a future log was created. No-op (False)
        when the log already is in `dest` (a future elsewhere is dropped) or a future is
        already being filled there; a future in another dir is replaced."""
        with self._lock:
            self._check_running()
            current = self._logs.get(tp)
            if current is None:
                raise StorageError(f"no log of {tp} on this broker")
            if self._future_dir_of.get(tp) == dest:
                return False
        self.remove_future_log(tp)
        with self._lock:
            if self._dir_of.get(tp) == dest:
                return False
            path = dest / future_dir_name(tp)
            future = self._open(path, tp, self.now_ms_fn(), had_clean_shutdown=True)
            fsync_dir(dest)
            self._futures[tp] = future
            self._future_dir_of[tp] = dest
        log.info("created future log of %s in %s", tp, dest)
        return True

    def remove_future_log(self, tp: TopicPartition) -> bool:
        """Stop moving `tp`: drop its future log (False if there is none)."""
        with self._lock:
            future = self._futures.pop(tp, None)
            dest = self._future_dir_of.pop(tp, None)
        if future is None or dest is None:
            return False
        with future.lock:
            future.close()
            self._discard_dir(tp, future.dir, delay_ms=0)
        log.info("removed the future log of %s from %s", tp, dest)
        return True

    def copy_to_future(self, tp: TopicPartition, max_bytes: int) -> CopyStep:
        """One copy step of `tp`'s move (blocking I/O)."""
        with self._lock:
            current, future = self._logs.get(tp), self._futures.get(tp)
        if current is None or future is None or current.closed or future.closed:
            return CopyStep(0, False)
        return copy_step(current, future, max_bytes=max_bytes)

    def future_lag(self, tp: TopicPartition) -> int:
        """Offsets the future log of `tp` is behind its current log (0 without a future)."""
        with self._lock:
            current, future = self._logs.get(tp), self._futures.get(tp)
        if current is None or future is None:
            return 0
        return max(0, current.log_end_offset - future.log_end_offset)

    def promote_future_log(
        self,
        tp: TopicPartition,
        *,
        max_bytes: int = 1 << 20,
        crash_hook: Callable[[str], None] | None = None,
    ) -> bool:
        """Finish `tp`'s move (Kafka's replaceCurrentWithFutureLog): with the current log's
        lock held (appends wait), copy its last batches, flush the future log, rename the
        current directory to `-delete` and the future one to `<topic>-<partition>`, and give
        the current `Log` object the future's storage, so whoever holds it carries on in the
        new dir. The old directory goes after `file.delete.delay.ms`. At every instant one
        complete copy is on disk under a name startup recognizes: the current log, or (after
        the first rename) the flushed future, which startup promotes. `crash_hook(step)` is
        called between the steps (tests raise there to simulate a crash)."""
        with self._lock:
            self._check_running()
            current, future = self._logs.get(tp), self._futures.get(tp)
            dest = self._future_dir_of.get(tp)
            src = self._dir_of.get(tp)
        if current is None or future is None or dest is None or src is None:
            return False
        hook = crash_hook or (lambda step: None)
        with current.lock:
            if current.closed or future.closed:
                return False
            while copy_step(current, future, max_bytes=max_bytes).copied > 0:
                pass
            if future.log_end_offset != current.log_end_offset:
                return False
            if future.config != current.config:
                future.update_config(current.config)
            future.update_high_watermark(current.high_watermark)
            if current.log_start_offset > future.log_start_offset:
                future.maybe_increment_log_start_offset(current.log_start_offset)
            latest = future.latest_epoch
            for entry in current.leader_epoch_cache.entries:
                # Epochs begun without records (a leadership change) have no batch to copy.
                if latest is None or entry.epoch > latest:
                    future.leader_epoch_cache.assign(entry.epoch, entry.start_offset)
            future.flush()
            hook("flushed")
            old_dir = src / delete_dir_name(tp)
            current.rename_dir(old_dir)
            fsync_dir(src)
            hook("current-renamed")
            try:
                future.rename_dir(dest / tp.dir_name)
            except OSError:
                # The destination refuses the rename: the current log goes back under its own
                # name (a restart would otherwise take its `-delete` name for a deleted log).
                current.rename_dir(src / tp.dir_name)
                fsync_dir(src)
                raise
            fsync_dir(dest)
            hook("future-renamed")
            current.swap_storage(future)  # `future` now holds the old storage
            with self._lock:
                self._futures.pop(tp, None)
                self._future_dir_of.pop(tp, None)
                self._dir_of[tp] = dest
                self._partitions_in[src] -= 1
                self._partitions_in[dest] += 1
        delay = current.config.file_delete_delay_ms
        future.close()
        self._deletions.schedule_removal(old_dir, self.now_ms_fn() + max(0, delay))
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        log.info("moved the log of %s from %s to %s", tp, src, dest)
        return True

    # --- checkpoints ------------------------------------------------------------------------

    def _logs_per_dir(self) -> dict[Path, dict[TopicPartition, Log]]:
        """Each live log dir's logs, in one pass (not a path compared per log and dir)."""
        per_dir: dict[Path, dict[TopicPartition, Log]] = {d: {} for d in self.live_log_dirs}
        for tp, lg in self._logs.items():
            if (logs := per_dir.get(self._dir_of.get(tp))) is not None:  # type: ignore[arg-type]
                logs[tp] = lg
        return per_dir

    def _write_checkpoints(
        self,
        name: str,
        offsets_for: Callable[[Path, dict[TopicPartition, Log]], dict[TopicPartition, int]],
    ) -> None:
        # The checkpoint lock keeps writers ordered (a stale write never lands last); the
        # manager lock is only held while collecting offsets.
        with self._checkpoint_lock:
            with self._lock:
                per_dir = {d: offsets_for(d, logs) for d, logs in self._logs_per_dir().items()}
            for dir, offsets in per_dir.items():
                try:
                    OffsetCheckpointFile(dir / name).write(offsets)
                except StorageError as e:  # that dir goes offline; the others are written
                    cause = e.__cause__ if isinstance(e.__cause__, OSError) else e
                    self.dir_failure.maybe_add_offline(dir, f"writing {name}", cause)

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
            if lg.closed or lg.io_failed is not None:  # its dir failed: nothing more there
                continue
            try:
                deleted += lg.delete_old_segments(now)
                lg.remove_expired_producers(now)
            except StorageError:
                log.exception("retention failed for %s", lg.topic_partition)
        self.delete_due_dirs(now)
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
            except StorageError:
                pass  # its dir went offline (logged once by the failure channel)
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
            futures = list(self._futures.values())
        failed_dirs: set[Path] = set()
        now = self.now_ms_fn()
        for future in futures:  # resumed at the next start
            try:
                future.flush(now_ms=now)
                future.close()
            except (OSError, LogError):
                log.exception("error closing future log %s", future.dir)
        # One sync of the file systems for every log's producer snapshot, not two fsyncs
        # per log (thousands of partitions took minutes); done before the checkpoints and
        # the clean-shutdown marker.
        sync_all = getattr(os, "sync", None)
        for tp, lg in logs:
            try:
                lg.flush(now_ms=now)
                lg.close(fsync=sync_all is None)
            except StorageError:  # its dir went offline now (logged once by the channel)
                failed_dirs.add(self._dir_of[tp])
            except (OSError, LogError):
                log.exception("error closing log %s", tp)
                failed_dirs.add(self._dir_of[tp])
        if sync_all is not None and logs:
            sync_all()
        try:
            self.checkpoint_high_watermarks(high_watermarks)
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()
        except (OSError, LogError):
            log.exception("error writing checkpoints at shutdown")
            failed_dirs.update(self.log_dirs)
        marker = json.dumps({"version": 0, "brokerEpoch": broker_epoch}).encode()
        for dir in self.live_log_dirs:  # an offline dir is recovered at the next start
            if dir not in failed_dirs and not self.dir_failure.has_offline(dir):
                try:
                    atomic_write(dir / CLEAN_SHUTDOWN_FILE, marker)
                except OSError as e:
                    self.dir_failure.maybe_add_offline(dir, "writing the clean-shutdown marker", e)
        with self._lock:
            self._unlock_dirs()
        log.info("log manager shut down (%d logs)", len(logs))

    def abandon(self) -> None:
        """Release the dir locks without flushing, closing, checkpointing or writing the
        clean-shutdown marker (simulates a crash in tests; the logs stay as they are)."""
        with self._lock:
            self._shut_down = True
            self._unlock_dirs()


def _warn_message_format(topic: str, config: LogConfig) -> None:
    """Kafka 3.x's warning for a topic's deprecated pre-0.11 message format (ignored)."""
    if message_format_ignored_warning(config.message_format_version):
        log.warning("%s", topic_message_format_warning(topic, config.message_format_version))


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
