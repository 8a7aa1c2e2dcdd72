"""`wherry dump-log`: a kafka-dump-log.sh look-alike reading a broker's files directly.

`.log` segments (batches; records with `--deep-iteration` or `--print-data-log`), `.index` and
`.timeindex` (entries and Kafka's check of each entry against the segment, mismatches on
stderr at the end; `--verify-index-only` prints only the check, `--index-sanity-check` only the
structural check) and producer `.snapshot` files. Other files are ignored with a note, as Kafka
does. Exit status as kafka-dump-log's: 1 for a file that cannot be read (`Error: ...`) and for
a failed `--index-sanity-check`; index mismatches are printed and leave the status 0.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import click

from wherry.cli.dump_format import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    dump_log_bytes,
    offset_index_entries,
    offset_index_mismatches,
    snapshot_line,
    time_index_entries,
    time_index_problems,
    valid_bytes,
)
from wherry.log.producer_state import CorruptSnapshotError, read_snapshot
from wherry.protocol.compression import CompressionError, UnsupportedCompressionError
from wherry.protocol.records import RecordError

_INT_MAX = 2**31 - 1


class _Report:
    """Problems found across files, printed to stderr after the last file (as Kafka does)."""

    def __init__(self) -> None:
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_out_of_order: dict[str, list[tuple[int, int]]] = {}

    def print(self) -> None:
        for name, items in self.index_mismatches.items():
            click.echo(f"Mismatches in :{name}", err=True)
            for index_offset, log_offset in items:
                click.echo(f"  Index offset: {index_offset}, log offset: {log_offset}", err=True)
        for name, items in self.time_mismatches.items():
            click.echo(f"Found timestamp mismatch in :{name}", err=True)
            for index_ts, log_ts in items:
                click.echo(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}", err=True)
        for name, items in self.time_out_of_order.items():
            click.echo(f"Found out of order timestamp in :{name}", err=True)
            for index_ts, prev_ts in items:
                click.echo(
                    f"  Index timestamp: {index_ts}, Previously indexed timestamp: {prev_ts}",
                    err=True,
                )


def _base_offset(path: Path) -> int:
    try:
        return int(path.stem)
    except ValueError:
        raise click.ClickException(
            f"{path.name} is not named for a base offset (like 00000000000000000000{path.suffix})"
        ) from None


def _read(path: Path, limit: int | None = None) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read() if limit is None else f.read(limit)
    except OSError as e:
        raise click.ClickException(f"cannot read {path}: {e.strerror or e}") from e


def _dump_log(path: Path, *, deep: bool, print_data: bool, decoder: bool, max_bytes: int) -> None:
    click.echo(f"Log starting offset: {_base_offset(path)}")
    buf = _read(path, max_bytes)
    try:
        for line in dump_log_bytes(buf, deep=deep, print_data=print_data, offsets_decoder=decoder):
            click.echo(line)
    except (RecordError, CompressionError, UnsupportedCompressionError) as e:
        click.echo(f"Found a corrupt batch in {path}: {e}", err=True)
    valid = valid_bytes(buf)
    if valid < len(buf) and len(buf) < max_bytes:
        click.echo(f"Found {len(buf) - valid} invalid bytes at the end of {path.name}")


def _sanity(path: Path, data: bytes, entry_size: int, keys: list[int], base: int) -> str | None:
    if len(data) % entry_size:
        return (
            f"Index file {path.name} is corrupt, found {len(data)} bytes which is neither "
            f"positive nor a multiple of {entry_size}."
        )
    if any(b <= a for a, b in itertools.pairwise(keys)):
        return f"Corrupt index found, index file ({path}) has entries out of order."
    if keys and keys[-1] < base:
        return (
            f"Corrupt index found, index file ({path}) has non-zero size but the last offset "
            f"is {keys[-1]} which is less than the base offset {base}."
        )
    return None


def _sanity_check(path: Path) -> bool:
    """`--index-sanity-check` of a `.index` or `.timeindex` file: says whether it passed (its
    problem on stderr)."""
    base = _base_offset(path)
    data = _read(path)
    if path.suffix == ".index":
        entry_size, keys = OFFSET_ENTRY.size, [o for o, _ in offset_index_entries(data, base)]
    else:
        entry_size, keys = TIME_ENTRY.size, [o for _, o in time_index_entries(data, base)]
    problem = _sanity(path, data, entry_size, keys, base)
    click.echo(problem or f"{path} passed sanity check.", err=problem is not None)
    return problem is None


def _dump_index(path: Path, report: _Report, *, verify_only: bool) -> None:
    base = _base_offset(path)
    entries = offset_index_entries(_read(path), base)
    mismatches = offset_index_mismatches(entries, _read(path.with_suffix(".log")))
    if mismatches:
        report.index_mismatches[str(path)] = mismatches
    if not verify_only:
        for offset, position in entries:
            click.echo(f"offset: {offset} position: {position}")


def _dump_time_index(path: Path, report: _Report, *, verify_only: bool) -> None:
    base = _base_offset(path)
    entries = time_index_entries(_read(path), base)
    log = _read(path.with_suffix(".log"))
    index_path = path.with_suffix(".index")
    offsets = offset_index_entries(_read(index_path), base) if index_path.exists() else []
    mismatches, out_of_order = time_index_problems(entries, log, offsets)
    if mismatches:
        report.time_mismatches[str(path)] = mismatches
    if out_of_order:
        report.time_out_of_order[str(path)] = out_of_order
    if not verify_only:
        for ts, offset in entries:
            click.echo(f"timestamp: {ts} offset: {offset}")


def _dump_snapshot(path: Path) -> None:
    try:
        entries = read_snapshot(path)
    except CorruptSnapshotError as e:
        raise click.ClickException(str(e)) from e
    except OSError as e:
        raise click.ClickException(f"cannot read {path}: {e.strerror or e}") from e
    for entry in entries:
        click.echo(snapshot_line(entry))


@click.command("dump-log")
@click.option("--files", required=True, metavar="F1,F2",
              help="Comma-separated .log, .index, .timeindex or .snapshot files to dump.")
@click.option("--print-data-log", is_flag=True,
              help="Print the records' keys and payloads (implies --deep-iteration).")
@click.option("--deep-iteration", is_flag=True, help="Print every record, not just batches.")
@click.option("--verify-index-only", is_flag=True,
              help="Check the index against its log without printing its entries.")
@click.option("--index-sanity-check", is_flag=True,
              help="Only check the index files' structure.")
@click.option("--offsets-decoder", is_flag=True,
              help="Decode records as __consumer_offsets keys and values (implies "
                   "--print-data-log).")
@click.option("--max-bytes", type=click.IntRange(1), default=_INT_MAX, show_default=True,
              help="Read at most this many bytes of each .log.")
def dump_log(
    files: str,
    print_data_log: bool,
    deep_iteration: bool,
    verify_index_only: bool,
    index_sanity_check: bool,
    offsets_decoder: bool,
    max_bytes: int,
) -> None:
    """Dump the contents of log segments, index files and producer snapshots."""
    paths = [Path(f.strip()) for f in files.split(",") if f.strip()]
    if not paths:
        raise click.ClickException("--files names no file")
    for path in paths:
        if not path.is_file():
            raise click.ClickException(f"{path} is not a file")
    print_data = print_data_log or offsets_decoder
    deep = deep_iteration or print_data
    report = _Report()
    ok = True
    for path in paths:
        click.echo(f"Dumping {path}")
        suffix = path.suffix
        if suffix == ".log":
            _dump_log(path, deep=deep, print_data=print_data, decoder=offsets_decoder,
                      max_bytes=max_bytes)
        elif suffix in (".index", ".timeindex") and index_sanity_check:
            ok &= _sanity_check(path)
        elif suffix == ".index":
            _dump_index(path, report, verify_only=verify_index_only)
        elif suffix == ".timeindex":
            _dump_time_index(path, report, verify_only=verify_index_only)
        elif suffix == ".snapshot":
            _dump_snapshot(path)
        else:
            click.echo(f"Ignoring unknown file {path}", err=True)
    report.print()
    if not ok:  # a failed sanity check; mismatches leave the status 0, as in Kafka
        raise SystemExit(1)
