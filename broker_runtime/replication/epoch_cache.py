"""The leader-epoch cache of one partition and its ``leader-epoch-checkpoint`` file (Kafka's
``LeaderEpochFileCache`` + ``LeaderEpochCheckpointFile``).

File format (UTF-8 text in the partition directory, ``\\n`` line ends)::

    0               version
    2               number of entries
    0 0             epoch, start offset: the first offset written under that epoch
    3 1200

Invariants: epochs strictly increase down the list and so do start offsets (an entry whose start offset is
not above the previous entry's replaces it, as Kafka does when a leader wrote nothing in an epoch). The file
is rewritten atomically (``.tmp``, fsync, rename, fsync dir) whenever the list changes, which happens once per
leader change, not per append. A failed write fails the log directory (Kafka's ``LeaderEpochCheckpointFile`` is a
``CheckpointFileWithFailureHandler``) when the cache was given the directory's failure channel, then raises on.

Who writes: a leader calls :meth:`LeaderEpochCache.assign` with its epoch and log end offset when it becomes
leader; a follower calls it for every appended batch whose ``partitionLeaderEpoch`` is newer than the latest
entry; a truncation calls :meth:`LeaderEpochCache.truncate_from_end`.

Who reads: a follower sends :attr:`LeaderEpochCache.latest_epoch` as its fetches' LastFetchedEpoch; the leader
checks it with :meth:`LeaderEpochCache.end_offset_for` (Fetch DivergingEpoch, OffsetForLeaderEpoch), and the
follower compares the answer with its own ``end_offset_for`` to find where to truncate; ListOffsets answers
the epoch of a found offset with :meth:`LeaderEpochCache.epoch_for_offset`.

Thread-safety: used from the broker's event-loop thread only (no lock).
"""

from __future__ import annotations

from pathlib import Path

from broker_runtime.errors import StorageError
from broker_runtime.fsutil import write_atomically
from broker_runtime.storage.log_dir_failure import LogDirFailureChannel

__all__ = ["LEADER_EPOCH_CHECKPOINT", "EpochEntry", "LeaderEpochCache"]

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
_VERSION = 0

EpochEntry = tuple[int, int]
"""(epoch, start offset)."""


class LeaderEpochCache:
    """Epoch -> start offset of one partition, persisted in ``<partition dir>/leader-epoch-checkpoint``."""

    __slots__ = ("_entries", "_failure", "path")

    def __init__(self, partition_dir: Path, failure: LogDirFailureChannel | None = None) -> None:
        self.path = Path(partition_dir) / LEADER_EPOCH_CHECKPOINT
        #: Told of a failed write (the log manager's channel; None: the caller handles it).
        self._failure = failure
        self._entries: list[EpochEntry] = self._read()

    # -- queries --------------------------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or -1 when the cache is empty."""
        return self._entries[-1][0] if self._entries else -1

    def start_offset_of(self, epoch: int) -> int | None:
        """The start offset recorded for exactly ``epoch``, or None."""
        for e, start in self._entries:
            if e == epoch:
                return start
        return None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at ``offset`` was written in: the latest entry starting at or below it (-1 when
        none does, e.g. an offset below the first recorded epoch)."""
        found = -1
        for e, start in self._entries:
            if start > offset:
                break
            found = e
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for ``requested_epoch`` (Kafka's ``LeaderEpochFileCache.endOffsetFor``).

        * the latest epoch: (it, ``log_end_offset``);
        * an older epoch: the largest known epoch <= requested, and the start offset of the first epoch above
          the requested one (where the requested epoch's records end on this replica);
        * older than every known epoch: (requested, start offset of the first known epoch);
        * -1, newer than the latest, or an empty cache: (-1, -1), undefined.
        """
        entries = self._entries
        if requested_epoch < 0 or not entries:
            return -1, -1
        if requested_epoch == entries[-1][0]:
            return requested_epoch, log_end_offset
        higher = next(((e, s) for e, s in entries if e > requested_epoch), None)
        if higher is None:
            return -1, -1
        floor = None
        for e, _ in entries:
            if e <= requested_epoch:
                floor = e
        return (requested_epoch if floor is None else floor), higher[1]

    # -- updates --------------------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True when the file changed.

        An epoch older than the latest is ignored; the latest epoch is never moved. An entry of a newer epoch
        removes earlier entries whose start offset is not below ``start_offset``.
        """
        if epoch < 0 or start_offset < 0:
            return False
        if self._entries and epoch <= self._entries[-1][0]:
            return False
        kept = [(e, s) for e, s in self._entries if s < start_offset]
        kept.append((epoch, start_offset))
        self._entries = kept
        self._write()
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there); True if changed."""
        kept = [(e, s) for e, s in self._entries if s < end_offset]
        if len(kept) == len(self._entries):
            return False
        self._entries = kept
        self._write()
        return True

    def clear(self) -> bool:
        """Forget every entry (the log was truncated fully); True if changed."""
        if not self._entries:
            return False
        self._entries = []
        self._write()
        return True

    # -- file -----------------------------------------------------------------------------------------------

    def _read(self) -> list[EpochEntry]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        try:
            return self._parse(text.splitlines())
        except (IndexError, ValueError) as exc:  # a missing line, a field that is not an integer
            raise self._malformed(str(exc)) from None

    def _parse(self, lines: list[str]) -> list[EpochEntry]:
        version = int(lines[0])
        count = int(lines[1])
        if version != _VERSION:
            raise self._malformed(f"version {version}, expected {_VERSION}")
        entries = []
        for number, line in enumerate(lines[2 : 2 + count], start=3):
            parts = line.split(" ")
            if len(parts) != 2:
                raise self._malformed(f"line {number} {line!r} is not 'epoch startOffset'")
            entries.append((int(parts[0]), int(parts[1])))
        if len(entries) != count:
            raise self._malformed(f"{count} entries announced, {len(entries)} found")
        return entries

    def _malformed(self, why: str) -> StorageError:
        return StorageError(f"malformed {self.path}: {why}")

    def _write(self) -> None:
        body = f"{_VERSION}\n{len(self._entries)}\n" + "".join(f"{e} {s}\n" for e, s in self._entries)
        try:
            write_atomically(self.path, body.encode("utf-8"))
        except OSError as exc:
            if self._failure is not None:
                self._failure.maybe_add_offline_log_dir(
                    f"{self.path.parent.name} ({LEADER_EPOCH_CHECKPOINT})", exc
                )
            raise

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path.parent.name}, {self._entries})"
