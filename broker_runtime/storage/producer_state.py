"""Idempotent-producer state of one partition, its ``.snapshot`` files, and the broker's producer id allocator.

Design (Kafka's ``ProducerStateManager`` / ``ProducerAppendInfo`` / ``ProducerStateEntry``)
-------------------------------------------------------------------------------------------------
For every producer id seen on the partition the manager keeps the producer epoch and the metadata of its last
``max_batches_per_producer`` (5) data batches: last sequence, last offset, offset delta (last - first offset of the
batch, which is also last - first sequence) and the batch's max timestamp. Its owner is the partition's
:class:`~broker_runtime.storage.partition_log.PartitionLog` (as Kafka's ``UnifiedLog`` owns its manager), which
calls, under its lock:

1. :meth:`ProducerStateManager.check` (or :meth:`~ProducerStateManager.check_batches` for a multi-batch set)
   BEFORE appending. Batches without a producer id (``producerId == -1``) pass. A batch with the current epoch whose
   (firstSeq, lastSeq) exactly equals a retained batch is a *duplicate*: the result carries the original offsets
   and timestamp and the log answers with them without writing. Otherwise, in this order:
   an epoch older than the current one -> ``INVALID_PRODUCER_EPOCH``; a new epoch must start at sequence 0 unless
   the producer has no epoch yet (an unknown producer id may start anywhere: current Kafka accepts it, the
   former ``UNKNOWN_PRODUCER_ID`` error is gone) else ``OUT_OF_ORDER_SEQUENCE_NUMBER``; the same epoch requires
   ``firstSeq == lastSeq + 1``, where sequences wrap from 2**31 - 1 to 0, else ``OUT_OF_ORDER_SEQUENCE_NUMBER``.
   A batch older than the retained window is therefore out of order, not a duplicate.
   Transactions: a non-transactional data batch from a producer whose transaction is open ->
   ``INVALID_TXN_STATE`` (Kafka's rule); a control batch (COMMIT/ABORT marker) carries no sequence and only
   needs an epoch that is not older than the producer's, and a coordinator epoch that is not older than the one
   of the producer's last marker (:meth:`~ProducerStateManager.check_coordinator_epoch`).
2. :meth:`ProducerStateManager.update` AFTER the append, with the offsets the log assigned; a follower append
   (replication) feeds each batch to :meth:`~ProducerStateManager.replay` instead (no validation).

Transactions (Kafka's ``ongoingTxns`` / ``CompletedTxn``): the first transactional data batch of a producer opens
its transaction at that batch's first offset (``current_txn_first_offset``); a control batch (pass its
``control_type``, 0 ABORT / 1 COMMIT) closes it and is returned as a :class:`CompletedTxn` (first offset = the
marker's own offset when the transaction wrote nothing here, as Kafka). :attr:`~ProducerStateManager.
first_unstable_offset` is the smallest first offset of the open transactions (None when none is open): the
partition's last stable offset is ``min(high watermark, first unstable offset)``. After an ABORT marker,
:meth:`~ProducerStateManager.last_stable_offset_after` gives the ``lastStableOffset`` the log records in its
``.txnindex`` entry (the first offset of the earliest other open transaction, else the marker offset + 1).

Rebuilding (load, truncation): :meth:`~ProducerStateManager.truncate_and_reload` drops snapshots outside the log
and restores the newest valid one at or below the log end; the log then feeds every batch at or after its
offset to :meth:`~ProducerStateManager.replay` (no validation, as Kafka's replication/recovery path).

Snapshot file ``<offset, 20 digits>.snapshot`` (Kafka's ``ProducerSnapshot`` message, version 1, big-endian)::

    offset  field           type
    0       version         int16   1
    2       crc             uint32  CRC-32C of bytes [6, end of file)
    6       entries count   int32   (non-flexible array)
    10      entries ...     46 bytes each:
            producerId int64, epoch int16, lastSequence int32, lastOffset int64, offsetDelta int32,
            timestamp int64, coordinatorEpoch int32, currentTxnFirstOffset int64 (-1 = none)

``currentTxnFirstOffset`` carries the open transactions across restarts: loading a snapshot reopens them.
A snapshot at offset N holds the state of every batch below N. Like Kafka's, it keeps only the *last* batch of
each producer (so after a restart only the newest batch of a producer is detected as a duplicate, until new
batches arrive). Files are written to a temporary name, fsynced and renamed; the two newest are kept. A snapshot
that fails its version, size or CRC check is logged, deleted and the next older one tried.

Thread-safety: :class:`ProducerStateManager` has no lock of its own; the partition calls it under its append lock
(check, append, update form one critical section). A roll takes :meth:`~ProducerStateManager.encode_state` under
that lock and writes the bytes on its flush thread, taking the lock again only for the rename and
:meth:`~ProducerStateManager.prune_snapshots`. :class:`ProducerIdManager` is thread-safe.
"""

from __future__ import annotations

import json
import logging
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c as _crc32c

from broker_runtime.errors import (
    ConfigError,
    CorruptSnapshotError,
    ErrorCode,
    ProducerStateError,
    StorageError,
)
from broker_runtime.fsutil import write_atomically
from broker_runtime.protocol.batch_header import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
)
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.segment import parse_segment_file_name, segment_path

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "PRODUCER_SNAPSHOT_VERSION",
    "SNAPSHOT_COUNT",
    "SNAPSHOT_CRC_OFFSET",
    "SNAPSHOT_ENTRIES_OFFSET",
    "SNAPSHOT_ENTRY",
    "SNAPSHOT_HEADER",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerCheck",
    "ProducerIdManager",
    "ProducerStateEntry",
    "ProducerStateManager",
    "decode_snapshot",
    "encode_snapshot",
    "read_snapshot",
    "snapshot_path",
    "write_snapshot",
]

_log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5

PRODUCER_SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
#: version int16, crc uint32.
SNAPSHOT_HEADER = struct.Struct(">hI")
SNAPSHOT_CRC_OFFSET = 2
#: The CRC covers everything from here: the entry count, then the entries.
SNAPSHOT_ENTRIES_OFFSET = SNAPSHOT_HEADER.size
#: The entries array length (int32, non-flexible encoding).
SNAPSHOT_COUNT = struct.Struct(">i")
#: producerId, epoch, lastSequence, lastOffset, offsetDelta, timestamp, coordinatorEpoch, currentTxnFirstOffset.
SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
assert SNAPSHOT_ENTRY.size == 46

_INT32_MAX = 0x7FFFFFFF
#: ``ControlRecordType.ABORT`` (the key type of an abort marker).
_CONTROL_ABORT = 0


def _decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` on the 31-bit sequence ring (Kafka's ``DefaultRecordBatch.decrementSequence``)."""
    return (sequence - decrement) & _INT32_MAX


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is retained of one appended batch."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return _decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """One producer's epoch, last batches (oldest first), coordinator epoch and open transaction."""

    __slots__ = (
        "batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_timestamp",
        "producer_epoch",
        "producer_id",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        coordinator_epoch: int = -1,
        last_timestamp: int = NO_TIMESTAMP,
        current_txn_first_offset: int | None = None,
        batches: Iterable[BatchMetadata] = (),
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batches: deque[BatchMetadata] = deque(batches)

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            self.batches,
        )

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.last_seq == last_seq and batch.first_seq == first_seq:
                return batch
        return None

    def maybe_update_epoch(self, epoch: int) -> None:
        """A different epoch starts over: the retained batches belong to the old one."""
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(
        self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int, retain: int
    ) -> None:
        self.maybe_update_epoch(epoch)
        if len(self.batches) >= retain:
            self.batches.popleft()
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.producer_epoch}, "
            f"first_seq={self.first_seq}, last_seq={self.last_seq}, batches={list(self.batches)})"
        )


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a control batch just ended on this partition (Kafka's ``CompletedTxn``)."""

    producer_id: int
    first_offset: int
    #: The offset of the marker.
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class ProducerCheck:
    """Outcome of :meth:`ProducerStateManager.check`.

    ``error`` is ``ErrorCode.NONE`` for a batch to append and for a duplicate; ``duplicate`` is set for a
    duplicate (answer with its offsets, write nothing).
    """

    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    duplicate: BatchMetadata | None = None

    @property
    def ok(self) -> bool:
        """True when the batch should be appended."""
        return self.error == ErrorCode.NONE and self.duplicate is None

    @property
    def is_duplicate(self) -> bool:
        return self.duplicate is not None

    @property
    def first_offset(self) -> int | None:
        """Base offset the original batch was appended at (duplicates only)."""
        return None if self.duplicate is None else self.duplicate.first_offset

    @property
    def last_offset(self) -> int | None:
        return None if self.duplicate is None else self.duplicate.last_offset

    @property
    def timestamp(self) -> int | None:
        """Max timestamp of the original batch (its log append time under LogAppendTime); duplicates only.

        Kafka reports this value as the response's ``logAppendTimeMs`` for a duplicate.
        """
        return None if self.duplicate is None else self.duplicate.timestamp


_OK = ProducerCheck()


def snapshot_path(directory: Path, offset: int) -> Path:
    """``<directory>/<offset, 20 digits>.snapshot`` (named like the segment files)."""
    return segment_path(directory, offset, SNAPSHOT_SUFFIX)


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The bytes of a version-1 producer snapshot holding ``entries`` (in the given order)."""
    rows = list(entries)
    body = bytearray(SNAPSHOT_ENTRIES_OFFSET + SNAPSHOT_COUNT.size + SNAPSHOT_ENTRY.size * len(rows))
    SNAPSHOT_COUNT.pack_into(body, SNAPSHOT_ENTRIES_OFFSET, len(rows))
    pos = SNAPSHOT_ENTRIES_OFFSET + SNAPSHOT_COUNT.size
    for e in rows:
        SNAPSHOT_ENTRY.pack_into(
            body,
            pos,
            e.producer_id,
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.last_offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
        )
        pos += SNAPSHOT_ENTRY.size
    crc = _crc32c.crc32c(bytes(body[SNAPSHOT_ENTRIES_OFFSET:]))
    SNAPSHOT_HEADER.pack_into(body, 0, PRODUCER_SNAPSHOT_VERSION, crc)
    return bytes(body)


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry]) -> None:
    """Write a snapshot file atomically (temporary file, fsync, rename, fsync of the directory)."""
    write_atomically(path, encode_snapshot(entries))


def decode_snapshot(data: bytes, name: str = "snapshot") -> list[ProducerStateEntry]:
    """Parse snapshot bytes; raises :class:`~broker_runtime.errors.CorruptSnapshotError` naming what is wrong."""
    minimum = SNAPSHOT_ENTRIES_OFFSET + SNAPSHOT_COUNT.size
    if len(data) < minimum:
        raise CorruptSnapshotError(f"{name}: {len(data)} bytes, a producer snapshot has at least {minimum}")
    version, stored_crc = SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(
            f"{name}: snapshot version {version}, expected {PRODUCER_SNAPSHOT_VERSION}"
        )
    (count,) = SNAPSHOT_COUNT.unpack_from(data, SNAPSHOT_ENTRIES_OFFSET)
    expected_size = minimum + SNAPSHOT_ENTRY.size * count if count >= 0 else -1
    if count < 0 or len(data) != expected_size:
        raise CorruptSnapshotError(
            f"{name}: {count} producer entries need {expected_size} bytes, the file has {len(data)}"
        )
    computed = _crc32c.crc32c(data[SNAPSHOT_ENTRIES_OFFSET:])
    if computed != stored_crc:
        raise CorruptSnapshotError(
            f"{name}: stored CRC-32C 0x{stored_crc:08x} does not match computed 0x{computed:08x}"
        )
    entries = []
    for fields in SNAPSHOT_ENTRY.iter_unpack(data[minimum:]):
        pid, epoch, last_seq, last_offset, offset_delta, timestamp, coordinator_epoch, txn_first = fields
        batches = [BatchMetadata(last_seq, last_offset, offset_delta, timestamp)] if last_offset >= 0 else []
        entries.append(
            ProducerStateEntry(
                pid, epoch, coordinator_epoch, timestamp, txn_first if txn_first >= 0 else None, batches
            )
        )
    return entries


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    """Read and verify one snapshot file."""
    return decode_snapshot(path.read_bytes(), str(path.name))


class ProducerStateManager:
    """Producer id -> :class:`ProducerStateEntry` for one partition directory, with its snapshots."""

    def __init__(
        self,
        partition_dir: Path,
        *,
        max_batches_per_producer: int = NUM_BATCHES_TO_RETAIN,
        producer_id_expiration_ms: int = LogConfig.producer_id_expiration_ms,
        snapshots_to_keep: int = 2,
    ) -> None:
        if max_batches_per_producer < 1:
            raise ConfigError(f"max_batches_per_producer must be >= 1, got {max_batches_per_producer}")
        self.partition_dir = Path(partition_dir)
        self.max_batches_per_producer = max_batches_per_producer
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.snapshots_to_keep = max(1, snapshots_to_keep)
        self._producers: dict[int, ProducerStateEntry] = {}
        #: producer id -> first offset of its open transaction (Kafka's ``ongoingTxns``, keyed by producer).
        self._ongoing: dict[int, int] = {}
        #: Next offset after the last batch reflected in the state (Kafka's ``mapEndOffset``).
        self.map_end_offset = 0

    # -- queries ----------------------------------------------------------------------------------------------

    @property
    def producers(self) -> dict[int, ProducerStateEntry]:
        """The live map (read-only by convention)."""
        return self._producers

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of each open transaction (read-only by convention)."""
        return self._ongoing

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction, or None when no transaction is open."""
        return min(self._ongoing.values()) if self._ongoing else None

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The last stable offset once ``completed`` is closed (what its ``.txnindex`` entry records)."""
        others = [first for pid, first in self._ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    # -- validation before the append -------------------------------------------------------------------------

    def check(self, header: BatchHeader) -> ProducerCheck:
        """Validate one batch before appending it (see the module docstring for the rules)."""
        return self.check_batches((header,))

    def check_batches(self, headers: Sequence[BatchHeader]) -> ProducerCheck:
        """Validate the batches of one append in order, each against the state left by the ones before it.

        As Kafka does, a duplicate anywhere answers for the whole set, and the first error rejects it.
        Nothing is modified.
        """
        pending: dict[int, ProducerStateEntry] = {}
        for header in headers:
            pid = header.producer_id
            if not pid > NO_PRODUCER_ID:
                continue
            committed = self._producers.get(pid)
            epoch = header.producer_epoch
            first_seq = header.base_sequence
            if committed is not None and not header.is_control:
                duplicate = committed.find_duplicate(epoch, first_seq, header.last_sequence)
                if duplicate is not None:
                    return ProducerCheck(duplicate=duplicate)
            working = pending.get(pid)
            if working is None:
                working = committed.copy() if committed is not None else ProducerStateEntry(pid)
                pending[pid] = working
            error = self._validate(working, header)
            if error is not None:
                return error
            if header.is_control:
                working.maybe_update_epoch(epoch)
                working.current_txn_first_offset = None
            else:
                if header.is_transactional and working.current_txn_first_offset is None:
                    working.current_txn_first_offset = header.base_offset
                working.add_batch(
                    epoch,
                    header.last_sequence,
                    header.last_offset,
                    header.last_offset_delta,
                    header.max_timestamp,
                    self.max_batches_per_producer,
                )
        return _OK

    def check_coordinator_epoch(self, producer_id: int, coordinator_epoch: int, where: str) -> None:
        """Refuse a transaction marker from an older coordinator epoch than the producer's last marker (Kafka's
        TRANSACTION_COORDINATOR_FENCED: a coordinator that lost its partition must not end a transaction its
        successor already ended); raises :class:`~broker_runtime.errors.ProducerStateError`."""
        entry = self._producers.get(producer_id)
        if entry is not None and coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"{where}: marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than the epoch {entry.coordinator_epoch} of its last marker",
            )

    @staticmethod
    def _validate(entry: ProducerStateEntry, header: BatchHeader) -> ProducerCheck | None:
        pid, epoch, first_seq = header.producer_id, header.producer_epoch, header.base_sequence
        current_epoch = entry.producer_epoch
        if epoch < current_epoch:
            return ProducerCheck(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {pid}: epoch {epoch} is older than the current epoch {current_epoch}",
            )
        if header.is_control:
            return None  # transaction markers carry no sequence
        if not header.is_transactional and entry.current_txn_first_offset is not None:
            return ProducerCheck(
                ErrorCode.INVALID_TXN_STATE,
                f"producer {pid}: non-transactional batch while its transaction opened at offset "
                f"{entry.current_txn_first_offset} is not complete",
            )
        if epoch != current_epoch:
            if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                return ProducerCheck(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {pid}: new epoch {epoch} (current {current_epoch}) must start at sequence 0, "
                    f"batch starts at {first_seq}",
                )
        elif current_epoch != NO_PRODUCER_EPOCH and not _in_sequence(entry.last_seq, first_seq):
            return ProducerCheck(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {pid} epoch {epoch}: batch starts at sequence {first_seq}, "
                f"expected {(entry.last_seq + 1) & _INT32_MAX} after the last sequence {entry.last_seq}",
            )
        return None

    # -- state changes ----------------------------------------------------------------------------------------

    def update(
        self,
        header: BatchHeader,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        *,
        coordinator_epoch: int | None = None,
        control_type: int | None = None,
    ) -> CompletedTxn | None:
        """Record a batch the log just appended at ``[first_offset, last_offset]`` with max ``timestamp``.

        May be called for every appended batch: one without a producer id only moves ``map_end_offset``.
        A control batch (transaction marker) ends the producer's open transaction: pass its ``control_type``
        (0 ABORT, 1 COMMIT) and ``coordinator_epoch``; the ended transaction is returned.
        """
        if last_offset < first_offset:
            raise StorageError(
                f"producer state update: last offset {last_offset} is below first offset {first_offset}"
            )
        return self._apply(header, first_offset, last_offset, timestamp, coordinator_epoch, control_type)

    def replay(
        self,
        header: BatchHeader,
        *,
        coordinator_epoch: int | None = None,
        control_type: int | None = None,
    ) -> CompletedTxn | None:
        """Rebuild from a batch read back from the log (offsets and timestamp from its header), unvalidated."""
        return self._apply(
            header,
            header.base_offset,
            header.last_offset,
            header.max_timestamp,
            coordinator_epoch,
            control_type,
        )

    def _apply(
        self,
        header: BatchHeader,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        coordinator_epoch: int | None,
        control_type: int | None,
    ) -> CompletedTxn | None:
        pid = header.producer_id
        completed = None
        if pid > NO_PRODUCER_ID:
            entry = self._producers.get(pid)
            if entry is None:
                entry = self._producers[pid] = ProducerStateEntry(pid)
            if header.is_control:
                entry.maybe_update_epoch(header.producer_epoch)
                if coordinator_epoch is not None:
                    entry.coordinator_epoch = coordinator_epoch
                first = entry.current_txn_first_offset
                completed = CompletedTxn(
                    pid, first_offset if first is None else first, last_offset, control_type == _CONTROL_ABORT
                )
                entry.current_txn_first_offset = None
                self._ongoing.pop(pid, None)
                entry.last_timestamp = timestamp
            else:
                entry.add_batch(
                    header.producer_epoch,
                    header.last_sequence,
                    last_offset,
                    last_offset - first_offset,
                    timestamp,
                    self.max_batches_per_producer,
                )
                if header.is_transactional and entry.current_txn_first_offset is None:
                    entry.current_txn_first_offset = first_offset
                    self._ongoing[pid] = first_offset
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)
        return completed

    def update_map_end_offset(self, offset: int) -> None:
        """The log now ends at ``offset`` and every batch below it is reflected (Kafka's ``updateMapEndOffset``)."""
        self.map_end_offset = offset

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for ``producer_id_expiration_ms`` (none with an open transaction)."""
        expired = [pid for pid, e in self._producers.items() if self._is_expired(e, now_ms)]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget every producer and delete every snapshot (the log was emptied or replaced)."""
        self._producers.clear()
        self._ongoing.clear()
        for _, path in self.list_snapshots():
            path.unlink(missing_ok=True)
        self.map_end_offset = offset

    def truncate_and_reload(self, log_start: int, log_end: int, now_ms: int | None = None) -> int:
        """Bring the state in line with a log now spanning ``[log_start, log_end)``.

        Deletes snapshots above ``log_end`` or at/below ``log_start`` (Kafka's rule). When the state does not end
        at ``log_end`` it is rebuilt from the newest remaining snapshot. Returns the offset from which the caller
        must :meth:`replay` the log's batches up to ``log_end`` (``log_end`` itself when nothing is to replay).
        """
        for offset, path in self.list_snapshots():
            if offset > log_end or offset <= log_start:
                path.unlink(missing_ok=True)
        if log_end == self.map_end_offset:
            return log_end
        loaded = self.load_latest_snapshot(now_ms)
        if loaded is None:
            self.map_end_offset = log_start
            return log_start
        return loaded

    # -- snapshots --------------------------------------------------------------------------------------------

    def list_snapshots(self) -> list[tuple[int, Path]]:
        """(offset, path) of the snapshot files in the partition directory, oldest first."""
        if not self.partition_dir.is_dir():
            return []
        found = []
        for path in self.partition_dir.iterdir():
            parsed = parse_segment_file_name(path.name)
            if parsed is not None and parsed[1] == SNAPSHOT_SUFFIX and path.is_file():
                found.append((parsed[0], path))
        found.sort()
        return found

    def delete_snapshots_after(self, offset: int) -> None:
        """Delete the snapshots above ``offset`` (recovery replays the log from a snapshot at or below it)."""
        for at, path in self.list_snapshots():
            if at > offset:
                path.unlink(missing_ok=True)

    def latest_snapshot_offset(self) -> int | None:
        snapshots = self.list_snapshots()
        return snapshots[-1][0] if snapshots else None

    def take_snapshot(self, offset: int | None = None) -> Path:
        """Write the current state as ``<offset>.snapshot`` (default: ``map_end_offset``); keep the newest two."""
        at = self.map_end_offset if offset is None else offset
        if at < 0:
            raise StorageError(
                f"cannot take a producer snapshot at negative offset {at} in {self.partition_dir}"
            )
        path = snapshot_path(self.partition_dir, at)
        write_atomically(path, self.encode_state())
        self.prune_snapshots()
        return path

    def encode_state(self) -> bytes:
        """The current state as snapshot bytes (CPU only, no I/O): a roll encodes them under the partition lock
        and writes them later, off the appending thread (see "Roll" in :mod:`.partition_log`)."""
        return encode_snapshot(self._producers[pid] for pid in sorted(self._producers))

    def prune_snapshots(self) -> None:
        """Delete all but the newest ``snapshots_to_keep`` snapshot files."""
        for _, old in self.list_snapshots()[: -self.snapshots_to_keep]:
            old.unlink(missing_ok=True)

    def load_latest_snapshot(self, now_ms: int | None = None) -> int | None:
        """Replace the state with the newest valid snapshot; returns its offset, or None (state left empty).

        Invalid snapshots are logged as warnings and deleted. With ``now_ms``, producers idle for longer than
        ``producer_id_expiration_ms`` are not loaded.
        """
        self._producers.clear()
        self._ongoing.clear()
        for offset, path in reversed(self.list_snapshots()):
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as exc:
                _log.warning("ignoring producer snapshot %s in %s: %s", path.name, self.partition_dir, exc)
                path.unlink(missing_ok=True)
                continue
            for entry in entries:
                if now_ms is None or not self._is_expired(entry, now_ms):
                    self._producers[entry.producer_id] = entry
                    if entry.current_txn_first_offset is not None:
                        self._ongoing[entry.producer_id] = entry.current_txn_first_offset
            self.map_end_offset = offset
            return offset
        return None


class ProducerIdManager:
    """Hands out producer ids that increase monotonically across restarts.

    Ids come in blocks of ``block_size``. Standalone, this node decides its blocks itself; in a cluster
    ``allocate_block(floor, size)`` asks the cluster's metadata for the next unused block (Kafka's
    AllocateProducerIds idea), so no two nodes ever hand out the same id. Before the first id of a block is returned, the block is written to
    ``state_file`` (JSON ``{"version": 1, "block_start": s, "block_end": e}``, end inclusive; atomically via a
    temporary file, fsync and rename). After a restart allocation resumes at ``block_end + 1`` of the recorded
    block, so ids of a partly used block are skipped, never reused. Thread-safe.
    """

    VERSION = 1
    MAX_PRODUCER_ID = (1 << 63) - 1

    def __init__(
        self,
        state_file: Path,
        block_size: int = 1000,
        allocate_block: Callable[[int, int], tuple[int, int]] | None = None,
    ) -> None:
        if block_size < 1:
            raise ConfigError(f"block_size must be >= 1, got {block_size}")
        self.state_file = Path(state_file)
        self.block_size = block_size
        self._allocate_block = allocate_block
        self._lock = threading.Lock()
        last_end = self._read_last_block_end()
        self._next = last_end + 1
        self._block_start = -1
        self._block_end = last_end  # nothing of a new block handed out yet

    def _read_last_block_end(self) -> int:
        try:
            text = self.state_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return -1
        try:
            data = json.loads(text)
            version, start, end = data["version"], int(data["block_start"]), int(data["block_end"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(
                f"producer id state {self.state_file} is unreadable ({exc}): {text[:200]!r}"
            ) from exc
        if version != self.VERSION or not 0 <= start <= end:
            raise StorageError(
                f"producer id state {self.state_file}: version {version}, block [{start}, {end}] is not valid"
            )
        return end

    def next_id(self) -> int:
        with self._lock:
            if self._next > self._block_end:
                if self._allocate_block is not None:
                    # Cluster mode: the block comes from the cluster's metadata, never below this node's own
                    # last block (ids handed out before the node joined a cluster stay unique too).
                    start, end = self._allocate_block(self._block_end + 1, self.block_size)
                else:
                    start = self._block_end + 1
                    end = min(start + self.block_size - 1, self.MAX_PRODUCER_ID)
                if start > self.MAX_PRODUCER_ID:
                    raise StorageError(f"producer ids exhausted: next block would start at {start}")
                record = {"version": self.VERSION, "block_start": start, "block_end": end}
                self.state_file.parent.mkdir(parents=True, exist_ok=True)
                write_atomically(self.state_file, json.dumps(record).encode("utf-8"))
                self._next, self._block_start, self._block_end = start, start, end
            pid = self._next
            self._next += 1
            return pid

    @property
    def current_block(self) -> tuple[int, int] | None:
        """(first, last) id of the block being handed out; None before the first ``next_id``."""
        with self._lock:
            return None if self._block_start < 0 else (self._block_start, self._block_end)
