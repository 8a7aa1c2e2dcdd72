"""Planning of `wherry groups reset-offsets` (pure: no cluster, no terminal).

From the options as given (`--to-earliest`, `--to-latest`, `--to-offset`, `--shift-by`,
`--to-datetime`, `--by-duration`, `--to-current`, `--from-file`) to a `ResetSpec`, from the
scope (`--topic T[:P,...]`, `--all-topics`, the plan file) to the partitions of a group, and from
what the cluster says about those partitions to the new offsets, clamped and warned about like
Kafka's tool. Errors are raised before anything is changed.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from pathlib import Path

from wherry.cli.common import CommandError
from wherry.cli.group_model import TP, CommandFailed, tp_str

TopicArg = tuple[str, tuple[int, ...] | None]
"""A `--topic` value: the topic and its partitions (None: all of them)."""


# --------------------------------------------------------------------------------------------
# Argument parsing (errors raised before connecting)


def parse_topic_arg(arg: str) -> TopicArg:
    """`--topic` value: `t` (all partitions) or `t:0,1,2`."""
    if ":" not in arg:
        if not arg:
            raise CommandError("Invalid topic arg '', expected topic name and partitions")
        return arg, None
    parts = arg.split(":")
    if len(parts) != 2 or not parts[0]:
        raise CommandError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    partitions = []
    for p in parts[1].split(","):
        try:
            partitions.append(int(p.strip()))
        except ValueError as e:
            raise CommandError(f"Invalid partition '{p}' specified in topic arg '{arg}'") from e
    return parts[0], tuple(partitions)


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as Java's Duration.parse reads it (`PnDTnHnMn.nS`), in ms."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise CommandError(f"Text cannot be parsed to a Duration: {text}")
    sign, days, _t, hours, minutes, seconds, fraction = m.groups()
    total_ms = (
        int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000 + int(minutes or 0) * 60_000
    )
    secs = int(seconds or 0)
    frac_ms = int((fraction or "").ljust(3, "0")[:3]) if fraction else 0
    total_ms += secs * 1000 + (-frac_ms if seconds and seconds.startswith("-") else frac_ms)
    return -total_ms if sign == "-" else total_ms


def parse_datetime_ms(text: str) -> int:
    """`--to-datetime` (`YYYY-MM-DDTHH:mm:SS.sss`, optional zone `Z`/`+hh:mm`; local time if none)
    into epoch milliseconds."""
    if "T" not in text:
        raise CommandError(
            "Error parsing timestamp. It does not contain a 'T' according to ISO8601 format"
        )
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError as e:
        raise CommandError(f'Unparseable date: "{text}"') from e
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()  # naive means the local time zone, as in Kafka
    return int(parsed.timestamp() * 1000)


def parse_reset_plan(text: str, groups: Sequence[str]) -> dict[str, dict[TP, int]]:
    """Kafka's reset CSV: `topic,partition,offset` (one group) or `group,topic,partition,offset`."""
    plan: dict[str, dict[TP, int]] = {}
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row or not "".join(row).strip():
            continue
        try:
            if len(row) == 3 and len(groups) == 1:
                group, topic, part, off = groups[0], row[0], row[1], row[2]
            elif len(row) == 4:
                group, topic, part, off = row
            else:
                raise ValueError
            plan.setdefault(group.strip(), {})[(topic.strip(), int(part))] = int(off)
        except ValueError as e:
            raise CommandError(f"Invalid reset plan line {lineno}: {','.join(row)!r}") from e
    return plan


# --------------------------------------------------------------------------------------------
# The scenario


class Scenario(Enum):
    TO_OFFSET = "to-offset"
    SHIFT_BY = "shift-by"
    TO_DATETIME = "to-datetime"
    BY_DURATION = "by-duration"
    TO_EARLIEST = "to-earliest"
    TO_LATEST = "to-latest"
    TO_CURRENT = "to-current"
    FROM_FILE = "from-file"


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """What to reset to. `value` is the offset, the shift or the timestamp (ms), by scenario."""

    scenario: Scenario
    value: int = 0
    plan: Mapping[str, Mapping[TP, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResetOptions:
    """The scenario options of `reset-offsets` as given (None or False: not given)."""

    to_offset: int | None = None
    shift_by: int | None = None
    to_datetime: str | None = None
    by_duration: str | None = None
    to_earliest: bool = False
    to_latest: bool = False
    to_current: bool = False
    from_file: Path | None = None

    def scenario(self) -> Scenario:
        """The one scenario given; Kafka's error when there is none or more than one."""
        chosen = [
            s
            for s, given in (
                (Scenario.TO_OFFSET, self.to_offset is not None),
                (Scenario.SHIFT_BY, self.shift_by is not None),
                (Scenario.TO_DATETIME, self.to_datetime is not None),
                (Scenario.BY_DURATION, self.by_duration is not None),
                (Scenario.TO_EARLIEST, self.to_earliest),
                (Scenario.TO_LATEST, self.to_latest),
                (Scenario.TO_CURRENT, self.to_current),
                (Scenario.FROM_FILE, self.from_file is not None),
            )
            if given
        ]
        if not chosen:
            raise CommandError(
                "Option [reset-offsets] requires one of the following scenarios: "
                + ", ".join(f"[{s.value}]" for s in Scenario)
            )
        if len(chosen) > 1:
            raise CommandError(
                f'Option "[{chosen[0].value}]" can\'t be used with option "[{chosen[1].value}]"'
            )
        return chosen[0]


def reset_spec(
    options: ResetOptions, groups: Sequence[str], now_ms: int, read_text: Callable[[Path], str]
) -> ResetSpec:
    """The spec of the scenario given; `read_text` reads the `--from-file` plan."""
    scenario = options.scenario()
    match scenario:
        case Scenario.TO_OFFSET:
            return ResetSpec(scenario, int(options.to_offset or 0))
        case Scenario.SHIFT_BY:
            return ResetSpec(scenario, int(options.shift_by or 0))
        case Scenario.TO_DATETIME:
            return ResetSpec(scenario, parse_datetime_ms(options.to_datetime or ""))
        case Scenario.BY_DURATION:
            return ResetSpec(scenario, now_ms - parse_duration_ms(options.by_duration or ""))
        case Scenario.FROM_FILE:
            assert options.from_file is not None
            text = read_text(options.from_file)
            return ResetSpec(scenario, plan=parse_reset_plan(text, groups))
        case _:
            return ResetSpec(scenario)


# --------------------------------------------------------------------------------------------
# The partitions and their new offsets


_UNKNOWN_TOPIC = "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "


def partitions_to_reset(
    spec: ResetSpec,
    group_id: str,
    topic_args: Sequence[TopicArg],
    all_topics: bool,
    committed: Mapping[TP, int],
    known: Mapping[str, Sequence[int]],
) -> list[TP]:
    """The partitions of one group in scope, sorted (none: no plan for the group in the file);
    `known` is every topic's partitions. A topic or partition that does not exist is an error."""
    if spec.scenario is Scenario.FROM_FILE:
        wanted = list(spec.plan.get(group_id, {}))
    elif all_topics:
        wanted = list(committed)
    else:
        wanted = []
        for topic, parts in topic_args:
            if parts is None:
                if topic not in known:
                    raise CommandFailed(
                        _UNKNOWN_TOPIC + "This server does not host this topic-partition."
                    )
                wanted += [(topic, p) for p in known[topic]]
            else:
                wanted += [(topic, p) for p in parts]
    missing = [tp for tp in dict.fromkeys(wanted) if tp[1] not in known.get(tp[0], ())]
    if missing:
        raise CommandFailed(
            _UNKNOWN_TOPIC
            + 'The partitions "'
            + ",".join(tp_str(tp) for tp in missing)
            + '" do not exist'
        )
    return sorted(set(wanted))


@dataclass(frozen=True, slots=True)
class LogOffsets:
    """What the plan needs to know about the partitions (None: unknown)."""

    earliest: Mapping[TP, int | None] = field(default_factory=dict)
    latest: Mapping[TP, int | None] = field(default_factory=dict)
    committed: Mapping[TP, int] = field(default_factory=dict)
    by_time: Mapping[TP, int | None] = field(default_factory=dict)


def _known(offsets: Mapping[TP, int | None], tp: TP, what: str) -> int:
    value = offsets.get(tp)
    if value is None or value < 0:
        raise CommandFailed(f"Error getting {what} of topic partition: {tp_str(tp)}")
    return value


def plan_reset(
    spec: ResetSpec, group: str, partitions: Iterable[TP], logs: LogOffsets
) -> tuple[dict[TP, int], list[str]]:
    """New offsets per partition (clamped to [earliest, latest] like Kafka) and the warnings."""
    warnings: list[str] = []

    def clamp(tp: TP, offset: int) -> int:
        end = logs.latest.get(tp)
        start = logs.earliest.get(tp)
        if end is not None and offset > end:
            warnings.append(
                f"New offset ({offset}) is higher than latest offset for topic "
                f"partition {tp_str(tp)}. Value will be set to {end}."
            )
            return end
        if start is not None and offset < start:
            warnings.append(
                f"New offset ({offset}) is lower than earliest offset for topic "
                f"partition {tp_str(tp)}. Value will be set to {start}."
            )
            return start
        return offset

    out: dict[TP, int] = {}
    for tp in sorted(set(partitions)):
        match spec.scenario:
            case Scenario.TO_EARLIEST:
                out[tp] = _known(logs.earliest, tp, "starting offset")
            case Scenario.TO_LATEST:
                out[tp] = _known(logs.latest, tp, "ending offset")
            case Scenario.TO_CURRENT:
                current = logs.committed.get(tp)
                out[tp] = (
                    current if current is not None else _known(logs.latest, tp, "ending offset")
                )
            case Scenario.TO_OFFSET:
                out[tp] = clamp(tp, spec.value)
            case Scenario.SHIFT_BY:
                current = logs.committed.get(tp)
                if current is None:
                    raise CommandError(
                        f"Cannot shift offset for partition {tp_str(tp)} since "
                        "there is no current committed offset"
                    )
                out[tp] = clamp(tp, current + spec.value)
            case Scenario.TO_DATETIME | Scenario.BY_DURATION:
                found = logs.by_time.get(tp)
                if found is None or found < 0:
                    warnings.append(
                        f"Partition {tp[1]} from topic {tp[0]} is empty. "
                        "Falling back to latest known offset."
                    )
                    out[tp] = _known(logs.latest, tp, "offset by timestamp")
                else:
                    out[tp] = found
            case Scenario.FROM_FILE:
                out[tp] = clamp(tp, spec.plan.get(group, {})[tp])
    return out, warnings
