"""Offset checkpoint files of a log directory (Kafka's ``OffsetCheckpointFile`` / ``CheckpointFile``).

Kafka keeps four per log directory, all in the same text format::

    recovery-point-offset-checkpoint   offsets below which every segment was fsynced (recovery starts there)
    log-start-offset-checkpoint        each partition's log start offset (advanced by retention/DeleteRecords)
    replication-offset-checkpoint      each partition's high watermark
    cleaner-offset-checkpoint          each compacted partition's first dirty offset (the log cleaner's)

Format (UTF-8 text, ``\\n`` line ends)::

    0                       version
    2                       number of entries
    my-topic 0 1234         topic, partition, offset separated by single spaces
    my-topic 1 99

Writes are atomic: the content goes to ``<name>.tmp``, is fsynced, renamed over ``<name>``, then the directory
is fsynced, so a crash leaves either the old or the new file. Reading a malformed file raises
:class:`~broker_runtime.errors.StorageError` naming the file and line. A write that fails (an OSError) fails the
log directory when the file was given the directory's failure channel (Kafka's
``CheckpointFileWithFailureHandler``: :mod:`.log_dir_failure`), then raises on.

Thread-safety: a :class:`OffsetCheckpointFile` serializes its own writes with a lock; reads take no lock
(the file is replaced atomically).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

from broker_runtime.errors import StorageError
from broker_runtime.fsutil import write_atomically
from broker_runtime.storage.log_dir_failure import LogDirFailureChannel

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_CHECKPOINT",
    "OffsetCheckpointFile",
]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
#: Per compacted partition, the first dirty offset (everything below it was cleaned; Kafka's LogCleanerManager).
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"

_VERSION = 0


class OffsetCheckpointFile:
    """One checkpoint file mapping (topic, partition) to an offset."""

    def __init__(self, path: Path, failure: LogDirFailureChannel | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        #: Told of a failed write (the log manager's; None: the caller handles it).
        self._failure = failure

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        lines = [str(_VERSION), str(len(offsets))]
        lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
        data = ("\n".join(lines) + "\n").encode()
        with self._lock:
            try:
                write_atomically(self.path, data)
            except OSError as exc:
                if self._failure is not None:
                    self._failure.maybe_add_offline_log_dir(str(self.path), exc)
                raise

    def read(self) -> dict[tuple[str, int], int]:
        """The checkpointed offsets; an absent file reads as empty."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        name = self.path.name
        if len(lines) < 2:
            raise StorageError(f"{name}: {len(lines)} lines, a checkpoint needs a version and a count")
        if lines[0].strip() != str(_VERSION):
            raise StorageError(f"{name}: line 1 holds version {lines[0]!r}, expected {_VERSION}")
        try:
            count = int(lines[1])
        except ValueError:
            raise StorageError(f"{name}: line 2 holds {lines[1]!r}, expected the entry count") from None
        entries = lines[2:]
        if count != len(entries):
            raise StorageError(f"{name}: line 2 announces {count} entries, found {len(entries)}")
        result: dict[tuple[str, int], int] = {}
        for number, line in enumerate(entries, start=3):
            parts = line.split(" ")
            if len(parts) != 3:
                raise StorageError(f"{name}: line {number} {line!r} is not 'topic partition offset'")
            try:
                result[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                raise StorageError(f"{name}: line {number} {line!r} holds a non-integer") from None
        return result
