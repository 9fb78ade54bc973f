"""``pylog-broker dump-log``: print the batches and records of segment files, and check their indexes (Kafka's
``kafka-dump-log`` / ``DumpLogSegments``), reading the files read-only beside a running broker.

Usage::

    pylog-broker dump-log --files DIR/00000000000000000000.log[,OTHER] [--deep-iteration] [--print-data-log]
        [--index-sanity-check] [--verify-index-only] [--max-bytes N]

Per file, by suffix (Kafka's output, line for line where Kafka has one):

* ``.log``: ``Dumping PATH``, ``Log starting offset: BASE``, then one line per batch -- ``baseOffset: ..
  lastOffset: .. count: .. baseSequence: .. lastSequence: .. producerId: .. producerEpoch: ..
  partitionLeaderEpoch: .. isTransactional: .. isControl: .. position: .. CreateTime: .. size: .. magic: 2
  compresscodec: .. crc: .. isvalid: ..``; with ``--deep-iteration`` (implied by ``--print-data-log``) one
  ``| offset: .. CreateTime: .. keySize: .. valueSize: .. sequence: .. headerKeys: [..]`` line per record,
  ``endTxnMarker: COMMIT|ABORT coordinatorEpoch: ..`` for a control record, and ``key: .. payload: ..`` (UTF-8,
  undecodable bytes replaced) with ``--print-data-log``. Bytes after the last whole batch are reported as
  ``Found N invalid bytes at the end of NAME``. ``--max-bytes`` stops after that many bytes of the file.
* ``.index``: ``offset: O position: P`` per entry; with ``--verify-index-only`` no entries, but every entry is
  checked against the log (the batch at ``position`` must end at ``offset``: Kafka's "Mismatches in") and
  offsets must increase ("Non-consecutive offsets in").
* ``.timeindex``: ``timestamp: T offset: O`` per entry; ``--verify-index-only`` checks that each entry's offset
  ends a batch of the log whose max timestamp is ``T`` and that timestamps do not go backwards.
* ``--index-sanity-check``: only the index's structural check (``PATH passed sanity check.`` or
  ``... failed sanity check: WHY``).
* ``.txnindex`` (aborted transactions): ``version: V producerId: .. firstOffset: .. lastOffset: ..
  lastStableOffset: ..`` per entry (whole entries only: a partial last one, being appended, is left out).
* ``.snapshot`` (producer state): ``producerId: .. producerEpoch: .. coordinatorEpoch: .. currentTxnFirstOffset:
  OptionalLong.empty|OptionalLong[N] lastTimestamp: ..`` per producer, then, when the producer has a data batch,
  `` firstSequence: .. lastSequence: .. lastOffset: .. offsetDelta: .. timestamp: ..``; a snapshot that fails
  its version, size or CRC check is an error (exit 1).

A first entry that is all zeros and not backed by the log is a preallocated slot, not an entry (Kafka's tool
prints it and then reports it as a mismatch). Only the trusted prefix of an index is read (:meth:`~broker_runtime.storage.index_file.IndexFile.open_read_only`:
an active segment's preallocated tail and a half-written entry are not entries); the number of slots after it is
reported. A ``.log`` larger than :data:`PROGRESS_BYTES` reports progress on stderr every such amount. Each file
ends with a ``Summary:`` line (batches, records, offsets, bytes, invalid batches). Exit 1 when a file is
missing or unreadable, a CRC does not match, or an index check fails (after printing everything else).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from broker_runtime.errors import PylogError
from broker_runtime.protocol.batch_header import HEADER_SIZE, parse_header
from broker_runtime.protocol.compression import codec_name
from broker_runtime.protocol.records import CONTROL_ABORT, RecordBatch
from broker_runtime.storage.offset_index import OffsetIndex
from broker_runtime.storage.producer_state import SNAPSHOT_SUFFIX, read_snapshot
from broker_runtime.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from broker_runtime.storage.time_index import TimeIndex
from broker_runtime.storage.txn_index import TXN_INDEX_SUFFIX, read_entries_read_only
from broker_runtime.tools.common import ToolError, fail

__all__ = ["PROGRESS_BYTES", "add_parser", "run"]

TOOL = "dump-log"
#: A ``.log`` larger than this reports progress on stderr every this many bytes.
PROGRESS_BYTES = 64 * 1024 * 1024
#: Bytes read from a ``.log`` at a time (a larger batch is read whole).
_CHUNK = 4 * 1024 * 1024


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(TOOL, help="print segment files and check indexes (kafka-dump-log)")
    parser.add_argument(
        "--files",
        required=True,
        help="comma-separated .log, .index, .timeindex, .txnindex or .snapshot files",
    )
    parser.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    parser.add_argument("--print-data-log", action="store_true", help="print keys and values (implies deep)")
    parser.add_argument("--index-sanity-check", action="store_true", help="only check index structure")
    parser.add_argument("--verify-index-only", action="store_true", help="check index entries, print none")
    parser.add_argument("--max-bytes", type=int, default=None, help="read at most this many bytes of a .log")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    status = 0
    for name in (f.strip() for f in args.files.split(",")):
        if not name:
            continue
        try:
            if not _dump(Path(name), args, sys.stdout):
                status = 1
        except ToolError as exc:
            sys.stdout.flush()
            fail(TOOL, str(exc), exc.status)
            status = max(status, exc.status)
        except (PylogError, OSError) as exc:
            sys.stdout.flush()
            fail(TOOL, f"{name}: {exc}")
            status = 1
    return status


def _base_offset(path: Path) -> int:
    try:
        return int(path.name.split(".", 1)[0])
    except ValueError:
        raise ToolError(
            f"{path}: not a segment file name (expected <20-digit base offset>{path.suffix})"
        ) from None


def _dump(path: Path, args: argparse.Namespace, out: TextIO) -> bool:
    if not path.is_file():
        raise ToolError(f"{path}: no such file")
    suffix = path.suffix
    if suffix not in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, SNAPSHOT_SUFFIX):
        raise ToolError(f"{path}: not a .log, .index, .timeindex, .txnindex or .snapshot file")
    out.write(f"Dumping {path}\n")
    if suffix == LOG_SUFFIX:
        return _dump_log(path, args, out)
    if suffix == INDEX_SUFFIX:
        return _dump_offset_index(path, args, out)
    if suffix == TIME_INDEX_SUFFIX:
        return _dump_time_index(path, args, out)
    if suffix == TXN_INDEX_SUFFIX:
        return _dump_txn_index(path, out)
    return _dump_snapshot(path, out)


def _scan(path: Path, limit: int | None, out_invalid: list[int]) -> Iterator[tuple[int, RecordBatch]]:
    """Every whole batch of ``path`` (position, batch), streamed chunk by chunk; the size of a trailing partial
    batch goes to ``out_invalid``. Reports progress on stderr for a large file."""
    size = path.stat().st_size
    if limit is not None:
        size = min(size, limit)
    with path.open("rb") as f:
        position = 0
        next_report = PROGRESS_BYTES
        while position < size:
            f.seek(position)
            buf = f.read(min(_CHUNK, size - position))
            at = 0
            while len(buf) - at >= HEADER_SIZE:
                header = parse_header(buf, at)
                if header.size > len(buf) - at:
                    if at == 0 and position + header.size <= size:  # one batch larger than the chunk
                        f.seek(position)
                        buf = f.read(header.size)
                        continue
                    break
                yield position + at, RecordBatch(buf, at)
                at += header.size
            if at == 0:
                out_invalid.append(size - position)
                break
            position += at
            if size > PROGRESS_BYTES and position >= next_report:
                print(
                    f"{path.name}: {position * 100 // size}% ({position} of {size} bytes)",
                    file=sys.stderr,
                    flush=True,
                )
                next_report = position + PROGRESS_BYTES


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


def _dump_log(path: Path, args: argparse.Namespace, out: TextIO) -> bool:
    out.write(f"Log starting offset: {_base_offset(path)}\n")
    deep = args.deep_iteration or args.print_data_log
    invalid: list[int] = []
    records = bad = total_bytes = batches = 0
    first = last = -1
    for position, batch in _scan(path, args.max_bytes, invalid):
        batches += 1
        if first < 0:
            first = batch.base_offset
        last = batch.last_offset
        valid = batch.is_crc_valid()
        bad += not valid
        total_bytes += batch.size
        kind = "LogAppendTime" if batch.timestamp_type == 1 else "CreateTime"
        out.write(
            f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.records_count} "
            f"baseSequence: {batch.base_sequence} lastSequence: {batch.last_sequence} "
            f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} "
            f"partitionLeaderEpoch: {batch.partition_leader_epoch} isTransactional: "
            f"{str(batch.is_transactional).lower()} isControl: {str(batch.is_control).lower()} "
            f"position: {position} {kind}: {batch.max_timestamp} size: {batch.size} magic: 2 "
            f"compresscodec: {codec_name(batch.compression)} crc: {batch.crc} isvalid: {str(valid).lower()}\n"
        )
        records += batch.records_count
        if not deep or not valid:
            continue
        control = batch.is_control
        for i, record in enumerate(batch.records()):
            line = (
                f"| offset: {record.offset} {kind}: {record.timestamp} "
                f"keySize: {-1 if record.key is None else len(record.key)} "
                f"valueSize: {-1 if record.value is None else len(record.value)} "
                f"sequence: {batch.base_sequence + i if batch.base_sequence >= 0 else -1} "
                f"headerKeys: [{','.join(k for k, _ in record.headers)}]"
            )
            if control:
                marker, epoch = batch.control_record()
                line += f" endTxnMarker: {'ABORT' if marker == CONTROL_ABORT else 'COMMIT'} coordinatorEpoch: {epoch}"
            elif args.print_data_log:
                line += f" key: {_text(record.key)} payload: {_text(record.value)}"
            out.write(line + "\n")
    if invalid:
        out.write(f"Found {invalid[0]} invalid bytes at the end of {path.name}\n")
    offsets = f"{first}-{last}" if batches else "none"
    out.write(
        f"Summary: {batches} batches, {records} records, offsets {offsets}, {total_bytes} bytes"
        f", {bad} with a bad CRC, {invalid[0] if invalid else 0} trailing invalid bytes\n"
    )
    return bad == 0


def _log_of(path: Path) -> list[tuple[int, int, int]]:
    """(position, last offset, max timestamp) of every batch of the index's ``.log``."""
    log = path.with_suffix(LOG_SUFFIX)
    if not log.is_file():
        raise ToolError(f"{path}: its log {log.name} is missing, cannot verify the index")
    return [(position, b.last_offset, b.max_timestamp) for position, b in _scan(log, None, [])]


def _first_batch(log: Path) -> tuple[int, int] | None:
    """(last offset, max timestamp) of the first batch of ``log``, from its header; None if there is none."""
    try:
        with log.open("rb") as f:
            head = f.read(HEADER_SIZE)
    except OSError:
        return None
    if len(head) < HEADER_SIZE:
        return None
    header = parse_header(head, 0)
    return header.last_offset, header.max_timestamp


def _without_zero_slot(entries: list[Any], zero: tuple[int, int], matches: bool) -> list[Any]:
    """An index is preallocated with zeros: a first entry equal to ``zero`` that the log does not back is an
    unused slot (an active segment's index with no entry yet), not an entry."""
    if entries and tuple(entries[0]) == zero and not matches:
        return entries[1:]
    return entries


def _dump_offset_index(path: Path, args: argparse.Namespace, out: TextIO) -> bool:
    base = _base_offset(path)
    log = path.with_suffix(LOG_SUFFIX)
    log_size = log.stat().st_size if log.is_file() else 2**62
    index = OffsetIndex.open_read_only(path, base, log_size)
    slots = path.stat().st_size // OffsetIndex.ENTRY.size
    if args.index_sanity_check:
        try:
            index.sanity_check(log_size)
        except PylogError as exc:
            out.write(f"{path} failed sanity check: {exc}\n")
            return False
        out.write(f"{path} passed sanity check.\n")
        return True
    first = _first_batch(log)
    entries = _without_zero_slot(
        [index.entry(n) for n in range(index.entries)], (base, 0), first is not None and first[0] == base
    )
    ok = True
    if args.verify_index_only:
        by_position = {position: last for position, last, _ in _log_of(path)}
        mismatches: list[str] = []
        non_consecutive: list[str] = []
        previous = -1
        for entry in entries:
            last = by_position.get(entry.position)
            if last != entry.offset:
                found = "no batch starts there" if last is None else f"log offset: {last}"
                mismatches.append(f"  Index offset: {entry.offset}, {found}")
            if entry.offset <= previous:
                non_consecutive.append(f"  Index offset: {entry.offset} after {previous}")
            previous = entry.offset
        if mismatches:
            out.write(f"Mismatches in :{path}\n" + "\n".join(mismatches) + "\n")
        if non_consecutive:
            out.write(f"Non-consecutive offsets in {path}\n" + "\n".join(non_consecutive) + "\n")
        ok = not mismatches and not non_consecutive
    else:
        for entry in entries:
            out.write(f"offset: {entry.offset} position: {entry.position}\n")
    out.write(
        f"Summary: {len(entries)} entries, {slots - len(entries)} unused or untrusted slots"
        + (f", {'verified' if ok else 'FAILED verification'}" if args.verify_index_only else "")
        + "\n"
    )
    return ok


def _dump_time_index(path: Path, args: argparse.Namespace, out: TextIO) -> bool:
    base = _base_offset(path)
    log = path.with_suffix(LOG_SUFFIX)
    log_size = log.stat().st_size if log.is_file() else 2**62
    index = TimeIndex.open_read_only(path, base, log_size)
    slots = path.stat().st_size // TimeIndex.ENTRY.size
    if args.index_sanity_check:
        try:
            index.sanity_check()
        except PylogError as exc:
            out.write(f"{path} failed sanity check: {exc}\n")
            return False
        out.write(f"{path} passed sanity check.\n")
        return True
    first = _first_batch(log)
    entries = _without_zero_slot(
        [index.entry(n) for n in range(index.entries)], (0, base), first is not None and first == (base, 0)
    )
    ok = True
    if args.verify_index_only:
        max_by_last = {last: max_ts for _, last, max_ts in _log_of(path)}
        problems: list[str] = []
        previous = -1
        for entry in entries:
            found = max_by_last.get(entry.offset)
            if found != entry.timestamp:
                problems.append(
                    f"  Found timestamp mismatch in :{path}\n    Index timestamp: {entry.timestamp}, "
                    + ("no batch ends at offset" if found is None else f"log timestamp: {found}")
                    + f" {entry.offset}"
                )
            if entry.timestamp < previous:
                problems.append(
                    f"  Found out of order timestamp in :{path}\n    Index timestamp: {entry.timestamp}, Previously indexed timestamp: {previous}"
                )
            previous = entry.timestamp
        if problems:
            out.write("\n".join(problems) + "\n")
        ok = not problems
    else:
        for entry in entries:
            out.write(f"timestamp: {entry.timestamp} offset: {entry.offset}\n")
    out.write(
        f"Summary: {len(entries)} entries, {slots - len(entries)} unused or untrusted slots"
        + (f", {'verified' if ok else 'FAILED verification'}" if args.verify_index_only else "")
        + "\n"
    )
    return ok


def _dump_txn_index(path: Path, out: TextIO) -> bool:
    _base_offset(path)
    for entry in read_entries_read_only(path):
        out.write(
            f"version: 0 producerId: {entry.producer_id} firstOffset: {entry.first_offset} "
            f"lastOffset: {entry.last_offset} lastStableOffset: {entry.last_stable_offset}\n"
        )
    return True


def _dump_snapshot(path: Path, out: TextIO) -> bool:
    _base_offset(path)
    for entry in read_snapshot(path):
        txn = entry.current_txn_first_offset
        line = (
            f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
            f"coordinatorEpoch: {entry.coordinator_epoch} currentTxnFirstOffset: "
            f"{'OptionalLong.empty' if txn is None else f'OptionalLong[{txn}]'} lastTimestamp: {entry.last_timestamp}"
        )
        if entry.batches:
            batch = entry.batches[0]
            line += (
                f" firstSequence: {batch.first_seq} lastSequence: {batch.last_seq} lastOffset: {batch.last_offset}"
                f" offsetDelta: {batch.offset_delta} timestamp: {batch.timestamp}"
            )
        out.write(line + "\n")
    return True
