"""Fetched record batches to the source's Arrow rows (`arrow_records.fetched_rows`), compared
with the per-record decoder (`records.iter_records`) on many shapes of batches: every codec,
headers, null and empty keys and values, LogAppendTime, control batches, aborted
transactions, compacted batches with offset gaps, batches cut by the range, a cut-short last
batch, long runs of one layout and random record sets. No Spark needed."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wherry.protocol.records import (
    RecordSpec,
    build_batch,
    build_control_batch,
    build_retained_batch,
    iter_batches,
    iter_records,
    parse_header,
    set_log_append_time,
)
from wherry.spark.arrow_records import UnsupportedRecords, fetched_rows, schema

BIG = 1 << 62
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def expected(
    data: bytes, start: int, end: int, with_headers: bool, skip: frozenset[int] = frozenset()
) -> list[dict[str, Any]]:
    """The rows the per-record decoder gives: every record of every data batch with an
    offset in [start, end), but those at the offsets in ``skip``."""
    rows = []
    for pos, header in iter_batches(data):
        if header.is_control:
            continue
        for r in iter_records(data, pos):
            if start <= r.offset < end and r.offset not in skip:
                row = {
                    "key": r.key,
                    "value": r.value,
                    "topic": "t",
                    "partition": 3,
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "timestampType": header.timestamp_type,
                }
                if with_headers:
                    row["headers"] = [{"key": k, "value": v} for k, v in r.headers]
                rows.append(row)
    return rows


def rows_of(data: bytes, start: int = 0, end: int = BIG, **kw: Any) -> list[dict[str, Any]]:
    batch, _ = fetched_rows(data, topic="t", partition=3, start=start, end=end, **kw)
    if batch is None:
        return []
    assert batch.schema.equals(schema(kw.get("with_headers", False)))
    out = batch.to_pylist()
    for row in out:  # microseconds since the epoch, as Spark reads them, back to ms
        row["timestamp"] = (row["timestamp"] - EPOCH) // datetime.timedelta(milliseconds=1)
    return out


def specs(n: int, *, size: int = 20, headers: bool = False) -> list[RecordSpec]:
    return [
        RecordSpec(
            None if i % 5 == 0 else (b"" if i % 7 == 0 else b"k%d" % i),
            None if i % 11 == 0 else (b"" if i % 13 == 0 else bytes([i % 251]) * (size + i % 3)),
            [("h", b"%d" % i), ("none", None)] if headers and i % 3 == 0 else (),
            1_700_000_000_000 + (i * 7) % 300 - 100,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("with_headers", [False, True])
def test_every_codec_gives_the_rows_of_the_per_record_decoder(
    codec: int, with_headers: bool
) -> None:
    data = build_batch(specs(300, headers=True), base_offset=40, compression=codec)
    data += build_batch(specs(50), base_offset=340, compression=codec)
    assert rows_of(data, with_headers=with_headers) == expected(data, 0, BIG, with_headers)


def test_null_and_empty_keys_and_values_stay_apart() -> None:
    recs = [(None, None), (b"", b""), (None, b""), (b"", None), (b"k", b"v")] * 40
    data = build_batch(recs, base_offset=0)
    got = [(r["key"], r["value"]) for r in rows_of(data)]
    assert got == recs


def test_long_runs_of_one_layout_across_varint_widths() -> None:
    # 10,000 records of one size: offset deltas reach 2- and 3-byte varints, timestamp deltas
    # change width, and a few records of another size break the runs.
    recs = [
        RecordSpec(None, b"x" * (100 if i % 3001 else 7), (), 1_700_000_000_000 + i // 50)
        for i in range(10_000)
    ]
    data = build_batch(recs, base_offset=1000, compression=4)
    assert rows_of(data) == expected(data, 0, BIG, False)
    assert rows_of(data, with_headers=True) == expected(data, 0, BIG, True)


@pytest.mark.parametrize(
    "start,end",
    [(0, 1010), (1030, 1064), (1063, 1065), (1500, 9300), (9191, 9193), (10_999, BIG), (0, 0)],
)
def test_a_range_that_cuts_runs_of_one_layout(start: int, end: int) -> None:
    # 10,000 records of one size: the range starts and ends inside runs, on and next to the
    # offset deltas where their varints grow (64 and 8192 after the batch's base offset).
    recs = [RecordSpec(None, b"x" * 100, (), 1_700_000_000_000 + i // 50) for i in range(10_000)]
    data = build_batch(recs, base_offset=1000)
    assert rows_of(data, start, end) == expected(data, start, end, False)


def test_log_append_time_batches_take_the_batch_timestamp() -> None:
    buf = bytearray(build_batch(specs(30), base_offset=0))
    set_log_append_time(buf, 0, 1_800_000_000_000)
    got = rows_of(bytes(buf))
    assert {(r["timestamp"], r["timestampType"]) for r in got} == {(1_800_000_000_000, 1)}
    assert got == expected(bytes(buf), 0, BIG, False)


def test_the_range_cuts_batches_and_the_next_offset_follows_the_last_whole_batch() -> None:
    data = build_batch(specs(100), base_offset=0) + build_batch(specs(100), base_offset=100)
    got, after = fetched_rows(data, topic="t", partition=3, start=42, end=150)
    assert got is not None
    assert got.column("offset").to_pylist() == list(range(42, 150))
    assert after == 200
    # A cut-short last batch is left for the next fetch.
    got, after = fetched_rows(data[:-10], topic="t", partition=3, start=42, end=BIG)
    assert got is not None and got.column("offset").to_pylist() == list(range(42, 100))
    assert after == 100
    # Nothing whole: no rows, the next fetch starts where this one did.
    assert fetched_rows(data[:50], topic="t", partition=3, start=7, end=BIG) == (None, 7)
    assert fetched_rows(b"", topic="t", partition=3, start=7, end=BIG) == (None, 7)
    # Batches wholly before the range give no rows but move the next offset on.
    assert fetched_rows(data, topic="t", partition=3, start=200, end=BIG) == (None, 200)


def test_compacted_batches_keep_their_offsets() -> None:
    data = build_batch(specs(200), base_offset=500, compression=3)
    header = parse_header(data)
    kept = [r for r in iter_records(data) if r.offset % 3 != 1 and r.offset % 17]
    compacted = build_retained_batch(header, kept)
    got = rows_of(compacted)
    assert [r["offset"] for r in got] == [r.offset for r in kept]
    assert got == expected(compacted, 0, BIG, False)
    assert rows_of(compacted, start=600, end=650) == expected(compacted, 600, 650, False)


def test_older_message_formats_are_refused() -> None:
    data = bytearray(build_batch(specs(3)))
    data[16] = 1  # magic
    with pytest.raises(UnsupportedRecords):
        fetched_rows(bytes(data), topic="t", partition=0, start=0, end=BIG)


# --- transactions ---------------------------------------------------------------------------


def txn(pid: int, offset: int, n: int) -> bytes:
    return build_batch(
        [(None, b"p%d-%d" % (pid, offset + i)) for i in range(n)],
        base_offset=offset,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


def marker(pid: int, offset: int, commit: bool) -> bytes:
    return build_control_batch(
        commit=commit, producer_id=pid, producer_epoch=0, coordinator_epoch=1, base_offset=offset
    )


def offsets(data: bytes, aborted: Sequence[tuple[int, int]], committed: bool) -> list[int]:
    got, _ = fetched_rows(
        data, topic="t", partition=0, start=0, end=BIG, read_committed=committed, aborted=aborted
    )
    return [] if got is None else got.column("offset").to_pylist()


def test_control_batches_are_never_rows() -> None:
    data = txn(1, 0, 3) + marker(1, 3, commit=True) + build_batch(specs(2), base_offset=4)
    assert offsets(data, [], committed=False) == [0, 1, 2, 4, 5]
    assert offsets(data, [], committed=True) == [0, 1, 2, 4, 5]
    assert fetched_rows(marker(1, 3, True), topic="t", partition=0, start=0, end=BIG) == (None, 4)


def test_read_committed_skips_aborted_transactions_only() -> None:
    # pid 1 aborts 0-4 while pid 2 commits 5-7 in between; a plain batch follows.
    data = (
        txn(1, 0, 3)
        + txn(2, 3, 2)
        + txn(1, 5, 2)
        + marker(1, 7, commit=False)
        + txn(2, 8, 1)
        + marker(2, 9, commit=True)
        + build_batch(specs(2), base_offset=10)
    )
    aborted = [(1, 0)]
    assert offsets(data, aborted, committed=True) == [3, 4, 8, 10, 11]
    # read_uncommitted returns the aborted records too (control batches still skipped).
    assert offsets(data, aborted, committed=False) == [0, 1, 2, 3, 4, 5, 6, 8, 10, 11]


def test_a_producers_transaction_after_its_abort_marker_is_read() -> None:
    data = txn(1, 0, 3) + marker(1, 3, commit=False) + txn(1, 4, 3) + marker(1, 7, commit=True)
    assert offsets(data, [(1, 0)], committed=True) == [4, 5, 6]


def test_an_aborted_transaction_counts_from_its_first_offset_on() -> None:
    # pid 1 commits 0-2, then aborts 4-6: only the second transaction is skipped.
    data = txn(1, 0, 3) + marker(1, 3, commit=True) + txn(1, 4, 3) + marker(1, 7, commit=False)
    assert offsets(data, [(1, 4)], committed=True) == [0, 1, 2]


# --- random record sets ---------------------------------------------------------------------

_blob = st.one_of(
    st.none(),
    st.sampled_from([b"", b"a" * 10, b"b" * 10, b"c" * 200]),
    st.binary(max_size=300),
)
_record = st.builds(
    RecordSpec,
    _blob,
    _blob,
    st.one_of(
        st.just(()),
        st.lists(
            st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
        ),
    ),
    st.integers(1_600_000_000_000, 1_600_000_100_000),
)


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(
        st.tuples(st.lists(_record, min_size=1, max_size=120), st.integers(0, 4)),
        min_size=1,
        max_size=5,
    ),
    same_size=st.lists(st.integers(0, 3), max_size=3),
    cut=st.tuples(st.integers(0, 700), st.integers(0, 700)),
    with_headers=st.booleans(),
    compact=st.booleans(),
)
def test_random_record_sets_match_the_per_record_decoder(
    batches: list[tuple[list[RecordSpec], int]],
    same_size: list[int],
    cut: tuple[int, int],
    with_headers: bool,
    compact: bool,
) -> None:
    data = b""
    offset = 0
    for i, (recs, codec) in enumerate(batches):
        if i in same_size:  # long runs of one layout, as producers of fixed-size records make
            recs = [RecordSpec(None, b"v" * 30, (), recs[0].timestamp_ms)] * (len(recs) * 3)
        batch = build_batch(recs, base_offset=offset, compression=codec)
        if compact:
            kept = [r for r in iter_records(batch) if r.offset % 4 != 2]
            batch = build_retained_batch(parse_header(batch), kept)
        data += batch
        offset += len(recs) + 2  # a gap between batches, as aborted or compacted ones leave
    start, end = min(cut), max(cut)
    assert rows_of(data, start, end, with_headers=with_headers) == expected(
        data, start, end, with_headers
    )
