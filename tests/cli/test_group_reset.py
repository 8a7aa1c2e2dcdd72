"""The planning of `wherry groups reset-offsets` (offline): scenario choice, spec, scope."""

from __future__ import annotations

from pathlib import Path

import pytest

from wherry.cli.common import CommandError
from wherry.cli.group_model import CommandFailed
from wherry.cli.group_reset import (
    ResetOptions,
    ResetSpec,
    Scenario,
    partitions_to_reset,
    reset_spec,
)

NOW_MS = 1_700_000_000_000
KNOWN = {"a": [0, 1, 2], "b": [0]}


def no_file(path: Path) -> str:
    raise AssertionError(f"{path} must not be read")


def spec_of(options: ResetOptions, groups: tuple[str, ...] = ("g",)) -> ResetSpec:
    return reset_spec(options, groups, NOW_MS, no_file)


def test_exactly_one_scenario_is_required() -> None:
    with pytest.raises(CommandError) as info:
        ResetOptions().scenario()
    assert str(info.value) == (
        "Option [reset-offsets] requires one of the following scenarios: [to-offset], "
        "[shift-by], [to-datetime], [by-duration], [to-earliest], [to-latest], [to-current], "
        "[from-file]")
    with pytest.raises(CommandError) as info:
        ResetOptions(shift_by=1, to_latest=True, from_file=Path("p.csv")).scenario()
    assert str(info.value) == 'Option "[shift-by]" can\'t be used with option "[to-latest]"'
    # 0 is a value given, not a missing option
    assert ResetOptions(to_offset=0).scenario() is Scenario.TO_OFFSET
    assert ResetOptions(to_current=True).scenario() is Scenario.TO_CURRENT


def test_spec_of_each_scenario() -> None:
    assert spec_of(ResetOptions(to_offset=7)) == ResetSpec(Scenario.TO_OFFSET, 7)
    assert spec_of(ResetOptions(shift_by=-3)) == ResetSpec(Scenario.SHIFT_BY, -3)
    assert spec_of(ResetOptions(to_datetime="1970-01-01T00:00:02.500Z")) == ResetSpec(
        Scenario.TO_DATETIME, 2500)
    assert spec_of(ResetOptions(by_duration="PT1M")) == ResetSpec(
        Scenario.BY_DURATION, NOW_MS - 60_000)
    assert spec_of(ResetOptions(to_earliest=True)) == ResetSpec(Scenario.TO_EARLIEST)
    assert spec_of(ResetOptions(to_latest=True)) == ResetSpec(Scenario.TO_LATEST)
    with pytest.raises(CommandError, match="cannot be parsed to a Duration"):
        spec_of(ResetOptions(by_duration="1M"))


def test_spec_from_file_reads_the_plan_once() -> None:
    read: list[Path] = []

    def read_text(path: Path) -> str:
        read.append(path)
        return "g,a,0,5\nh,b,0,1\n"

    spec = reset_spec(ResetOptions(from_file=Path("plan.csv")), ["g", "h"], NOW_MS, read_text)
    assert read == [Path("plan.csv")]
    assert spec == ResetSpec(Scenario.FROM_FILE, plan={"g": {("a", 0): 5}, "h": {("b", 0): 1}})


def test_scope_from_topic_arguments() -> None:
    spec = ResetSpec(Scenario.TO_EARLIEST)
    args = [("a", (2, 0)), ("b", None), ("a", (0,))]
    assert partitions_to_reset(spec, "g", args, False, {}, KNOWN) == [
        ("a", 0), ("a", 2), ("b", 0)]
    with pytest.raises(CommandFailed) as info:
        partitions_to_reset(spec, "g", [("c", None)], False, {}, KNOWN)
    assert str(info.value) == ("org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
                               "This server does not host this topic-partition.")
    with pytest.raises(CommandFailed) as info:
        partitions_to_reset(spec, "g", [("a", (1, 5, 5)), ("c", (0,))], False, {}, KNOWN)
    assert str(info.value).endswith('The partitions "a-5,c-0" do not exist')


def test_scope_of_all_topics_and_of_a_plan() -> None:
    committed = {("b", 0): 4, ("a", 1): 2}
    spec = ResetSpec(Scenario.SHIFT_BY, 1)
    assert partitions_to_reset(spec, "g", [], True, committed, KNOWN) == [("a", 1), ("b", 0)]
    plan = ResetSpec(Scenario.FROM_FILE, plan={"g": {("a", 2): 1, ("a", 0): 3}})
    assert partitions_to_reset(plan, "g", [], False, {}, KNOWN) == [("a", 0), ("a", 2)]
    assert partitions_to_reset(plan, "other", [], False, {}, KNOWN) == []
    with pytest.raises(CommandFailed, match='"a-9" do not exist'):
        partitions_to_reset(ResetSpec(Scenario.FROM_FILE, plan={"g": {("a", 9): 0}}), "g", [],
                            False, {}, KNOWN)
