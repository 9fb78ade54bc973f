"""Producer identity shared by the attempts of one Spark partition, so a re-run task does not write twice.

Runs on: driver (planning, commit); executors (task).

Where this runs: :func:`prepare_write_dir` and :func:`forget_write` on the **driver** (when the writer is
built, and in ``commit()``/``abort()``); :class:`TaskState` on the **executors**, inside a write task, before
anything is sent.

Why: Spark re-runs a task from its first row -- a task retry (attempt numbers 1, 2, ...), a re-attempted stage
(attempt numbers restart at 0, e.g. after a FetchFailed), a speculative copy. The idempotent producer alone only
deduplicates resends of ONE producer id, and a new attempt would get a new id. So the attempt that writes first
stores its producer id and epoch, and for every partition it is about to write, the partition's log end offset
before its first record, in one small JSON file (written atomically, before the corresponding data is sent),
keyed by the write and the Spark partition id -- never by the attempt number::

    <state dir>/<write id>/                     created by the driver when the write starts
    <state dir>/<write id>/task-<spark partition id>.json
        {"producer_id": 7, "producer_epoch": 0, "start_offsets": {"events\\u00000": 1200, ...}}
    <state dir>/<write id>/task-<spark partition id>.lock    flock-ed by the running attempt

**Is this the first attempt?** The state file answers, not the attempt number: when it exists, an earlier
attempt of this Spark partition (of this write) got a producer id and may have written; this attempt keeps the
same producer id and epoch, and reads each recorded partition from its start offset (Fetch, batch headers
only, paging through the log ``_FETCH_BYTES`` at a time) to learn the last sequence number that producer wrote
there. Sequence numbers count records per partition from 0, so the attempt skips exactly that many of its own
records for the partition and continues with the next sequence number: the broker accepts them in order and
nothing is written twice. When the file does not exist, no earlier attempt sent anything (the file is
written before the first record), and this attempt takes a fresh producer id.

**Concurrent attempts** (speculation, or a task of a re-attempted stage while the zombie stage attempt's task
still runs): an attempt holds an exclusive ``flock`` on the partition's ``.lock`` file from before it reads the
state file until its producer is closed (after its last answer was read). An attempt that cannot take the
lock fails at once with :class:`ConcurrentAttemptError` naming the Spark partition and the lock file, so Spark
keeps the other attempt's result (or, if the other fails too, a later attempt resumes it). A lock, not an
epoch: two live attempts sharing a producer id would interleave sequences; the lock keeps one writer per
producer id. The lock file is a separate file because the state file is replaced by rename (a lock on the
replaced inode would be lost); it is never deleted while the write runs. ``flock`` must work across the
executors' machines: a local disk (local mode) or a network file system with working locks (NFSv4, and NFSv3
with lockd, map ``flock`` to byte-range locks on Linux).

**An unreachable state dir is an error, never a silent fallback** (:class:`ProducerStateDirError`, naming the
directory and why): the driver creates ``<state dir>/<write id>/`` before any task runs, so a task -- first
attempt or not -- that does not find it, or cannot take its lock or write its file there, is on an executor that
does not share ``pylog.producerStateDir`` with the driver (or the write already finished); without the file a
re-run would write its rows twice. A corrupt state file is an error too (naming the file).

**Cleanup**: the driver's ``commit()`` and ``abort()`` remove ``<state dir>/<write id>/``
(:func:`forget_write`; a failure to remove is logged at WARNING). A crashed driver leaves it behind: the
directories of such writes are safe to delete once no job writes with that id (they are named
``write-<uuid>`` / ``stream-<uuid>``).

Assumption (documented for users): the re-run task sees the same rows in the same order, as Spark guarantees
for deterministic plans. It is checked: the last record the earlier attempt wrote to a partition must equal
the re-run's record at that position, else the task fails rather than lose or duplicate data. The state dir
must be visible to the driver and every executor (local mode and the embedded broker: the data dir; a
cluster: a shared path given with ``pylog.producerStateDir``).

Threading: one :class:`TaskState` per task attempt, used by the task's thread only.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from broker_runtime.client import KafkaClient
from broker_runtime.errors import KafkaError, PylogError
from broker_runtime.fsutil import FileLock, write_atomically
from broker_runtime.protocol.batch_header import iter_batch_spans
from broker_runtime.protocol.record_codec.decode import decode_batches

__all__ = [
    "ConcurrentAttemptError",
    "ProducerStateDirError",
    "Resume",
    "TaskIdentity",
    "TaskState",
    "forget_write",
    "last_sequences",
    "prepare_write_dir",
]

log = logging.getLogger("spark_kafka_log.task_state")

_SEP = "\u0000"  # topic names cannot contain NUL
_FETCH_BYTES = 8 << 20

_SHARE_HINT = (
    "pylog.producerStateDir must name a directory the driver and every executor share and can write; "
    "without it a re-run task would write its rows twice (or write with kafka.enable.idempotence=false for "
    "at-least-once)"
)


class ProducerStateDirError(PylogError):
    """The producer-state directory of a write cannot be used (missing, not writable, corrupt file)."""


class ConcurrentAttemptError(PylogError):
    """Another attempt of the same Spark partition of the same write holds the partition's lock."""


@dataclass(frozen=True)
class TaskIdentity:
    """Which write, which Spark partition, which attempt (the attempt number is only reported)."""

    write_id: str
    task: int
    attempt: int


def write_dir(state_dir: str, write_id: str) -> Path:
    return Path(state_dir) / write_id


def prepare_write_dir(state_dir: str, write_id: str) -> None:
    """Driver, before any task: create ``<state dir>/<write id>/`` (tasks require it, see the module doc)."""
    if not state_dir:
        raise ProducerStateDirError(f"no producer-state directory is set; {_SHARE_HINT}")
    path = write_dir(state_dir, write_id)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProducerStateDirError(
            f"cannot create the producer-state directory {str(path)!r} of this write: {exc}; {_SHARE_HINT}"
        ) from exc


@dataclass
class TaskState:
    """The JSON file of one Spark partition: producer id/epoch and the start offset of each partition it writes.

    Obtain it with :meth:`acquire` (takes the lock, loads an earlier attempt's file); :meth:`release` when the
    task's producer is closed.
    """

    path: Path
    producer_id: int = -1
    producer_epoch: int = -1
    start_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    #: True when an earlier attempt's file was found (this attempt resumes it).
    resumed: bool = False
    _lock: FileLock | None = field(default=None, repr=False)

    @classmethod
    def acquire(cls, state_dir: str, identity: TaskIdentity) -> TaskState:
        """The state of ``identity``'s Spark partition, locked for this attempt (see the module docstring).

        Raises :class:`ProducerStateDirError` when the write's directory is missing or unusable, or the file
        is corrupt; :class:`ConcurrentAttemptError` when another attempt holds the lock.
        """
        if not state_dir:
            raise ProducerStateDirError(f"no producer-state directory is set; {_SHARE_HINT}")
        wdir = write_dir(state_dir, identity.write_id)
        where = f"task {identity.task} attempt {identity.attempt}"
        if not wdir.is_dir():
            why = (
                f"the producer-state directory {state_dir!r} does not exist here"
                if not Path(state_dir).is_dir()
                else "the driver created it when the write started, so this executor does not see the "
                "driver's directory (or the write already finished)"
            )
            raise ProducerStateDirError(
                f"{where}: the producer-state directory of this write {str(wdir)!r} is not reachable from "
                f"this executor: {why}; {_SHARE_HINT}"
            )
        if not os.access(wdir, os.W_OK | os.X_OK):
            raise ProducerStateDirError(
                f"{where}: the producer-state directory of this write {str(wdir)!r} is not writable by this "
                f"executor (uid {os.getuid()}); {_SHARE_HINT}"
            )
        state = cls(wdir / f"task-{identity.task}.json")
        lock = FileLock(wdir / f"task-{identity.task}.lock")
        try:
            got = lock.acquire(0)
        except OSError as exc:
            raise ProducerStateDirError(
                f"{where}: cannot open or lock the lock file {str(lock.path)!r} ({exc}): the file system of the "
                f"producer-state directory must support flock; {_SHARE_HINT}"
            ) from exc
        if not got:
            raise ConcurrentAttemptError(
                f"{where} of write {identity.write_id}: another attempt of Spark partition {identity.task} is "
                f"running (it holds the lock {str(lock.path)!r}: speculative execution, or a re-attempted "
                f"stage while the earlier stage attempt's task still runs); this attempt stops without "
                f"writing, so Spark keeps the other attempt's result"
            )
        state._lock = lock
        try:
            state.resumed = state._load()
        except BaseException:
            state.release()
            raise
        return state

    def release(self) -> None:
        """Drop the lock (idempotent); the state file stays for a later attempt."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def _load(self) -> bool:
        """Read the file of an earlier attempt; False when there is none (nothing was sent before)."""
        try:
            doc = json.loads(self.path.read_text())
            self.producer_id = int(doc["producer_id"])
            self.producer_epoch = int(doc["producer_epoch"])
            self.start_offsets = {}
            for key, offset in doc["start_offsets"].items():
                topic, _, partition = key.rpartition(_SEP)
                self.start_offsets[(topic, int(partition))] = int(offset)
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProducerStateDirError(
                f"the producer state file {str(self.path)!r} of an earlier attempt cannot be read "
                f"({type(exc).__name__}: {exc}); resuming without it could write records twice"
            ) from exc
        return True

    def save(self) -> None:
        """Write the file atomically and durably (:func:`broker_runtime.fsutil.write_atomically`)."""
        doc = {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "start_offsets": {f"{t}{_SEP}{p}": o for (t, p), o in self.start_offsets.items()},
        }
        try:
            write_atomically(self.path, json.dumps(doc).encode())
        except OSError as exc:
            raise ProducerStateDirError(
                f"cannot write the producer state file {str(self.path)!r} ({exc}); nothing more is sent, "
                f"since a re-run could not find what this attempt wrote; {_SHARE_HINT}"
            ) from exc


@dataclass(frozen=True)
class Resume:
    """Where an earlier attempt's producer stopped in one partition."""

    last_sequence: int  # -1: it wrote nothing there
    last_key: bytes | None = None  # the key and value of that last record, to check the retry's input
    last_value: bytes | None = None


def last_sequences(client: KafkaClient, state: TaskState) -> dict[tuple[str, int], Resume]:
    """Per recorded partition, the last record ``state.producer_id`` wrote there (batch headers walk)."""
    out: dict[tuple[str, int], Resume] = {}
    for (topic, partition), start in state.start_offsets.items():
        last = -1
        last_batch = b""
        offset = start
        while True:
            result = client.fetch(
                {(topic, partition): offset},
                max_bytes=_FETCH_BYTES,
                partition_max_bytes=_FETCH_BYTES,
                max_wait_ms=0,
                min_bytes=0,
            )[(topic, partition)]
            if result.error:
                raise KafkaError(result.error, f"Fetch {topic}-{partition} at offset {offset}")
            data, high_watermark = bytes(result.records or b""), result.high_watermark
            spans = iter_batch_spans(data)
            for position, header in spans:
                if header.producer_id == state.producer_id and header.base_sequence >= 0:
                    seq = header.base_sequence + header.last_offset_delta
                    if seq > last:
                        last, last_batch = seq, bytes(data[position : position + header.size])
            if not spans:
                break
            offset = spans[-1][1].next_offset
            if offset >= high_watermark:
                break
        if last < 0:
            out[(topic, partition)] = Resume(-1)
            continue
        records = decode_batches(last_batch)
        key = records.column("key")[records.num_rows - 1].as_py()
        value = records.column("value")[records.num_rows - 1].as_py()
        out[(topic, partition)] = Resume(last, key, value)
    return out


def forget_write(state_dir: str | None, write_id: str) -> None:
    """Remove the task files of a finished write (driver, after commit or abort)."""
    if not state_dir:
        return
    path = write_dir(state_dir, write_id)
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning(
            "pylog writer: could not remove the producer-state files of finished write %s (%s): %s; they are "
            "no longer needed and may be deleted by hand",
            write_id,
            path,
            exc,
        )
