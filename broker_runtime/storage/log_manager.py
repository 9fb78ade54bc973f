"""All partition logs under the broker's log directories (Kafka's ``LogManager``).

Layout of each directory in ``log.dirs``::

    <log.dir>/
        .lock                               held (flock) while a LogManager uses the directory
        .kafka_cleanshutdown                present only after a clean shutdown (Kafka's marker name)
        log-dir-failure                     present after a halt on a failed write (pylog; removed by the next
                                            start, see broker_runtime.fsutil.LOG_DIR_FAILURE_FILE)
        recovery-point-offset-checkpoint    \\
        log-start-offset-checkpoint          } text checkpoints, see :mod:`.checkpoint`
        replication-offset-checkpoint       /
        cleaner-offset-checkpoint           first dirty offset of each compacted partition (:mod:`.cleaner`)
        <topic>-<partition>/                one directory per partition (topic names may contain '-':
            00000000000000000000.log          the partition is after the last '-')
            00000000000000000000.index
            00000000000000000000.timeindex
            00000000000000000000.snapshot   producer state at that offset (:mod:`.producer_state`)
            topic.config                    pylog: the topic's config overrides, ``key=value`` lines
                                            (written atomically; Kafka keeps these in its metadata log and
                                            ignores unknown files in partition directories)
            partition.metadata              the topic id (Kafka's file and format, :mod:`.partition_metadata`)

Startup: per directory, take the lock, drop ``*-delete`` directories (Kafka's name for a topic deletion in
progress), read the checkpoints, load every partition directory (recovering from its recovery point when the
clean-shutdown marker is absent, from offset 0 whatever the marker says when the operator asked for a full recovery,
``recover_all``; see :mod:`.log_loader`), then remove the marker. What recovery cut or deleted is logged at WARNING
by the loader and summed in :attr:`LogManager.recovery_truncations` / ``recovery_bytes_dropped``. A partition's roll
has its segment fsynced on the manager's roll-flush executor (:data:`ROLL_FLUSH_THREADS` threads named
``pylog-roll-flush``, so the appending thread never waits for the disk; see "Roll" in :mod:`.partition_log`), then
its directory's recovery-point checkpoint written by a background thread (see
:meth:`LogManager._persist_recovery_point`). Every log is loaded with the manager's ``hw_follows_leo``: True (a
single node) makes the high watermark the log end offset; False (a cluster, where partitions may be replicated)
keeps the high watermark of ``replication-offset-checkpoint`` (0 when absent) and leaves it to replication;
:meth:`LogManager.create_log` can choose per log. Shutdown: close every log (flush, producer snapshot, final index
entries, trim), write the checkpoints, write the marker, release the lock. A new partition goes to the directory
holding the fewest.

Topic ids: a loaded log carries the id of its ``partition.metadata`` (``PartitionLog.topic_id``, None for a
directory written before pylog had topic ids); :meth:`LogManager.create_log` given a ``topic_id`` writes it with
a new log, and :meth:`LogManager.assign_topic_id` records it for an existing one -- or refuses, with
:class:`~broker_runtime.errors.InconsistentTopicIdError`, a log whose file names another id (Kafka's
``InconsistentTopicIdException``: the directory belongs to another incarnation of the topic);
:meth:`LogManager.mark_stray` moves such a log aside to ``<topic>-<partition>.<id>-stray`` (Kafka's stray replica
directory: never loaded again, never deleted by the broker; a start says at WARNING which are there).

Changes while running (the admin APIs): :meth:`LogManager.set_topic_overrides` rewrites a topic's
``topic.config`` and reconfigures its open logs, :meth:`LogManager.set_base_config` gives every log new broker
defaults (both take effect at the next append, roll, retention pass or cleaning), :meth:`LogManager.delete_log`
aborts the log's cleaning and waits for the cleaner to leave it (Kafka's ``abortCleaning`` in ``asyncDelete``, so
no ``.cleaned`` or ``.swap`` of it lands in a directory of the same name created again), closes the log, renames its
directory to ``<topic>-<partition>.<id>-delete``, drops it from the checkpoints (the cleaner's too) and removes it (a
start removes what an interrupted deletion left); :meth:`LogManager.mark_stray` aborts the cleaning the same way.

Failed writes: every OSError of a write in a directory (the checkpoints, the cleaner, the renames of a deleted or
stray log, ``topic.config`` and ``partition.metadata`` rewrites; the partition logs report their own) fails the
directories through :attr:`LogManager.dir_failure` (:mod:`.log_dir_failure`), as Kafka's LogDirFailureChannel. A
new log's files failing do not: :meth:`LogManager.create_log` raises, and its caller rolls the topic back.

Thread-safety: a manager-wide lock guards the partition map and directory choices; each partition log has
its own lock (see :mod:`.partition_log`). All public methods may be called from any thread. A creation
(:meth:`LogManager.create_log`) holds a creation lock across its file work (directory, config file, segment
files, fsyncs) and the manager-wide lock only to pick the directory and to publish the new log, so readers of
the map never wait for a disk; shutdown takes the creation lock first. The log cleaner
(:meth:`LogManager.start_cleaner`) runs in its own thread and takes a partition's lock only to swap a cleaned
segment in; shutdown stops it first. Shutdown and a simulated crash wait for the roll flushes already asked for
before closing the logs.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from broker_runtime.errors import ConfigError, InconsistentTopicIdError, StorageError
from broker_runtime.fsutil import (
    LOG_DIR_FAILURE_FILE,
    FileLock,
    fsync_dir,
    read_log_dir_failure,
    write_atomically,
)
from broker_runtime.protocol.topic_id import format_topic_id
from broker_runtime.storage.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_dir_failure import LogDirFailureChannel
from broker_runtime.storage.partition_log import PartitionLog, default_clock
from broker_runtime.storage.partition_metadata import read_topic_id, write_topic_id
from broker_runtime.storage.retention import run_retention

if TYPE_CHECKING:
    from broker_runtime.storage.cleaner import CleanResult

__all__ = ["CLEAN_SHUTDOWN_FILE", "LOCK_FILE", "TOPIC_CONFIG_FILE", "LogManager", "parse_partition_dir"]

_log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
TOPIC_CONFIG_FILE = "topic.config"
_DELETE_DIR_SUFFIX = "-delete"
_STRAY_DIR_SUFFIX = "-stray"
#: Threads fsyncing rolled segments (two: one slow partition directory does not hold up every other roll).
ROLL_FLUSH_THREADS = 2
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_PARTITION_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)$")


#: Longest file name the common file systems take (ext4, xfs, btrfs: 255 bytes; topic names are ASCII).
_MAX_FILE_NAME = 255


def dir_name_with_suffix(topic: str, partition: int, suffix: str) -> str:
    """``<topic>-<partition>.<32 hex>-<suffix>`` for a log directory moved aside, the topic cut short so the name
    fits in :data:`_MAX_FILE_NAME` (a legal topic name has up to 249 characters; Kafka caps the same way in
    ``LocalLog.logDirNameWithSuffixCappedLength``). The cut name is never parsed back: such directories are
    found by their suffix alone."""
    tail = f"-{partition}.{uuid.uuid4().hex}{suffix}"
    return topic[: _MAX_FILE_NAME - len(tail)] + tail


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``("my-topic", 3)`` for ``my-topic-3``; None for anything else."""
    match = _PARTITION_DIR.match(name)
    if match is None:
        return None
    return match.group("topic"), int(match.group("partition"))


def _read_topic_config(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    result: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise StorageError(f"{path.parent.name}/{path.name}: line {number} {line!r} is not key=value")
        result[key.strip()] = value.strip()
    return result


def _write_topic_config(path: Path, overrides: Mapping[str, str]) -> None:
    body = "".join(f"{k}={v}\n" for k, v in sorted(overrides.items()))
    write_atomically(path, body.encode())


def _inconsistent(topic: str, partition: int, wanted: uuid.UUID, found: uuid.UUID) -> str:
    return (
        f"Tried to assign topic ID {format_topic_id(wanted)} to log for topic partition {topic}-{partition}, but "
        f"its directory's partition.metadata contains topic ID {format_topic_id(found)}: the directory belongs "
        "to another topic of that name (deleted and created again?); move it away if its data is not needed"
    )


class LogManager:
    """Creates, loads, checkpoints, retains and deletes the partition logs of one broker."""

    def __init__(
        self,
        log_dirs: Sequence[str | os.PathLike[str]],
        config: LogConfig,
        clock: Callable[[], int] | None = None,
        *,
        hw_follows_leo: bool = True,
        recover_all: bool = False,
    ) -> None:
        if not log_dirs:
            raise ConfigError("log.dirs: at least one log directory is required")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.config = config
        self.clock = clock or default_clock
        #: How logs are loaded and created unless told otherwise (see the module docstring).
        self.hw_follows_leo = hw_follows_leo
        self._lock = threading.RLock()
        #: Serializes log creations (held across their file work; the manager lock is not, see create_log).
        self._create_lock = threading.RLock()
        self._cleaner_lock = threading.Lock()
        self._cleaner_thread: threading.Thread | None = None
        self._cleaner_stop = threading.Event()
        #: Set to end the cleaner's sleep early (a stop, or a new ``log.cleaner.backoff.ms``).
        self._cleaner_wake = threading.Event()
        #: The cleaner's sleep between passes (``log.cleaner.backoff.ms``; changed by :meth:`set_cleaner_backoff`).
        self.cleaner_backoff_ms = 15000
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._log_dir_of: dict[tuple[str, int], Path] = {}
        self._dir_locks: dict[Path, FileLock] = {}
        self._started = False
        #: Failed periodic passes by task ("retention", "producer expiration"), each also logged at WARNING.
        self.periodic_failures: collections.Counter[str] = collections.Counter()
        #: The operator asked for a full recovery: every segment of every log is validated at startup, from
        #: offset 0, whatever the clean-shutdown marker and the recovery points say.
        self.recover_all = recover_all
        #: Segments cut or deleted by recovery at startup, and the bytes they lost (each logged at WARNING by
        #: the log loader, :mod:`.log_loader`).
        self.recovery_truncations = 0
        self.recovery_bytes_dropped = 0
        #: Serializes writes of the checkpoint files (the periodic writer and the writes after a roll).
        self._checkpoint_lock = threading.Lock()
        #: Directories whose recovery-point checkpoint a roll made stale, for the "pylog-recovery-point" thread.
        self._rp_dirty: set[Path] = set()
        self._rp_cond = threading.Condition()
        self._rp_thread: threading.Thread | None = None
        self._rp_stop = False
        self._roll_flusher: ThreadPoolExecutor | None = None
        #: Failed roll flushes by file (``"segment"``: the rolled segment's or directory's fsync;
        #: ``"producer snapshot"``: the snapshot written after it), each also logged at WARNING by the log.
        self.roll_flush_failures: collections.Counter[str] = collections.Counter()
        self._failures_lock = threading.Lock()
        #: Set once by :meth:`mark_offline` or by the first write the disk refused, and shared with every log:
        #: then every read, write, checkpoint and background pass is refused before any I/O
        #: (:mod:`.log_dir_failure`; the broker listens on it and halts).
        self.dir_failure = LogDirFailureChannel()
        #: The partition the cleaner is cleaning now, and the partitions whose cleaning is aborted and paused
        #: (a deletion or a stray move under way; Kafka's LogCleanerManager states), under ``_cleaning_cond``.
        self._cleaning: tuple[str, int] | None = None
        self._cleaning_paused: collections.Counter[tuple[str, int]] = collections.Counter()
        self._cleaning_cond = threading.Condition()
        #: Serializes the read-modify-write of each directory's ``cleaner-offset-checkpoint``.
        self._cleaner_checkpoint_lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------------------------------

    def startup(self) -> None:
        """Lock the directories and load every partition (recovering after an unclean shutdown)."""
        with self._lock:
            if self._started:
                return
            for log_dir in self.log_dirs:
                log_dir.mkdir(parents=True, exist_ok=True)
                self._lock_dir(log_dir)
            for log_dir in self.log_dirs:
                self._load_dir(log_dir)
            self._started = True

    def _lock_dir(self, log_dir: Path) -> None:
        lock = FileLock(log_dir / LOCK_FILE)
        try:
            got = lock.acquire(0)
        except OSError:
            got = False
        if not got:
            for held in self._dir_locks.values():
                held.release()
            self._dir_locks.clear()
            raise StorageError(f"log directory {log_dir} is in use by another process") from None
        self._dir_locks[log_dir] = lock

    def _load_dir(self, log_dir: Path) -> None:
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists() and not self.recover_all
        if self.recover_all:
            _log.warning("%s: full recovery requested: validating every segment of every partition", log_dir)
        recovery_points = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read()
        log_starts = OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).read()
        high_watermarks = OffsetCheckpointFile(log_dir / REPLICATION_CHECKPOINT).read()
        for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            if entry.name.endswith(_DELETE_DIR_SUFFIX):
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            if entry.name.endswith(_STRAY_DIR_SUFFIX):
                _log.warning(
                    "stray partition directory %s kept aside, not loaded (remove it when its data is "
                    "not needed)",
                    entry.path,
                )
                continue
            parsed = parse_partition_dir(entry.name)
            if parsed is None:
                continue
            if parsed in self._logs:
                raise StorageError(
                    f"partition {parsed[0]}-{parsed[1]} exists in both {self._log_dir_of[parsed]} and {log_dir}"
                )
            part_dir = Path(entry.path)
            topic, partition = parsed
            overrides = _read_topic_config(part_dir / TOPIC_CONFIG_FILE)
            topic_id = read_topic_id(part_dir)
            log = PartitionLog.load(
                part_dir,
                topic,
                partition,
                self.config.with_topic_overrides(overrides),
                self.clock,
                recovery_point=0 if self.recover_all else recovery_points.get(parsed, 0),
                log_start_offset=log_starts.get(parsed, 0),
                high_watermark=high_watermarks.get(parsed),
                needs_recovery=not clean,
                hw_follows_leo=self.hw_follows_leo,
            )
            log.topic_id = topic_id
            self.recovery_truncations += log.recovery_truncations
            self.recovery_bytes_dropped += log.recovery_bytes_dropped
            log.dir_failure = self.dir_failure
            log.on_roll = self._persist_recovery_point
            log.flush_executor = self._roll_flush_executor()
            log.on_flush_failure = self._roll_flush_failed
            self._logs[parsed] = log
            self._log_dir_of[parsed] = log_dir
        failed = read_log_dir_failure(log_dir)
        if failed is not None:  # the last broker here halted on a failed write; this start got through
            _log.warning(
                "%s: the last broker on this directory halted (%s); its files were recovered, removing %s",
                log_dir,
                failed.splitlines()[0] if failed else "no details recorded",
                LOG_DIR_FAILURE_FILE,
            )
            (log_dir / LOG_DIR_FAILURE_FILE).unlink()
        if marker.exists() or failed is not None:
            marker.unlink(missing_ok=True)
            fsync_dir(log_dir)

    def start_cleaner(self, backoff_ms: int) -> None:
        """Start the log cleaner thread (Kafka's ``LogCleaner`` with ``log.cleaner.threads=1``): a
        :meth:`run_cleaner` pass, then ``backoff_ms`` of sleep, until :meth:`stop_cleaner` or shutdown."""
        with self._lock:
            if self._cleaner_thread is not None:
                return
            self.cleaner_backoff_ms = backoff_ms
            stop = self._cleaner_stop = threading.Event()
            wake = self._cleaner_wake = threading.Event()

            def loop() -> None:
                while True:
                    wake.wait(self.cleaner_backoff_ms / 1000)
                    if stop.is_set():
                        return
                    if wake.is_set():  # the backoff changed: sleep the new one from now
                        wake.clear()
                        continue
                    try:
                        self.run_cleaner()
                    except Exception:  # keep cleaning later logs and later passes; say why this one failed
                        _log.exception("log cleaner pass failed")

            self._cleaner_thread = threading.Thread(target=loop, name="pylog-log-cleaner", daemon=True)
            self._cleaner_thread.start()

    def set_cleaner_backoff(self, backoff_ms: int) -> None:
        """``log.cleaner.backoff.ms`` changed at runtime: the cleaner's current sleep ends and the new one starts
        (a pass in progress finishes first)."""
        self.cleaner_backoff_ms = backoff_ms
        self._cleaner_wake.set()

    def stop_cleaner(self) -> None:
        """Stop the cleaner thread, waiting for a pass in progress to end (a swap is never cut in half)."""
        thread = self._cleaner_thread
        if thread is None:
            return
        self._cleaner_stop.set()
        self._cleaner_wake.set()
        thread.join()
        self._cleaner_thread = None

    def _roll_flush_executor(self) -> ThreadPoolExecutor:
        """The executor the logs' roll fsyncs run on (created on first use, stopped by shutdown)."""
        if self._roll_flusher is None:
            self._roll_flusher = ThreadPoolExecutor(ROLL_FLUSH_THREADS, thread_name_prefix="pylog-roll-flush")
        return self._roll_flusher

    def _roll_flush_failed(self, what: str) -> None:
        """A log's roll flush failed (called on a roll-flush thread)."""
        with self._failures_lock:
            self.roll_flush_failures[what] += 1

    def _stop_roll_flushes(self) -> None:
        """Wait for the roll flushes asked for so far, and stop their threads."""
        flusher, self._roll_flusher = self._roll_flusher, None
        if flusher is not None:
            flusher.shutdown(wait=True)

    def shutdown(self) -> None:
        """Close every log, write the checkpoints and the clean-shutdown markers, release the directories.
        Once the directories went offline, nothing is written: :meth:`close_without_shutdown` instead. A checkpoint
        write refused now fails the directories like any other (the broker is told) and leaves no marker, so the
        next start recovers (Kafka's shutdown writes no clean-shutdown file for a directory whose jobs failed)."""
        if self.dir_failure.offline is not None:
            self.close_without_shutdown()
            return
        self.stop_cleaner()
        self._stop_roll_flushes()
        self._stop_recovery_point_writer()
        with self._create_lock, self._lock:  # a creation in its file work finishes first
            if not self._started:
                return
            for log in self._logs.values():
                log.close()
            try:
                self._write_checkpoints()
            except OSError:  # reported to dir_failure by the checkpoint file
                self._release()
                return
            for log_dir in self.log_dirs:
                write_atomically(log_dir / CLEAN_SHUTDOWN_FILE, b"")
            self._release()

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """An OSError inside fails the log directories (:attr:`dir_failure`), then is raised on (Kafka routes every
        IOException of a log-dir write to its LogDirFailureChannel); ``what`` names the write."""
        try:
            yield
        except OSError as exc:
            self.dir_failure.maybe_add_offline_log_dir(what, exc)
            raise

    def mark_offline(self, reason: str) -> None:
        """The directories failed (a write the disk refused; ``reason`` says which): from now on every log read
        and write, creation, deletion, config write, checkpoint, cleaning and retention pass is refused with
        :class:`~broker_runtime.errors.LogDirOfflineError` or skipped, before any I/O (Kafka's
        ``LogDirFailureChannel.maybeAddOfflineLogDir``). Any thread; synchronous; idempotent."""
        self.dir_failure.mark_offline(reason)

    def close_without_shutdown(self) -> None:
        """Release the directories without flushing, checkpoints or marker: a broker halted because its log dir
        failed (its next start recovers from the files), or a crash simulated in tests. The recovery-point writes
        rolls already asked for are finished first, as a crash a moment later would."""
        self.stop_cleaner()
        self._stop_roll_flushes()
        self._stop_recovery_point_writer()
        with self._lock:
            for log in self._logs.values():
                log.close_without_flush()
            self._release()

    def _release(self) -> None:
        """Unlock the directories and forget the partitions (caller holds ``_lock``; logs already closed)."""
        for lock in self._dir_locks.values():
            lock.release()
        self._dir_locks.clear()
        self._logs.clear()
        self._log_dir_of.clear()
        self._started = False

    # -- partitions -------------------------------------------------------------------------------------------

    def create_log(
        self,
        topic: str,
        partition: int,
        overrides: Mapping[str, str] | None = None,
        *,
        hw_follows_leo: bool | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> PartitionLog:
        """The log of ``topic``-``partition``, created (with ``overrides`` persisted) if absent. Idempotent.

        ``hw_follows_leo`` (default: the manager's setting) applies to a log created here; an existing log
        is returned unchanged. ``topic_id``, when given, is written to a new log's ``partition.metadata`` and
        checked against an existing one's (:meth:`assign_topic_id`).
        """
        if not _LEGAL_TOPIC.match(topic) or topic in (".", ".."):
            raise StorageError(f"topic name {topic!r} is not legal (1-249 of a-z A-Z 0-9 . _ -)")
        if partition < 0:
            raise StorageError(f"partition {partition} of {topic} is negative")
        key = (topic, partition)
        with self._create_lock:  # one creation at a time; the manager lock only around the map
            with self._lock:
                self._ensure_started()
                existing = self._logs.get(key)
            if existing is not None:
                if topic_id is not None:
                    self.assign_topic_id(existing, topic_id)
                return existing
            with self._lock:
                if overrides is None:
                    overrides = self.topic_overrides(topic)
                config = self.config.with_topic_overrides(overrides)
                counts = {d: 0 for d in self.log_dirs}
                for d in self._log_dir_of.values():
                    counts[d] += 1
                log_dir = min(self.log_dirs, key=lambda d: counts[d])
            # The file work (directory, config file, segment files, fsyncs) runs without the manager lock, so
            # the event loop's own calls (all_logs, topic_overrides, ...) never wait for a disk. Its OSError does
            # not fail the directories, where Kafka's getOrCreateLog does: the caller rolls the topic's other new
            # partitions back (on a single node a topic's existence is its directories), which needs them online.
            part_dir = log_dir / f"{topic}-{partition}"
            made_dir = not part_dir.exists()
            part_dir.mkdir(parents=True, exist_ok=True)
            try:
                if overrides:
                    _write_topic_config(part_dir / TOPIC_CONFIG_FILE, overrides)
                found_id = read_topic_id(part_dir)  # a directory left without a log (a failed start)
                if topic_id is not None and found_id is not None and found_id != topic_id:
                    raise InconsistentTopicIdError(_inconsistent(topic, partition, topic_id, found_id))
                if topic_id is not None and found_id is None:
                    write_topic_id(part_dir, topic_id)
                follows = self.hw_follows_leo if hw_follows_leo is None else hw_follows_leo
                log = PartitionLog.load(
                    part_dir,
                    topic,
                    partition,
                    config,
                    self.clock,
                    needs_recovery=False,
                    hw_follows_leo=follows,
                )
            except BaseException:
                if made_dir:  # a half-made partition would be loaded as a real one at the next start
                    shutil.rmtree(part_dir, ignore_errors=True)
                raise
            try:
                fsync_dir(log_dir)
            except BaseException:
                log.close()
                if made_dir:
                    shutil.rmtree(part_dir, ignore_errors=True)
                raise
            log.topic_id = topic_id if topic_id is not None else found_id
            log.dir_failure = self.dir_failure
            log.on_roll = self._persist_recovery_point
            log.flush_executor = self._roll_flush_executor()
            log.on_flush_failure = self._roll_flush_failed
            with self._lock:
                if not self._started:  # closed meanwhile (a simulated crash): the new files stay, unused
                    log.close()
                    raise StorageError(f"the log manager stopped while {topic}-{partition} was being created")
                self._logs[key] = log
                self._log_dir_of[key] = log_dir
            return log

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def assign_topic_id(self, log: PartitionLog, topic_id: uuid.UUID) -> None:
        """Give ``log`` the id of its topic: written to its ``partition.metadata`` when it has none yet;
        :class:`InconsistentTopicIdError` when the file names another (the log belongs to another incarnation of
        the topic; Kafka refuses such a log the same way)."""
        with self._create_lock:
            current = log.topic_id
            if current == topic_id:
                return
            if current is not None:
                raise InconsistentTopicIdError(_inconsistent(log.topic, log.partition, topic_id, current))
            # Kafka's PartitionMetadataFile.maybeFlush fails the log dir too.
            with self._writing(f"{log.name} (partition.metadata)"):
                write_topic_id(log.dir, topic_id)
            log.topic_id = topic_id

    def all_logs(self) -> dict[tuple[str, int], PartitionLog]:
        with self._lock:
            return dict(self._logs)

    def topic_overrides(self, topic: str) -> dict[str, str]:
        """The config overrides stored with ``topic`` (Kafka topic-config names); empty if none or unknown."""
        with self._lock:
            for (t, _), log in sorted(self._logs.items()):
                if t == topic:
                    return dict(log.config.topic_overrides)
        return {}

    def set_topic_overrides(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Replace the config overrides of every local partition of ``topic`` (persisted in each partition's
        ``topic.config``) and apply them to the open logs at once. Raises ConfigError for a bad override."""
        with self._lock:
            self._ensure_started()
            config = self.config.with_topic_overrides(overrides)
            for (t, _), log in sorted(self._logs.items()):
                if t != topic:
                    continue
                if dict(log.config.topic_overrides) != dict(overrides):
                    # Kafka keeps topic configs in its metadata log, whose failed write halts the broker too.
                    with self._writing(f"{log.name} ({TOPIC_CONFIG_FILE})"):
                        _write_topic_config(log.dir / TOPIC_CONFIG_FILE, overrides)
                    log.reconfigure(config)

    def set_base_config(self, config: LogConfig) -> None:
        """New broker-level defaults (a dynamic broker config change): every open log is reconfigured with
        them plus its topic's overrides; logs created later start from them."""
        with self._lock:
            self.config = config
            for log in self._logs.values():
                log.reconfigure(config.with_topic_overrides(dict(log.config.topic_overrides)))

    def delete_log(self, topic: str, partition: int) -> bool:
        """Delete one partition (DeleteTopics): abort its cleaning and wait for the cleaner to leave it, close its
        log, rename its directory to ``<topic>-<partition>.<id>-delete`` (Kafka's marker of a deletion in
        progress; a startup finishes it), drop it from the checkpoints, then remove it. False when this manager has
        no such log."""
        with self._cleaning_aborted((topic, partition)), self._lock:
            moved = self._close_and_rename(topic, partition, _DELETE_DIR_SUFFIX)
        if moved is None:
            return False
        old_dir, doomed = moved
        # Tolerated, as Kafka's deleteLogs only logs a failed removal: the directory is already out of every
        # checkpoint and a start removes what is left of a -delete directory.
        shutil.rmtree(doomed, ignore_errors=True)
        _log.info("deleted partition %s-%d (%s)", topic, partition, old_dir)
        return True

    def mark_stray(self, topic: str, partition: int) -> Path | None:
        """Move a stray log aside (Kafka's ``LogManager`` marking a replica of another incarnation of its topic
        stray): close it, forget it and rename its directory to ``<topic>-<partition>.<id>-stray``, which no
        start loads and nothing deletes (Kafka keeps a stray replica's data for the operator to remove). Returns
        the new path; None when this manager has no such log."""
        with self._cleaning_aborted((topic, partition)), self._create_lock, self._lock:
            moved = self._close_and_rename(topic, partition, _STRAY_DIR_SUFFIX)
        return None if moved is None else moved[1]

    def _close_and_rename(self, topic: str, partition: int, suffix: str) -> tuple[Path, Path] | None:
        """Forget and close one log, rename its directory to ``<topic>-<partition>.<id><suffix>`` durably and
        rewrite the checkpoints without it: (old directory, new directory), or None when there is no such log.
        The caller holds ``_lock``."""
        self._ensure_started()
        key = (topic, partition)
        log = self._logs.pop(key, None)
        log_dir = self._log_dir_of.pop(key, None)
        if log is None or log_dir is None:
            return None
        log.close()
        moved = log_dir / dir_name_with_suffix(topic, partition, suffix)
        with self._writing(f"{log.name} (rename to {moved.name})"):  # Kafka's renameDir fails the log dir
            os.rename(log.dir, moved)
            fsync_dir(log_dir)
        self._write_checkpoints()
        self._remove_cleaner_checkpoint(log_dir, key)
        return log.dir, moved

    def dir_of(self, topic: str, partition: int) -> Path | None:
        """The log directory (one of ``log.dirs``) holding the partition, or None."""
        return self._log_dir_of.get((topic, partition))

    # -- periodic work ----------------------------------------------------------------------------------------

    def run_retention(self) -> None:
        """One retention pass over all logs (the server calls this every log.retention.check.interval.ms).

        A log whose pass fails with a StorageError (say, closed by a deletion meanwhile) is logged at WARNING with the
        error and counted in :attr:`periodic_failures`; the other logs are not held up. A segment file that cannot be
        renamed or removed (an OSError) fails the log directories (Kafka's ``deleteSegments`` under
        ``maybeHandleIOException``; the partition log reports it) and ends the pass."""
        now = self.clock()
        self._for_each_log("retention", lambda log: run_retention(log, now))

    def remove_expired_producers(self) -> None:
        """Forget producers idle for ``producer.id.expiration.ms`` in every log (the server calls this every
        ``producer.id.expiration.check.interval.ms``). Failures as :meth:`run_retention`."""
        now = self.clock()
        self._for_each_log("producer expiration", lambda log: log.remove_expired_producers(now))

    def _for_each_log(self, task: str, work: Callable[[PartitionLog], object]) -> None:
        """Run ``work`` on every log; a failure is reported (:meth:`_periodic_failed`) and the others go on.
        Nothing once the directories went offline (that failure was reported where it happened)."""
        for key, log in self.all_logs().items():
            if self.dir_failure.offline is not None:
                return
            try:
                work(log)
            except OSError as exc:
                # Not a write the log reported (those fail the directories, and end the pass below).
                if self.dir_failure.offline is None:
                    self._periodic_failed(task, key, exc)
            except StorageError as exc:
                self._periodic_failed(task, key, exc)

    def _periodic_failed(self, task: str, key: tuple[str, int], exc: Exception) -> None:
        self.periodic_failures[task] += 1
        _log.warning(
            "%s of %s-%d failed (%d failure(s) of %s so far): %s",
            task,
            key[0],
            key[1],
            self.periodic_failures[task],
            task,
            exc,
        )

    def run_cleaner(self, *, force: bool = False) -> dict[tuple[str, int], CleanResult]:
        """One log-cleaner pass over the logs whose ``cleanup.policy`` holds ``compact`` (the server calls
        this from its cleaner thread every ``log.cleaner.backoff.ms``). Each log is cleaned if due (see
        :mod:`.cleaner`), then its first dirty offset goes to ``cleaner-offset-checkpoint``. A StorageError
        is reported as in :meth:`run_retention`; an OSError fails the log directories and ends the pass (Kafka's
        CleanerThread: "Failed to clean up log ... due to IOException"). A log whose cleaning was aborted
        (:meth:`delete_log`, :meth:`mark_stray`) is left at once, its checkpoint untouched. Only one pass may run
        at a time."""
        now = self.clock()
        done: dict[tuple[str, int], CleanResult] = {}
        with self._cleaner_lock:
            for key, log in self.all_logs().items():
                if self.dir_failure.offline is not None:
                    break  # no cleaned segment is written to an offline directory
                if not log.config.compact:
                    continue
                log_dir = self._log_dir_of.get(key)
                if log_dir is None:
                    continue
                with self._cleaning_cond:
                    if self._cleaning_paused[key]:  # being deleted or moved aside
                        continue
                    self._cleaning = key
                try:
                    result = self._clean(log_dir, key, log, now, force)
                finally:
                    with self._cleaning_cond:
                        self._cleaning = None
                        self._cleaning_cond.notify_all()
                if result is not None:
                    done[key] = result
        return done

    def _clean(
        self, log_dir: Path, key: tuple[str, int], log: PartitionLog, now: int, force: bool
    ) -> CleanResult | None:
        """Clean one log (the cleaner thread, ``_cleaning`` set to ``key``) and checkpoint its first dirty offset."""
        # Imported at the first compacted log: the cleaner brings numpy and pyarrow, which a broker
        # without compacted topics never needs (its start time and idle memory).
        from broker_runtime.storage.cleaner import LogCleaningAbortedError, clean_log

        checkpoint = OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT, self.dir_failure)
        try:
            with self._writing(f"{log.name} (log cleaning)"):
                result = clean_log(
                    log,
                    checkpoint.read().get(key, 0),
                    now,
                    force=force,
                    aborted=lambda: self._cleaning_paused[key] > 0,
                )
                if result is None:
                    return None
                with self._cleaner_checkpoint_lock:
                    if self._cleaning_paused[key]:
                        return None  # its deletion drops its entry next; do not write it back
                    offsets = checkpoint.read()
                    offsets[key] = result.first_dirty_offset
                    checkpoint.write(offsets)
        except LogCleaningAbortedError:
            _log.info("cleaning of %s aborted (the partition is being deleted or moved aside)", log.name)
            return None
        except OSError:
            return None  # the directories failed (reported by _writing)
        except StorageError as exc:
            self._periodic_failed("log cleaning", key, exc)
            return None
        return result

    @contextlib.contextmanager
    def _cleaning_aborted(self, key: tuple[str, int]) -> Iterator[None]:
        """Abort and pause the cleaning of ``key`` while inside: a pass cleaning it now stops at its next check
        (its ``.cleaned`` file removed, nothing swapped in) and this waits until the cleaner left the log; no pass
        picks it up until the end (Kafka's ``LogCleanerManager.abortCleaning``, called by ``LogManager.asyncDelete``
        before the log's directory is renamed)."""
        with self._cleaning_cond:
            self._cleaning_paused[key] += 1
            while self._cleaning == key:
                self._cleaning_cond.wait()
        try:
            yield
        finally:
            with self._cleaning_cond:
                self._cleaning_paused[key] -= 1
                if not self._cleaning_paused[key]:
                    del self._cleaning_paused[key]

    def _remove_cleaner_checkpoint(self, log_dir: Path, key: tuple[str, int]) -> None:
        """Drop ``key``'s first dirty offset from ``log_dir``'s cleaner checkpoint (a deleted or stray log: a topic
        created again under that name must start dirty from its own first offset; Kafka's
        ``updateCheckpoints(dir, partitionToRemove)``)."""
        checkpoint = OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT, self.dir_failure)
        with self._cleaner_checkpoint_lock:
            offsets = checkpoint.read()
            if offsets.pop(key, None) is not None:
                checkpoint.write(offsets)

    def flush_dirty_logs(self) -> None:
        """Flush logs whose flush.ms elapsed (the server may call this periodically)."""
        now = self.clock()
        for log in self.all_logs().values():
            log.flush_if_due(now)

    def checkpoint(self) -> None:
        """Write the recovery-point, log-start-offset and replication checkpoints of every directory now."""
        with self._lock:
            self._ensure_started()
            self._write_checkpoints()

    def _write_checkpoints(self) -> None:
        self.dir_failure.check("writing the checkpoints")
        for log_dir in self.log_dirs:
            keys = [k for k, d in self._log_dir_of.items() if d == log_dir]
            logs = {k: self._logs[k] for k in keys}
            with self._checkpoint_lock:
                OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT, self.dir_failure).write(
                    {k: log.recovery_point for k, log in logs.items()}
                )
                OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT, self.dir_failure).write(
                    {k: log.log_start_offset for k, log in logs.items()}
                )
                OffsetCheckpointFile(log_dir / REPLICATION_CHECKPOINT, self.dir_failure).write(
                    {k: log.high_watermark for k, log in logs.items()}
                )

    def _persist_recovery_point(self, rolled: PartitionLog) -> None:
        """After ``rolled`` rolled (its lock held): have its directory's recovery-point checkpoint written.

        pylog writes it right away where Kafka waits for the next periodic checkpoint
        (``log.flush.offset.checkpoint.interval.ms``): a crash in that window would otherwise re-validate, and on
        a corrupt byte cut, segments already fsynced. The write (two fsyncs) runs on the "pylog-recovery-point"
        thread, so the appending thread does not wait for it; rolls in quick succession share one write."""
        log_dir = self._log_dir_of.get((rolled.topic, rolled.partition))
        if log_dir is None:
            return
        with self._rp_cond:
            if self._rp_stop:
                return
            self._rp_dirty.add(log_dir)
            if self._rp_thread is None:
                self._rp_thread = threading.Thread(
                    target=self._recovery_point_writer, name="pylog-recovery-point", daemon=True
                )
                self._rp_thread.start()
            self._rp_cond.notify()

    def _recovery_point_writer(self) -> None:
        while True:
            with self._rp_cond:
                while not self._rp_dirty and not self._rp_stop:
                    self._rp_cond.wait()
                if not self._rp_dirty:
                    return
                dirs, self._rp_dirty = self._rp_dirty, set()
            for log_dir in dirs:
                self._write_recovery_points(log_dir)

    def _write_recovery_points(self, log_dir: Path) -> None:
        """Write ``log_dir``'s recovery-point checkpoint. No manager lock is taken (a retention pass holds it
        while it takes partition locks); the partition map is copied instead. A failed write is counted and
        fails the log directories (Kafka's CheckpointFileWithFailureHandler)."""
        if self.dir_failure.offline is not None:
            return  # a recovery point written now could claim data the failed write left behind
        dirs = dict(self._log_dir_of)
        logs = dict(self._logs)
        points = {k: log.recovery_point for k, log in logs.items() if dirs.get(k) == log_dir}
        try:
            with self._checkpoint_lock:
                OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT, self.dir_failure).write(points)
        except OSError:  # reported to dir_failure by the checkpoint file
            self.periodic_failures["recovery-point checkpoint"] += 1

    def _stop_recovery_point_writer(self) -> None:
        """Finish the pending recovery-point writes and stop their thread (shutdown, or a simulated crash)."""
        with self._rp_cond:
            self._rp_stop = True
            thread = self._rp_thread
            self._rp_cond.notify()
        if thread is not None:
            thread.join()
        with self._rp_cond:
            self._rp_thread = None
            self._rp_stop = False

    def _ensure_started(self) -> None:
        """Every change of the directories starts here: refused once they went offline, or before startup."""
        self.dir_failure.check("changing the log directories")
        if not self._started:
            raise StorageError("the log manager is not started (call startup() first)")
