"""The tables of `wherry groups` (pure): Kafka's printf formats, text in, text out.

`describe`'s offsets and lag, members and state tables, `list --state`, the new offsets of
`reset-offsets` as a table or as a CSV plan, and the outcome of `delete-offsets`. Each table but
`list --state` starts with an empty line, like Kafka's "\\n%-15s ..."; trailing blanks of table
lines are trimmed.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence

from wherry.cli.group_model import MISSING, TP, GroupView, OffsetRow


def _s(value: object) -> str:
    return MISSING if value is None else str(value)


def _table(widths: Sequence[int], rows: Iterable[Sequence[object]]) -> list[str]:
    """Java's `%-Ns` columns joined by one blank, last column unpadded; trailing blanks cut."""
    lines = []
    for row in rows:
        cells = [_s(c) for c in row]
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
        lines.append(" ".join([*padded, cells[-1]]).rstrip())
    return lines


def _block(widths: Sequence[int], rows: Iterable[Sequence[object]]) -> str:
    """A table after an empty line."""
    return "\n" + "\n".join(_table(widths, rows)) + "\n"


def render_offsets(rows: Sequence[OffsetRow]) -> str:
    group_w = max([15, *(len(r.group) for r in rows)])
    topic_w = max([15, *(len(_s(r.topic)) for r in rows)])
    consumer_w = max([15, *(len(_s(r.consumer_id)) for r in rows)])
    host_w = max([15, *(len(_s(r.host)) for r in rows)])
    widths = (group_w, topic_w, 10, 15, 15, 15, consumer_w, host_w)
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
              "CONSUMER-ID", "HOST", "CLIENT-ID")
    body = [(r.group, r.topic, r.partition, r.current, r.log_end, r.lag, r.consumer_id, r.host,
             r.client_id) for r in rows]
    return _block(widths, [header, *body])


def assignment_text(assignment: Iterable[TP]) -> str:
    """Kafka 3.9's ASSIGNMENT column: `topic(0,1), other(2)`; `-` when nothing is assigned."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    if not by_topic:
        return MISSING
    return ", ".join(sorted(f"{t}({','.join(str(p) for p in sorted(ps))})"
                            for t, ps in by_topic.items()))


def render_members(group: GroupView, verbose: bool) -> str:
    members = group.members
    with_instance = any(m.group_instance_id for m in members)
    widths = [max([15, len(group.group_id)]), max([15, *(len(m.consumer_id) for m in members)])]
    header: list[str] = ["GROUP", "CONSUMER-ID"]
    if with_instance:
        widths.append(max([17, *(len(m.group_instance_id or "") for m in members)]))
        header.append("GROUP-INSTANCE-ID")
    widths += [max([15, *(len(m.host) for m in members)]),
               max([15, *(len(m.client_id) for m in members)]), 15]
    header += ["HOST", "CLIENT-ID", "#PARTITIONS"]
    rows: list[list[object]] = []
    for m in members:
        row: list[object] = [group.group_id, m.consumer_id]
        if with_instance:
            row.append(m.group_instance_id or "")
        row += [m.host, m.client_id, len(m.assignment)]
        rows.append(row)
    if verbose:
        header.append("ASSIGNMENT")
        for row, m in zip(rows, members, strict=True):
            row.append(assignment_text(m.assignment))
    else:
        widths = widths[:-1]
    return _block(widths, [header, *rows])


def render_state(group: GroupView) -> str:
    widths = (max(15, len(group.group_id)), max(25, len(group.coordinator)), 20, 20)
    header = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
    row = (group.group_id, group.coordinator, group.assignor or MISSING, group.state,
           len(group.members))
    return _block(widths, [header, row])


def render_group_states(listing: Sequence[tuple[str, str]]) -> str:
    widths = (max([15, *(len(g) for g, _ in listing)]),)
    return "\n".join(_table(widths, [("GROUP", "STATE"), *listing])) + "\n"


def render_reset(plans: Mapping[str, Mapping[TP, int]]) -> str:
    group_w = max([15, *(len(g) for g in plans)])
    topic_w = max([15, *(len(tp[0]) for plan in plans.values() for tp in plan)])
    rows: list[Sequence[object]] = [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")]
    for group, plan in plans.items():
        rows += [(group, tp[0], tp[1], off) for tp, off in sorted(plan.items())]
    return _block((group_w, topic_w, 10), rows)


def render_reset_csv(plans: Mapping[str, Mapping[TP, int]], with_group: bool) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for group, plan in plans.items():
        for tp, off in sorted(plan.items()):
            writer.writerow([group, tp[0], tp[1], off] if with_group else [tp[0], tp[1], off])
    return out.getvalue()


def render_deleted_offsets(statuses: Mapping[TP, str]) -> str:
    """Kafka's `%-30s %-15s %-15s` TOPIC / PARTITION / STATUS; partition -1 (a topic the
    cluster does not have, so none of its partitions were named) reads "Not Provided"."""
    rows: list[Sequence[object]] = [("TOPIC", "PARTITION", "STATUS")]
    rows += [(t, p if p >= 0 else "Not Provided", status)
             for (t, p), status in sorted(statuses.items())]
    return _block((30, 15), rows)
