"""The exactly-once streaming sink's log: one record per micro-batch under ``<checkpointLocation>/pylog-sink/``.

Runs on: driver (planning, commit).

Where this runs: the **driver** only, in the Python workers where PySpark calls ``streamWriter()`` (before the
micro-batch's tasks start) and ``commit()`` / ``abort()`` (after they ended). One run of a query at a time
writes it (Spark refuses to start a second active run of one checkpoint); no locking, no threads.

Format (version 1): one UTF-8 JSON object per record::

    {"version": 1, "batchId": 7, "status": "prepared" | "committed", "queryId": "<Spark query id>",
     "transactions": [{"transactionalId": "pylog-stream-<query id>-0", "producerId": 4000, "producerEpoch": 3,
                       "partitions": [["events", 0], ...], "startedMs": ..., "timeoutMs": 60000}, ...],
     "records": 1200, "partitions": [{"topic": "events", "partition": 0, "records": ..., "first_offset": ...}],
     "tasksEndedAtMs": 1795437640530, "workerStartedAtMs": 1795437640540, "writerCalledAtMs": 1795437640580,
     "writerReadyAtMs": 1795437640599, "commitCalledAtMs": 1795437640601, "preparedAtMs": 1795437640646,
     "transactionsCommittedAtMs": 1795437640700, "committedAtMs": 1795437640711}

(``partitions`` per transaction, its start and timeout only explain a failure. The stamps show where the
commit's time goes: ``tasksEndedAtMs``, the end of the micro-batch's last task; ``workerStartedAtMs``, the start
of the driver's Python process that runs ``commit()`` (-1 where unknown); ``writerCalledAtMs`` and
``writerReadyAtMs``, the ``streamWriter()`` call that built the committing writer; ``commitCalledAtMs``, when
Spark called ``commit()``; then the sink's own steps. They are diagnostics, never read back by the protocol.)

Two stores, chosen by the checkpoint location (:func:`checkpoint_dir`), with one durability contract each:

* **Local** (a plain path or a ``file:`` URI; also a shared mount): ``<batchId>.json`` written ``prepared`` and
  replaced by its ``committed`` form with :func:`broker_runtime.fsutil.write_atomically` (temporary file, fsync,
  rename, fsync of the folder): after a crash or a power loss the file holds the old record or the new one,
  never a mix, and a record is on disk before the step that depends on it (the first EndTxn, the next
  micro-batch) starts.
* **fsspec** (any other scheme fsspec has an implementation for: ``s3://``/``s3a://`` with s3fs, ``gs://``,
  ``abfs://``, ``hdfs://``, ``local://``, chained URLs...; needs ``pip install 'pylog[fsspec]'`` plus the
  scheme's package). Object stores have no rename and no fsync, so nothing is ever replaced: ``<batchId>.json``
  is written once, ``prepared``, and ``<batchId>.committed`` once, holding the committed record; each object is
  written whole (one PUT on object stores, which is atomic there), refused if the name already exists, and read
  back and compared before the sink goes on. A micro-batch's state is ``committed`` iff its ``.committed``
  object exists. A stored object is as durable as the store makes an acknowledged write (S3, GCS, ADLS: durable
  and read-after-write consistent). A ``prepared`` object cut short by a crash (possible only on fsspec file
  systems that are not object stores) was never read back, so no EndTxn was sent for it: when it is the newest
  record and does not parse, it is removed with a WARNING and the micro-batch is written again. A
  ``.committed`` object cut short that way still says committed (it is written only after every EndTxn
  succeeded): the ``prepared`` record is read instead, with a WARNING.

Invariants (kept by :mod:`spark_kafka_log.exactly_once.stream_commit`):

* a micro-batch is recorded ``prepared``, naming every transaction of it, BEFORE the first EndTxn of that
  micro-batch, and ``committed`` after the last EndTxn(commit) succeeded;
* batch ids of records only grow, and only the newest record can be ``prepared`` (the next micro-batch is
  planned only after this one's ``commit()`` returned);
* ``batchId <= newest committed batchId`` means that micro-batch's rows are in the topic (the same rule as
  Spark's own file sink): a re-run of it must not make anything visible again.

Retention: the records of the newest :data:`RETAINED_ENTRIES` micro-batches are kept (Spark's
``minBatchesToRetain`` default); older ones are removed after a commit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from broker_runtime.errors import ConfigError, StreamingSinkError
from broker_runtime.fsutil import write_atomically
from spark_kafka_log.exactly_once.task_transactions import TaskTransaction

__all__ = [
    "COMMITTED",
    "FSSPEC_EXTRA",
    "PREPARED",
    "RETAINED_ENTRIES",
    "SINK_DIR",
    "SinkEntry",
    "SinkLog",
    "checkpoint_dir",
    "is_local",
    "query_id",
]

_log = logging.getLogger("spark_kafka_log.sink_log")

#: The sink's folder inside the query's checkpoint location.
SINK_DIR = "pylog-sink"
#: Entries kept (the newest ones); Spark's ``spark.sql.streaming.minBatchesToRetain`` default.
RETAINED_ENTRIES = 100
PREPARED = "prepared"
COMMITTED = "committed"
#: What to install for checkpoint locations that are not local.
FSSPEC_EXTRA = "pip install 'pylog[fsspec]'"
_VERSION = 1
_ENTRY = re.compile(r"^(\d+)\.json$")
_MARKER = re.compile(r"^(\d+)\.committed$")


def is_local(checkpoint: str) -> bool:
    """Whether a :func:`checkpoint_dir` result is a local directory (else an fsspec URL)."""
    return os.path.isabs(checkpoint) and "://" not in checkpoint


def checkpoint_dir(location: str) -> str:
    """A checkpoint location as the sink log uses it: an absolute local directory, or an fsspec URL.

    Plain paths and ``file:`` URIs are local (relative paths resolve against the working directory, as Spark's
    local file system does: the driver's Python workers run in the driver's working directory). Any other
    scheme goes through fsspec and must have an fsspec implementation installed; else :class:`ConfigError`
    naming the scheme and what to install.
    """
    text = location.strip()
    parsed = urlparse(text)
    if parsed.scheme in ("", "file") and "::" not in text:
        path = unquote(parsed.path) if parsed.scheme == "file" else text
        if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise ConfigError(
                f"checkpointLocation {location!r}: a file: URI with a host ({parsed.netloc!r}) is not a local "
                "path; give file:///path or a plain path"
            )
        return os.path.abspath(path)
    if len(parsed.scheme) == 1:  # a Windows drive letter, "C:\\..."
        return os.path.abspath(text)
    _check_fsspec_scheme(location, text)
    return text.rstrip("/")


def _check_fsspec_scheme(location: str, url: str) -> None:
    """Fail with a clear message unless fsspec can open every protocol of ``url`` (``a::b://...`` chains)."""
    scheme = urlparse(url).scheme or url.split("::", 1)[0]
    hint = (
        "the pylog streaming sink keeps its exactly-once log in the checkpoint and reaches locations other than "
        f"local paths and file: URIs through fsspec ({FSSPEC_EXTRA}, plus the scheme's own fsspec package, e.g. "
        "s3fs for s3:/s3a:, gcsfs for gs:, adlfs for abfs:). Or use a local or shared-mount path, or write "
        "at-least-once without the log (pylog.deliveryGuarantee=at-least-once)"
    )
    try:
        import fsspec
    except ImportError:
        raise ConfigError(
            f"checkpointLocation {location!r}: the scheme {scheme}: needs fsspec, which is not installed: {hint}"
        ) from None
    for part in url.split("::"):
        protocol = urlparse(part).scheme
        if not protocol:
            continue
        try:
            fsspec.get_filesystem_class(protocol)
        except (ValueError, ImportError) as e:
            raise ConfigError(
                f"checkpointLocation {location!r}: fsspec has no usable file system for the scheme {protocol}: "
                f"({e}): {hint}"
            ) from None


class _LocalFiles:
    """A local folder; :meth:`put` replaces a file atomically and durably."""

    write_once = False

    def __init__(self, directory: str) -> None:
        self.where = directory

    def path(self, name: str) -> str:
        return os.path.join(self.where, name)

    def names(self) -> list[str]:
        try:
            return os.listdir(self.where)
        except FileNotFoundError:
            return []

    def get(self, name: str) -> bytes:
        with open(self.path(name), "rb") as f:
            return f.read()

    def put(self, name: str, data: bytes) -> None:
        os.makedirs(self.where, exist_ok=True)
        write_atomically(self.path(name), data)

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path(name))

    def touch(self, name: str) -> None:
        os.makedirs(self.where, exist_ok=True)
        open(self.path(name), "ab").close()


class _FsspecFiles:
    """A folder of an fsspec file system; :meth:`put` writes a NEW object once and reads it back."""

    write_once = True

    def __init__(self, url: str) -> None:
        import fsspec.core

        self.where = url
        try:
            self.fs, self.root = fsspec.core.url_to_fs(url)
        except Exception as e:  # any file system's own setup error (credentials, libraries, ...)
            raise StreamingSinkError(f"cannot open the pylog sink log at {url} through fsspec: {e}") from None

    def path(self, name: str) -> str:
        return f"{self.where}/{name}"

    def _full(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def names(self) -> list[str]:
        try:
            found = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        return [str(p).rstrip("/").rsplit("/", 1)[-1] for p in found]

    def get(self, name: str) -> bytes:
        return bytes(self.fs.cat_file(self._full(name)))

    def put(self, name: str, data: bytes) -> None:
        full = self._full(name)
        if self.fs.exists(full):
            raise OSError(
                f"{self.path(name)} exists already; sink-log objects are written once, never replaced"
            )
        self.fs.makedirs(self.root, exist_ok=True)
        self.fs.pipe_file(full, data)
        self.fs.invalidate_cache(self.root)
        back = bytes(self.fs.cat_file(full))
        if back != data:
            raise OSError(
                f"{self.path(name)} read back {len(back)} bytes that differ from the {len(data)} written; the "
                "store did not keep the write"
            )

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._full(name))
        self.fs.invalidate_cache(self.root)

    def touch(self, name: str) -> None:
        self.fs.makedirs(self.root, exist_ok=True)
        self.fs.pipe_file(self._full(name), b"")


def _files(directory: str) -> _LocalFiles | _FsspecFiles:
    return _LocalFiles(directory) if is_local(directory) else _FsspecFiles(directory)


def query_id(checkpoint: str) -> str:
    """The streaming query's id from ``<checkpoint>/metadata`` (Spark's ``StreamMetadata``, written at query start).

    Stable across restarts from the same checkpoint, unlike the run id.
    """
    files = _files(checkpoint)
    path = files.path("metadata")
    try:
        text = files.get("metadata").decode("utf-8", "replace")
    except OSError as e:
        raise StreamingSinkError(
            f"cannot read the streaming query's id from {path} ({e.strerror or e}): the pylog sink derives its "
            "transactional ids from it; is checkpointLocation the query's checkpoint directory?"
        ) from None
    try:
        ident = json.loads(text.splitlines()[0] if text else "")["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise StreamingSinkError(f"{path} holds no query id ({text[:80]!r})") from None
    if not isinstance(ident, str) or not ident:
        raise StreamingSinkError(f"{path} holds no query id ({text[:80]!r})")
    return ident


def _txn_json(t: TaskTransaction) -> dict[str, Any]:
    return {
        "transactionalId": t.transactional_id,
        "producerId": t.producer_id,
        "producerEpoch": t.producer_epoch,
        "partitions": [[topic, p] for topic, p in t.partitions],
        "startedMs": t.started_ms,
        "timeoutMs": t.timeout_ms,
    }


def _txn_from_json(doc: dict[str, Any]) -> TaskTransaction:
    return TaskTransaction(
        str(doc["transactionalId"]),
        int(doc["producerId"]),
        int(doc["producerEpoch"]),
        tuple((str(topic), int(p)) for topic, p in doc.get("partitions", [])),
        int(doc.get("startedMs", -1)),
        int(doc.get("timeoutMs", -1)),
    )


@dataclass
class SinkEntry:
    """What the sink log says about one micro-batch."""

    batch_id: int
    status: str
    query_id: str
    transactions: list[TaskTransaction]
    records: int = 0
    partitions: list[dict[str, Any]] = field(default_factory=list)
    tasks_ended_at_ms: int = -1
    worker_started_at_ms: int = -1
    writer_called_at_ms: int = -1
    writer_ready_at_ms: int = -1
    commit_called_at_ms: int = -1
    prepared_at_ms: int = 0
    transactions_committed_at_ms: int | None = None
    committed_at_ms: int | None = None

    @property
    def committed(self) -> bool:
        return self.status == COMMITTED

    def to_json(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "batchId": self.batch_id,
            "status": self.status,
            "queryId": self.query_id,
            "transactions": [_txn_json(t) for t in self.transactions],
            "records": self.records,
            "partitions": self.partitions,
            "tasksEndedAtMs": self.tasks_ended_at_ms,
            "workerStartedAtMs": self.worker_started_at_ms,
            "writerCalledAtMs": self.writer_called_at_ms,
            "writerReadyAtMs": self.writer_ready_at_ms,
            "commitCalledAtMs": self.commit_called_at_ms,
            "preparedAtMs": self.prepared_at_ms,
            "transactionsCommittedAtMs": self.transactions_committed_at_ms,
            "committedAtMs": self.committed_at_ms,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SinkEntry:
        if doc.get("version") != _VERSION:
            raise ValueError(f"unknown version {doc.get('version')!r}")
        status = doc["status"]
        if status not in (PREPARED, COMMITTED):
            raise ValueError(f"unknown status {status!r}")
        return cls(
            batch_id=int(doc["batchId"]),
            status=status,
            query_id=str(doc["queryId"]),
            transactions=[_txn_from_json(t) for t in doc["transactions"]],
            records=int(doc.get("records", 0)),
            partitions=list(doc.get("partitions", [])),
            tasks_ended_at_ms=int(doc.get("tasksEndedAtMs", -1)),
            worker_started_at_ms=int(doc.get("workerStartedAtMs", -1)),
            writer_called_at_ms=int(doc.get("writerCalledAtMs", -1)),
            writer_ready_at_ms=int(doc.get("writerReadyAtMs", -1)),
            commit_called_at_ms=int(doc.get("commitCalledAtMs", -1)),
            prepared_at_ms=int(doc.get("preparedAtMs", 0)),
            transactions_committed_at_ms=doc.get("transactionsCommittedAtMs"),
            committed_at_ms=doc.get("committedAtMs"),
        )


class SinkLog:
    """The records under ``<checkpoint>/pylog-sink/`` (see the module docstring for both stores)."""

    def __init__(self, checkpoint: str) -> None:
        self.checkpoint = checkpoint
        self._files = _files(
            f"{checkpoint.rstrip('/')}/{SINK_DIR}"
            if not is_local(checkpoint)
            else os.path.join(checkpoint, SINK_DIR)
        )
        self.directory = self._files.where

    def path(self, batch_id: int) -> str:
        """The ``prepared`` record of ``batch_id`` (local: the record, replaced when committed)."""
        return self._files.path(f"{batch_id}.json")

    def _names(self) -> list[str]:
        try:
            return self._files.names()
        except OSError as e:
            raise StreamingSinkError(f"cannot list the pylog sink log {self.directory}: {e}") from None

    def batch_ids(self) -> list[int]:
        """Batch ids with a record, ascending (none when the folder does not exist yet)."""
        names = self._names()
        ids = {int(m.group(1)) for m in map(_ENTRY.match, names) if m}
        if self._files.write_once:
            ids.update(int(m.group(1)) for m in map(_MARKER.match, names) if m)
        return sorted(ids)

    def read(self, batch_id: int) -> SinkEntry:
        """The record of ``batch_id``: committed if it has been committed, else prepared."""
        name = f"{batch_id}.json"
        if self._files.write_once and f"{batch_id}.committed" in self._names():
            try:
                return self._checked(f"{batch_id}.committed", batch_id)
            except _Corrupt:
                if f"{batch_id}.json" not in self._names():
                    raise
                # Written only after every EndTxn succeeded: its existence says committed, whatever it holds.
                entry = self._checked(name, batch_id)
                _log.warning(
                    "pylog sink log: the marker %s is corrupt (a write cut short by a crash, or changed since); "
                    "it is written only after every transaction of micro-batch %d was committed, so the "
                    "micro-batch is committed",
                    self._files.path(f"{batch_id}.committed"),
                    batch_id,
                )
                entry.status = COMMITTED
                return entry
        return self._checked(name, batch_id)

    def _checked(self, name: str, batch_id: int) -> SinkEntry:
        entry = self._parse(name, batch_id)
        if entry.batch_id != batch_id:
            raise StreamingSinkError(
                f"the pylog sink log entry {self._files.path(name)} names batch {entry.batch_id}"
            )
        return entry

    def _parse(self, name: str, batch_id: int) -> SinkEntry:
        path = self._files.path(name)
        try:
            doc = json.loads(self._files.get(name))
            return SinkEntry.from_json(doc)
        except OSError as e:
            raise StreamingSinkError(f"cannot read the pylog sink log entry {path}: {e}") from None
        except (ValueError, KeyError, TypeError) as e:
            how = "written once and read back" if self._files.write_once else "written atomically"
            raise _Corrupt(
                f"the pylog sink log entry {path} is corrupt ({e}); it was {how}, so something "
                "else changed it. Restore it, or remove it only if you know how that micro-batch ended"
            ) from None

    def newest(self) -> SinkEntry | None:
        """The record of the highest batch id, or None when the log is empty."""
        ids = self.batch_ids()
        if not ids:
            return None
        try:
            return self.read(ids[-1])
        except _Corrupt as e:
            if not self._files.write_once or f"{ids[-1]}.committed" in self._names():
                raise StreamingSinkError(str(e)) from None
        # A prepared object cut short by a crash: never read back, so no EndTxn followed it.
        _log.warning(
            "pylog sink log: %s does not parse and is the newest record: a write cut short by a crash before "
            "its read-back, so none of micro-batch %d's transactions was committed; removing it (Spark writes "
            "the micro-batch again)",
            self.path(ids[-1]),
            ids[-1],
        )
        self._files.remove(f"{ids[-1]}.json")
        return self.newest()

    def write(self, entry: SinkEntry) -> None:
        """Record ``entry`` durably: local, replace its file atomically; fsspec, a new object (see above)."""
        name = f"{entry.batch_id}.json"
        if self._files.write_once and entry.status == COMMITTED:
            name = f"{entry.batch_id}.committed"
        try:
            self._files.put(name, json.dumps(entry.to_json(), indent=1).encode())
        except OSError as e:
            raise StreamingSinkError(
                f"cannot write the pylog sink log entry {self._files.path(name)}: {e}"
            ) from None

    def mark_committed(self, entry: SinkEntry) -> SinkEntry:
        """Record ``entry`` as committed (now) and drop the records beyond the retained ones."""
        entry.status = COMMITTED
        entry.committed_at_ms = int(time.time() * 1000)
        self.write(entry)
        self._purge()
        return entry

    def touch(self, name: str) -> None:
        """Create an empty file ``name`` beside the records (test hooks; not a record)."""
        self._files.touch(name)

    def _purge(self) -> None:
        ids = self.batch_ids()
        for batch_id in ids[:-RETAINED_ENTRIES]:
            try:
                self._files.remove(f"{batch_id}.committed")  # the marker first: a record never outlives it
                self._files.remove(f"{batch_id}.json")
            except OSError:
                return  # harmless: old committed entries are only kept for the record


class _Corrupt(StreamingSinkError):
    """A record that does not parse (see :meth:`SinkLog.newest`)."""
