"""The state-change log: one line per leader/ISR/replica state change, written by
the controller and by every broker to `<data dir>/state-change.log`, in a format the merge tool
parses back.

A line::

    2025-11-22T00:14:03.123Z INFO [Controller id=1 epoch=3] Partition orders-0 \
        OfflinePartition -> OnlinePartition leader=2 leader_epoch=5 isr=[2,3] \
        controller_epoch=3 zk_version=4

(one line in the file; wrapped here)

* an ISO-8601 UTC timestamp with milliseconds, then the level;
* who wrote it: ``[Controller id=N epoch=E]`` or ``[Broker id=N]``;
* for a change: ``Partition <topic>-<p>`` (or ``Replica <topic>-<p> replica=R``), the old and the
  new state joined by ``->``, then ``key=value`` fields with no spaces inside a value (the ISR
  as ``[1,2]``): leader, leader_epoch, isr, controller_epoch and whatever else the writer adds.

Other lines (requests sent or ignored, elections that failed) share the timestamp, level and
writer prefix; the parser returns them with no change fields. Newlines inside a message are
written as ``\\n`` so every record stays on one line.

Everything goes through the ``wherry.state_change`` logger; `attach_state_change_log` adds the
file handler (the log-level default leaves the root logger's handlers alone: the records also
reach them, as any other log record). The module imports nothing of wherry's.
"""

from __future__ import annotations

import datetime as dt
import functools
import heapq
import logging
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "LOGGER_NAME",
    "STATE_CHANGE_LOG_FILE",
    "StateChangeFormatter",
    "StateChangeLogHandle",
    "StateChangeRecord",
    "add_state_change_listener",
    "attach_state_change_log",
    "batched_lines",
    "broker_prefix",
    "controller_prefix",
    "log_broker_partition_change",
    "log_change",
    "log_controller_partition_change",
    "log_controller_replica_change",
    "merge_state_change_logs",
    "parse_state_change_line",
    "partition_subject",
    "read_state_change_log",
    "replica_subject",
    "state_change_line",
    "state_change_logger",
]

LOGGER_NAME: Final = "wherry.state_change"
STATE_CHANGE_LOG_FILE: Final = "state-change.log"

state_change_logger = logging.getLogger(LOGGER_NAME)

FieldValue = int | str | bool | Sequence[int] | None

_LINES_ATTR: Final = "state_change_lines"
"""Set on a record whose message is several lines (`batched_lines`): each is written as a line
of its own, with the record's timestamp and level."""

_batch: ContextVar[list[str] | None] = ContextVar("state_change_batch", default=None)


@contextmanager
def batched_lines() -> Iterator[None]:
    """Collect the INFO lines logged in the block (`log_change`, `state_change_line`) and write
    them as ONE log record when it ends: the same lines in the file, at the cost of one record
    instead of one each (a broker applying a LeaderAndIsr of 10,000 partitions, a controller
    electing thousands of leaders at failover). Any other state-change record logged in the
    block first writes what was collected, so the file keeps the order of the calls; the lines
    share the timestamp of the moment they are written. Meant for synchronous code (no await
    inside: lines of other tasks would otherwise be written between). Nested blocks add to the
    outermost one."""
    if _batch.get() is not None:
        yield
        return
    lines: list[str] = []
    token = _batch.set(lines)
    try:
        yield
    finally:
        _batch.reset(token)
        _write_lines(lines)


def _write_lines(lines: list[str]) -> None:
    if lines:
        text = "\n".join(lines)
        lines.clear()
        state_change_logger.log(logging.INFO, "%s", text, extra={_LINES_ATTR: True})


def _collected(level: int, line: str) -> bool:
    """Add `line` to the open `batched_lines` block, if any (INFO lines only)."""
    lines = _batch.get()
    if lines is None or level != logging.INFO:
        return False
    lines.append(line.replace("\r", "\\r").replace("\n", "\\n"))
    return True


class _WriteCollectedFirst(logging.Filter):
    """On the state-change logger: a record logged inside a `batched_lines` block (a warning,
    a line logged directly) writes the lines collected so far before itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, _LINES_ATTR, False):
            lines = _batch.get()
            if lines:
                _write_lines(lines)
        return True


state_change_logger.addFilter(_WriteCollectedFirst())


def state_change_line(level: int, msg: str, *args: object) -> None:
    """Log a line (``msg % args``) through the state-change logger; inside `batched_lines`
    an INFO line is collected with the block's others."""
    if not state_change_logger.isEnabledFor(level):
        return
    if _batch.get() is not None and level == logging.INFO:
        _collected(level, msg % args if args else msg)
        return
    state_change_logger.log(level, msg, *args)


# ----------------------------------------------------------------------------- writing


def controller_prefix(controller_id: int, epoch: int) -> str:
    return f"[Controller id={controller_id} epoch={epoch}]"


def broker_prefix(broker_id: int) -> str:
    return f"[Broker id={broker_id}]"


def _value(v: FieldValue) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return v.replace(" ", "_") or '""'
    return "[" + ",".join(str(int(x)) for x in v) + "]"


def partition_subject(topic: str, partition: int) -> str:
    return f"Partition {topic}-{partition}"


def replica_subject(topic: str, partition: int, replica: int) -> str:
    return f"Replica {topic}-{partition} replica={replica}"


def log_change(
    prefix: str,
    subject: str,
    old_state: str,
    new_state: str,
    *,
    fields: Mapping[str, FieldValue] | None = None,
    level: int = logging.INFO,
) -> None:
    """Log one change line through the state-change logger: ``<prefix> <subject> <old> ->
    <new> k=v ...`` (the formatter adds the timestamp and level)."""
    if not state_change_logger.isEnabledFor(level):
        return
    tail = "".join(f" {k}={_value(v)}" for k, v in (fields or {}).items())
    line = f"{prefix} {subject} {old_state} -> {new_state}{tail}"
    if not _collected(level, line):
        state_change_logger.log(level, "%s", line)


def _leadership_fields(
    leader: int | None,
    leader_epoch: int | None,
    isr: Sequence[int] | None,
    controller_epoch: int,
    extra: Mapping[str, FieldValue],
) -> dict[str, FieldValue]:
    """The fields a partition's change line starts with, then ``extra``."""
    return dict(
        leader=leader,
        leader_epoch=leader_epoch,
        isr=isr,
        controller_epoch=controller_epoch,
        **extra,
    )


def log_controller_partition_change(
    controller_id: int,
    controller_epoch: int,
    topic: str,
    partition: int,
    old_state: str,
    new_state: str,
    *,
    leader: int | None,
    leader_epoch: int | None,
    isr: Sequence[int] | None,
    level: int = logging.INFO,
    **fields: FieldValue,
) -> None:
    """What the controller logs when a partition changes state (``NewPartition``,
    ``OnlinePartition``, ...): leader, leader epoch, ISR, controller epoch, then the extra
    fields (e.g. ``zk_version=``)."""
    log_change(
        controller_prefix(controller_id, controller_epoch),
        partition_subject(topic, partition),
        old_state,
        new_state,
        fields=_leadership_fields(leader, leader_epoch, isr, controller_epoch, fields),
        level=level,
    )


def log_controller_replica_change(
    controller_id: int,
    controller_epoch: int,
    topic: str,
    partition: int,
    replica: int,
    old_state: str,
    new_state: str,
    *,
    level: int = logging.INFO,
    **fields: FieldValue,
) -> None:
    """What the controller logs when a replica changes state (``OnlineReplica``,
    ``ReplicaDeletionStarted``, ...): the fields given, then the controller epoch."""
    log_change(
        controller_prefix(controller_id, controller_epoch),
        replica_subject(topic, partition, replica),
        old_state,
        new_state,
        fields={**fields, "controller_epoch": controller_epoch},
        level=level,
    )


def log_broker_partition_change(
    broker_id: int,
    topic: str,
    partition: int,
    old_role: str,
    new_role: str,
    *,
    leader: int,
    leader_epoch: int,
    isr: Sequence[int],
    controller_epoch: int,
    level: int = logging.INFO,
    **fields: FieldValue,
) -> None:
    """What a broker logs when a LeaderAndIsr makes it leader or follower (or a StopReplica
    stops a replica): roles such as ``None``, ``Leader``, ``Follower``, ``Stopped``,
    ``Deleted``. Extra fields (e.g. ``start_offset=``, ``high_watermark=``) are appended."""
    log_change(
        broker_prefix(broker_id),
        partition_subject(topic, partition),
        old_role,
        new_role,
        fields=_leadership_fields(leader, leader_epoch, isr, controller_epoch, fields),
        level=level,
    )


class StateChangeFormatter(logging.Formatter):
    """``<ISO-8601 UTC with ms> <LEVEL> <message>``, one line per record."""

    def format(self, record: logging.LogRecord) -> str:
        ts = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
        text = f"{ts:%Y-%m-%dT%H:%M:%S}.{ts.microsecond // 1000:03d}Z {record.levelname} "
        if getattr(record, _LINES_ATTR, False):  # `batched_lines`: escaped already
            return "\n".join(text + line for line in record.getMessage().split("\n"))
        text += record.getMessage()
        if record.exc_info:
            text += " " + self.formatException(record.exc_info)
        return text.replace("\r", "\\r").replace("\n", "\\n")


_WRITER = re.compile(r"^\[(?:Controller id=(-?\d+)(?: epoch=-?\d+)?|Broker id=(-?\d+))\]")


class _NodeFilter(logging.Filter):
    """Keeps one node's records (and records that name no node)."""

    def __init__(self, node_id: int) -> None:
        super().__init__()
        self.node_id = node_id

    def filter(self, record: logging.LogRecord) -> bool:
        m = _WRITER.match(record.getMessage())
        if m is None:
            return True
        return int(m.group(1) or m.group(2)) == self.node_id


@dataclass(slots=True)
class StateChangeLogHandle:
    """What `attach_state_change_log` returns; `detach` removes and closes the handler."""

    path: Path
    handler: logging.Handler
    _users: int = field(default=1)

    def detach(self) -> None:
        self._users -= 1
        if self._users > 0:
            return
        state_change_logger.removeHandler(self.handler)
        self.handler.close()
        _attached.pop((self.path, _filter_key(self.handler)), None)


_attached: dict[tuple[Path, int | None], StateChangeLogHandle] = {}


def _filter_key(handler: logging.Handler) -> int | None:
    for f in handler.filters:
        if isinstance(f, _NodeFilter):
            return f.node_id
    return None


def attach_state_change_log(
    log_dir: Path,
    *,
    node_id: int | None = None,
    level: int = logging.INFO,
    propagate: bool | None = None,
) -> StateChangeLogHandle:
    """Write the state-change log to ``<log_dir>/state-change.log`` (appending).

    ``node_id`` keeps only the records of that broker/controller id (and records naming no
    node): several brokers in one process (tests, `wherry dev`) each get their own file.
    Attaching the same file (and node) again returns the same handle (counted: each attach
    needs one `detach`). ``propagate=False`` keeps the records out of the root logger's
    handlers (Kafka's state-change logger has additivity off); None leaves it as it is."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    path = (log_dir / STATE_CHANGE_LOG_FILE).resolve()
    existing = _attached.get((path, node_id))
    if existing is not None:
        existing._users += 1
        return existing
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(StateChangeFormatter())
    handler.setLevel(level)
    if node_id is not None:
        handler.addFilter(_NodeFilter(node_id))
    state_change_logger.addHandler(handler)
    if state_change_logger.level == logging.NOTSET or state_change_logger.level > level:
        state_change_logger.setLevel(level)
    if propagate is not None:
        state_change_logger.propagate = propagate
    handle = StateChangeLogHandle(path, handler)
    _attached[(path, node_id)] = handle
    return handle


class _LineCallbackHandler(logging.Handler):
    def __init__(self, callback: Callable[[str], None]) -> None:
        super().__init__()
        self._callback = callback

    def emit(self, record: logging.LogRecord) -> None:
        try:
            for line in self.format(record).split("\n"):  # several: a `batched_lines` record
                self._callback(line)
        except Exception:
            self.handleError(record)


def add_state_change_listener(
    node_id: int, callback: Callable[[str], None], *, level: int = logging.INFO
) -> Callable[[], None]:
    """Call ``callback`` with every state-change line of node ``node_id`` (and lines naming no
    node), formatted as in the file, as it is logged (on the logging thread: the caller hands
    it over to its loop if it must). Returns the function that removes the listener."""
    handler = _LineCallbackHandler(callback)
    handler.setFormatter(StateChangeFormatter())
    handler.setLevel(level)
    handler.addFilter(_NodeFilter(node_id))
    state_change_logger.addHandler(handler)
    if state_change_logger.level == logging.NOTSET or state_change_logger.level > level:
        state_change_logger.setLevel(level)

    def remove() -> None:
        state_change_logger.removeHandler(handler)
        handler.close()

    return remove


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class StateChangeRecord:
    """One parsed line. The change fields are None on lines that record no change."""

    timestamp_ms: int
    level: str
    node_kind: str  # "Controller" or "Broker"
    node_id: int
    node_epoch: int | None  # the controller's epoch in its prefix
    message: str  # everything after the prefix
    line: str
    kind: str | None = None  # "Partition" or "Replica"
    topic: str | None = None
    partition: int | None = None
    replica: int | None = None
    old_state: str | None = None
    new_state: str | None = None
    leader: int | None = None
    leader_epoch: int | None = None
    isr: tuple[int, ...] | None = None
    controller_epoch: int | None = None
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def is_change(self) -> bool:
        return self.new_state is not None


@functools.cache
def _line_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A line, and a state change's message (compiled on first use: a broker's start only
    writes the log)."""
    line = re.compile(
        r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z (?P<level>[A-Z]+) "
        r"\[(?:(?P<kind>Controller|Broker) id=(?P<id>-?\d+)(?: epoch=(?P<epoch>-?\d+))?)\]"
        r" ?(?P<msg>.*)$"
    )
    change = re.compile(
        r"^(?P<what>Partition|Replica) (?P<tp>\S+)-(?P<p>\d+)(?: replica=(?P<replica>-?\d+))? "
        r"(?P<old>\S+) -> (?P<new>\S+)(?P<fields>(?: [a-z_]+=\S*)*)$"
    )
    return line, change


def _int_or_none(text: str | None) -> int | None:
    if text is None or text == "none":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _isr(text: str | None) -> tuple[int, ...] | None:
    if text is None or not text.startswith("[") or not text.endswith("]"):
        return None
    inner = text[1:-1]
    try:
        return tuple(int(x) for x in inner.split(",")) if inner else ()
    except ValueError:
        return None


def parse_state_change_line(line: str) -> StateChangeRecord | None:
    """Parse one line of a state-change log; None for lines in another format."""
    line = line.rstrip("\r\n")
    line_re, change_re = _line_patterns()
    m = line_re.match(line)
    if m is None:
        return None
    ts = dt.datetime.fromisoformat(m.group("ts")).replace(tzinfo=dt.UTC)  # strptime: 30x
    timestamp_ms = int(ts.timestamp() * 1000 + 0.5)
    node_kind, node_id = m.group("kind"), int(m.group("id"))
    node_epoch, message = _int_or_none(m.group("epoch")), m.group("msg")
    c = change_re.match(message)
    if c is None:
        return StateChangeRecord(
            timestamp_ms, m.group("level"), node_kind, node_id, node_epoch, message, line
        )
    fields = dict(kv.split("=", 1) for kv in c.group("fields").split())
    return StateChangeRecord(
        timestamp_ms,
        m.group("level"),
        node_kind,
        node_id,
        node_epoch,
        message,
        line,
        kind=c.group("what"),
        topic=c.group("tp"),
        partition=int(c.group("p")),
        replica=_int_or_none(c.group("replica")),
        old_state=c.group("old"),
        new_state=c.group("new"),
        leader=_int_or_none(fields.get("leader")),
        leader_epoch=_int_or_none(fields.get("leader_epoch")),
        isr=_isr(fields.get("isr")),
        controller_epoch=_int_or_none(fields.get("controller_epoch")),
        fields=fields,
    )


def read_state_change_log(lines: Iterable[str]) -> Iterator[StateChangeRecord]:
    """The parseable records of one log, in file order."""
    for line in lines:
        rec = parse_state_change_line(line)
        if rec is not None:
            yield rec


def _lines(source: Path | str | Iterable[str]) -> Iterator[str]:
    if isinstance(source, Path | str):
        with open(source, encoding="utf-8", errors="replace") as f:
            yield from f
    else:
        yield from source


def merge_state_change_logs(
    sources: Iterable[Path | str | Iterable[str]],
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
    topic: str | None = None,
    partitions: Collection[int] | None = None,
    changes_only: bool = False,
) -> list[StateChangeRecord]:
    """Merge several brokers' state-change logs (paths or line iterables) in time order.

    Each log is in time order already, so this is a k-way merge (equal timestamps keep the
    order of ``sources``). Filters: ``[start_ms, end_ms]``, a topic, its partitions, and only
    change lines."""

    def wanted(r: StateChangeRecord) -> bool:
        if start_ms is not None and r.timestamp_ms < start_ms:
            return False
        if end_ms is not None and r.timestamp_ms > end_ms:
            return False
        if changes_only and not r.is_change:
            return False
        if topic is not None and r.topic != topic:
            return False
        return partitions is None or r.partition in partitions

    streams = [(r for r in read_state_change_log(_lines(s)) if wanted(r)) for s in sources]
    return list(heapq.merge(*streams, key=lambda r: r.timestamp_ms))
