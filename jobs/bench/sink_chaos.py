"""Kill-and-restart runs of a streaming query into pylog: the driver SIGKILLed at seeded points (steps of the
micro-batches, :func:`kill_runs`), restarted from the same checkpoint, the topic judged by a read_committed confluent-kafka consumer.

Used by the benchmark section ``stream`` (the full form: 20 micro-batches) and by
``tests/connector/test_stream_exactly_once.py`` (bounded forms). The query runs in a driver of its own
(:mod:`jobs.bench.sink_app`, started with ``start_new_session=True``): a kill takes the Python driver, its JVM
and every Python worker of the session at once, as a lost driver machine would.

Input: JSON files of ``seq long, key string, value string``, one per micro-batch; ``value`` is the row's global
sequence number as text and ``key`` one of :data:`KEYS` keys, so the judge can tell missing, duplicated and
reordered rows apart.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "KEYS",
    "ChaosOutcome",
    "StreamApp",
    "judge",
    "kill_runs",
    "kill_session",
    "outcome",
    "position",
    "run_with_kills",
    "sink_entries",
    "write_input",
]

APP = Path(__file__).with_name("sink_app.py")
KEYS = 11
#: A driver of its own needs 20-40 s to start on a busy 2-core machine; a micro-batch a few seconds.
START_TIMEOUT_S = 240
RUN_TIMEOUT_S = 600


def _session_members(sid: int) -> list[int]:
    """Pids of the live processes of session ``sid`` (process groups made inside it, like PySpark's worker
    daemon's, stay in the session)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def kill_session(sid: int, timeout_s: float = 30) -> None:
    """SIGKILL every process of session ``sid`` and wait until none is left."""
    deadline = time.monotonic() + timeout_s
    while members := _session_members(sid):
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes of session {sid} survive SIGKILL: {members}")
        time.sleep(0.05)


class StreamApp:
    """One run of the query (or of several side by side: a list of configs) in its own driver process; stdout
    and stderr go to ``<workdir>/<name>.out/.err``."""

    def __init__(self, config: dict[str, Any] | list[dict[str, Any]], workdir: Path, name: str) -> None:
        self.out = workdir / f"{name}.out"
        self.err = workdir / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(APP), json.dumps(config)],
                stdout=out,
                stderr=err,
                cwd=workdir,
                start_new_session=True,
            )

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()

    def wait_for(self, path: Path) -> None:
        """Wait until ``path`` exists (the driver still running)."""
        deadline = time.monotonic() + START_TIMEOUT_S + 120
        while not path.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"driver exited {self.proc.returncode} before {path}: {self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {path}: {self.tail()}")
            time.sleep(0.1)

    def wait_exit(self) -> int:
        try:
            return self.proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"driver did not finish: {self.tail()}") from None

    def kill(self) -> None:
        """SIGKILL the driver: its Python, its JVM and every Python worker (the whole session)."""
        kill_session(self.proc.pid)
        self.proc.wait(30)

    def tail(self) -> str:
        return " | ".join(self.lines()[-3:]) + " | stderr: " + self.err.read_text()[-2000:]


def write_input(source: str | Path, files: int, rows: int) -> int:
    """``files`` input files of ``rows`` rows each (one micro-batch each) in ``source``; the number of rows.

    Spark's file source takes files in order of modification time in milliseconds, and files written within the
    same millisecond in directory-listing order (not by name): each file is stamped one second after the one
    before, so the micro-batches, and each key's rows, follow ``seq``."""
    seq = 0
    first_mtime_ns = time.time_ns() - files * 1_000_000_000
    for i in range(files):
        lines = []
        for _ in range(rows):
            lines.append(json.dumps({"seq": seq, "key": f"k{seq % KEYS}", "value": str(seq)}))
            seq += 1
        path = Path(source, f"part-{i:04d}.json")
        path.write_text("\n".join(lines))
        mtime_ns = first_mtime_ns + i * 1_000_000_000
        os.utime(path, ns=(mtime_ns, mtime_ns))
    return seq


def sink_entries(checkpoint: str | Path) -> list[dict[str, Any]]:
    """The sink log's entries (local store), by batch id; ``writtenAtMs`` added: the file's inode change
    time, i.e. when its last (committed) form was renamed into place after its fsync (the entry cannot stamp its
    own write)."""
    docs = []
    for p in Path(checkpoint, "pylog-sink").glob("*.json"):
        doc = json.loads(p.read_text())
        doc["writtenAtMs"] = p.stat().st_ctime_ns // 1_000_000
        docs.append(doc)
    return sorted(docs, key=lambda d: d["batchId"])


@dataclass
class ChaosOutcome:
    """What the read_committed consumer found: counts of rows missing, duplicated, and keys out of order."""

    records: int
    missing: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not (self.missing or self.duplicated or self.out_of_order)

    def __str__(self) -> str:
        return (
            f"{self.records} records: {len(self.duplicated)} rows duplicated (e.g. {self.duplicated[:5]}), "
            f"{len(self.missing)} missing (e.g. {self.missing[:5]}), keys out of order: {self.out_of_order[:5]}"
        )


def judge(
    bootstrap: str,
    topic: str,
    partitions: int,
    total: int,
    timeout_s: float = 90,
    *,
    order_key: OrderKey | None = None,
) -> ChaosOutcome:
    """Read ``topic`` to its end with read_committed (confluent-kafka) and compare with rows ``0..total-1``
    (``order_key``: see :func:`outcome`)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "pylog-stream-chaos",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "log_level": 0,
        }
    )
    per_partition: dict[int, list[tuple[int, bytes, int]]] = defaultdict(list)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"read_committed consumer reached the end of only {sorted(at_end)} of {topic}"
                )
            for m in consumer.consume(1000, timeout=0.5):
                err = m.error()
                partition, offset = int(m.partition() or 0), int(m.offset() or 0)
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(partition)
                        continue
                    raise RuntimeError(f"consumer error: {err}")
                at_end.discard(partition)
                per_partition[partition].append((offset, m.key() or b"", int(m.value() or b"-1")))
    finally:
        consumer.close()
    return outcome(per_partition, total, order_key=order_key)


def outcome(
    per_partition: dict[int, list[tuple[int, bytes, int]]], total: int, *, order_key: OrderKey | None = None
) -> ChaosOutcome:
    """Judge what a read_committed consumer read, ``partition -> [(offset, key, seq)]``, against rows
    ``0..total-1``.

    Order: without ``order_key`` each key's rows must come in ``seq`` order. With it (``seq -> (micro-batch, input
    file)``, :func:`input_order`), each key's micro-batches must come in order and, within one input file, its
    rows in ``seq`` order; the order between two files Spark's file source put into ONE micro-batch (it does after
    a restart) is Spark's shuffle fetch order, which nothing promises."""
    seqs: Counter[int] = Counter()
    per_key: dict[bytes, list[int]] = defaultdict(list)
    for records in per_partition.values():
        for _, key, seq in sorted(records):
            seqs[seq] += 1
            per_key[key].append(seq)
    return ChaosOutcome(
        records=sum(seqs.values()),
        missing=sorted(set(range(total)) - set(seqs)),
        duplicated=sorted(s for s, n in seqs.items() if n > 1),
        out_of_order=sorted(k.decode() for k, v in per_key.items() if not _in_order(v, order_key)),
    )


#: ``seq -> (micro-batch id, input file index)`` of a run's rows (:func:`input_order`).
OrderKey = Callable[[int], tuple[int, int]]


def _in_order(seqs: list[int], order_key: OrderKey | None) -> bool:
    if order_key is None:
        return seqs == sorted(seqs)
    keys = [order_key(seq) for seq in seqs]
    if [batch for batch, _ in keys] != sorted(batch for batch, _ in keys):
        return False
    per_file: dict[int, list[int]] = defaultdict(list)
    for seq, (_, file) in zip(seqs, keys, strict=True):
        per_file[file].append(seq)
    return all(v == sorted(v) for v in per_file.values())


def input_order(checkpoint: str | Path, rows_per_file: int) -> OrderKey:
    """``seq -> (micro-batch id, input file index)`` of a query reading :func:`write_input`'s files, from the
    checkpoint: Spark's file-source log (``sources/0/<n>``: a version line, then one JSON line per file, ``batchId``
    being the source's own log offset ``n``) and the offsets log (``offsets/<id>``: its last line is the source's
    end offset ``{"logOffset": n}`` of micro-batch ``id``, which covers the log offsets after the previous one's)."""
    log_offset_of_file: dict[int, int] = {}
    for log in Path(checkpoint, "sources", "0").iterdir():
        if log.name.isdigit():
            for line in log.read_text().splitlines()[1:]:
                entry = json.loads(line)
                log_offset_of_file[int(Path(entry["path"]).stem.rsplit("-", 1)[1])] = int(entry["batchId"])
    ends = sorted(
        (int(log.name), int(json.loads(log.read_text().splitlines()[-1])["logOffset"]))
        for log in Path(checkpoint, "offsets").iterdir()
        if log.name.isdigit()
    )

    def key(seq: int) -> tuple[int, int]:
        file = seq // rows_per_file
        offset = log_offset_of_file[file]
        return next(batch for batch, end in ends if end >= offset), file

    return key


#: The steps of one micro-batch a kill is aimed at, in the order a run passes them (:func:`position`): Spark
#: wrote its offsets (``offsets/<id>``: the tasks are starting); its tasks wrote records in still-open transactions
#: (a partition's last stable offset below its end); the sink-log entry is written (``prepared``, or later); the
#: entry says ``committed``; Spark recorded the micro-batch (``commits/<id>``).
PHASES = ("planned", "writing", "prepared", "committed", "recorded")
#: How often a run's position is read while it runs towards its kill point.
POLL_S = 0.05


def _newest_planned(checkpoint: str | Path) -> tuple[int, int] | None:
    """(batch id, file index) of the newest micro-batch Spark planned, or None before the first: the file index is
    the file source's ``logOffset`` in ``offsets/<id>`` (one file per micro-batch, ``maxFilesPerTrigger=1``, so
    the index of the micro-batch's last file, also when a restart put two files into one micro-batch). Spark
    writes these files by rename: never half-read."""
    offsets = Path(checkpoint, "offsets")
    ids = [int(p.name) for p in offsets.iterdir() if p.name.isdigit()] if offsets.is_dir() else []
    if not ids:
        return None
    batch = max(ids)
    _version, _metadata, source_offset = Path(offsets, str(batch)).read_text().splitlines()[:3]
    return batch, int(json.loads(source_offset)["logOffset"])


def position(config: dict[str, Any], client: Any, partitions: list[int]) -> int:
    """How far the query of ``config`` got, as one number that grows as it runs: ``len(PHASES) * file index +
    phase`` of the newest planned micro-batch (:data:`PHASES`), -1 before any; ``client`` (a
    :class:`~broker_runtime.client.KafkaClient`) asks the broker for the ``writing`` phase (the topic's
    ``partitions``).

    Read from files the query writes by rename and from the broker, so it can be read while the query runs or
    after it was killed; a run passes every value up to ``position_at_end`` before it ends (a restart put two
    files into one micro-batch at most skips values)."""
    from broker_runtime.protocol.messages import LATEST_TIMESTAMP, IsolationLevel

    newest = _newest_planned(config["checkpoint"])
    if newest is None:
        return -1
    batch, file = newest
    entry_path = Path(config["checkpoint"], "pylog-sink", f"{batch}.json")
    if Path(config["checkpoint"], "commits", str(batch)).exists():
        phase = 4
    elif entry_path.exists():
        phase = 3 if json.loads(entry_path.read_text())["status"] == "committed" else 2
    else:
        ends = {(config["topic"], p): LATEST_TIMESTAMP for p in partitions}
        stable = client.list_offsets(ends, isolation_level=IsolationLevel.READ_COMMITTED)
        written = client.list_offsets(ends)
        phase = 1 if any(stable[tp][0] < written[tp][0] for tp in ends) else 0
    return len(PHASES) * file + phase


def position_at_end(files: int) -> int:
    """The :func:`position` of a query over ``files`` input files once it recorded the last one."""
    return len(PHASES) * (files - 1) + len(PHASES) - 1


def describe(at: int) -> str:
    """:func:`position` ``at`` in words."""
    return "before any micro-batch" if at < 0 else f"file {at // len(PHASES)} {PHASES[at % len(PHASES)]}"


def kill_runs(
    config: dict[str, Any],
    workdir: Path,
    kills: int,
    files: int,
    seed: int,
    alongside: list[dict[str, Any]] | None = None,
    stalled: list[Path] | None = None,
) -> list[str]:
    """Start the query ``kills`` times, each in a driver of its own, and SIGKILL each run at a seeded point;
    where each kill landed. Raises AssertionError (naming the seed) unless every kill landed inside its run.

    ``alongside``: more queries that the FIRST run's driver runs side by side with this one, each stopping for
    good somewhere (a test's stall), so a test whose scenario needs a driver killed mid-way shares this driver
    (a driver start less). They start first; this query starts once every file of ``stalled`` exists (the
    stalls were reached: ``startAfter`` of :mod:`jobs.bench.sink_app`), so its kill lands where it was aimed
    as in every other run, whatever the stalls took.

    The points are steps (:func:`position`), not moments: run r is killed once the query passed its own starting
    position plus a seeded 1 to ``max_step`` steps, so the kills fall into every phase of the micro-batches
    (tasks starting, tasks writing, mid-commit, committed, recorded) and every run makes progress. A run
    cannot reach the end of the ``files`` input files before its kill point: the points stop at least one
    whole micro-batch (the last file's) before the end, ``max_step`` leaving room for every run
    (:func:`position_at_end`). The kill follows the step within ``POLL_S`` and the time a SIGKILL of the session
    takes; that it came before the run's end is then checked, not assumed. The same seed picks the same steps."""
    from broker_runtime.client import KafkaClient

    rng = random.Random(seed)
    last_point = position_at_end(files) - len(PHASES)
    max_step = max(1, (last_point + 1) // (kills + 1))
    landed: list[str] = []
    with KafkaClient(config["bootstrap"]) as client:
        partitions = client.partitions_for(config["topic"])
        for run in range(kills):
            start = position(config, client, partitions)
            # (kept short of the end should a restart have put two files into one micro-batch, skipping steps)
            target = min(start + rng.randint(1, max_step), last_point)
            if target <= start:
                raise AssertionError(
                    f"seed {seed}: run {run} starts at {describe(start)}, too near the end of {files} files "
                    f"for a kill inside it (the kills so far landed {landed})"
                )
            waits = list(stalled or []) if run == 0 else []
            if run == 0 and alongside:
                after = {**config, "startAfter": [str(p) for p in waits]}
                app = StreamApp([*alongside, after], workdir, f"run{run}")
            else:
                app = StreamApp(config, workdir, f"run{run}")
            started = time.monotonic()
            deadline = started + START_TIMEOUT_S + RUN_TIMEOUT_S
            while (at := position(config, client, partitions)) < target or not all(p.exists() for p in waits):
                if app.proc.poll() is not None:
                    raise AssertionError(
                        f"seed {seed}: run {run} ended (exit code {app.proc.returncode}) at {describe(at)}, "
                        f"before its kill point {describe(target)}: {app.tail()}"
                    )
                if time.monotonic() > deadline:
                    app.kill()
                    missing = [str(p) for p in waits if not p.exists()]
                    raise AssertionError(
                        f"seed {seed}: run {run} did not reach {describe(target)} (at {describe(at)}; stalls "
                        f"not reached: {missing}): {app.tail()}"
                    )
                time.sleep(POLL_S)
            ended = app.proc.poll() is not None
            app.kill()
            at = position(config, client, partitions)  # where the kill landed (nothing moves any more)
            landed.append(
                f"run {run} ({time.monotonic() - started:.0f} s): aimed at {describe(target)}, landed at {describe(at)}"
            )
            if ended or at >= position_at_end(files):
                raise AssertionError(
                    f"seed {seed}: run {run}, aimed at {describe(target)}, ended before its kill "
                    f"({'exited' if ended else 'at ' + describe(at)}); kills: {landed}"
                )
    return landed


def run_with_kills(
    config: dict[str, Any], workdir: Path, kills: int, files: int, seed: int
) -> tuple[list[str], StreamApp]:
    """:func:`kill_runs`, then one more run in a driver of its own to the end; where each kill landed, and the
    final run (exited)."""
    landed = kill_runs(config, workdir, kills, files, seed)
    final = StreamApp(config, workdir, "final")
    final.wait_exit()
    return landed, final
