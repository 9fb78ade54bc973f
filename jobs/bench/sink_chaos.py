"""Kill-and-restart runs of a streaming query into pylog: the driver SIGKILLed at random points, restarted from the
same checkpoint, the topic judged by a read_committed confluent-kafka consumer.

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

    def wait_started(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "started" not in self.lines():
            if self.proc.poll() is not None:
                raise AssertionError(f"driver exited {self.proc.returncode} before starting: {self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"driver did not start: {self.tail()}")
            time.sleep(0.1)

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


def judge(bootstrap: str, topic: str, partitions: int, total: int, timeout_s: float = 90) -> ChaosOutcome:
    """Read ``topic`` to its end with read_committed (confluent-kafka) and compare with rows ``0..total-1``."""
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
        out_of_order=sorted(k.decode() for k, v in per_key.items() if v != sorted(v)),
    )


def _committed(checkpoint: str | Path) -> int:
    """How many micro-batches the sink log shows committed (entries are replaced by rename: never half-read)."""
    return sum(doc["status"] == "committed" for doc in sink_entries(checkpoint))


def kill_runs(config: dict[str, Any], workdir: Path, kills: int, max_delay_s: float, seed: int) -> list[str]:
    """Start the query ``kills`` times, each in a driver of its own, and SIGKILL each run at a random point; where
    each kill landed (per the sink log).

    A run is killed after it committed a random number (0-2) of further micro-batches and then a random delay of
    up to ``max_delay_s`` (about one micro-batch), so the kills fall at random phases of random micro-batches
    (starting up, tasks running, committing) while every run makes progress. Seeded: the same seed picks the
    same numbers (where they land still depends on timing)."""
    rng = random.Random(seed)
    landed = []
    for run in range(kills):
        app = StreamApp(config, workdir, f"run{run}")
        app.wait_started()
        target = _committed(config["checkpoint"]) + rng.randint(0, 2)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while _committed(config["checkpoint"]) < target and app.proc.poll() is None:
            if time.monotonic() > deadline:
                app.kill()
                raise AssertionError(f"run {run} made no progress: {app.tail()}")
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, max_delay_s))
        finished = app.proc.poll() is not None
        app.kill()
        entries = sink_entries(config["checkpoint"])
        newest = entries[-1] if entries else None
        landed.append(
            "after the end"
            if finished
            else f"after batch {newest['batchId']} {newest['status']}"
            if newest
            else "before batch 0 committed"
        )
    return landed


def run_with_kills(
    config: dict[str, Any], workdir: Path, kills: int, max_delay_s: float, seed: int
) -> tuple[list[str], StreamApp]:
    """:func:`kill_runs`, then one more run in a driver of its own to the end; where each kill landed, and the
    final run (exited)."""
    landed = kill_runs(config, workdir, kills, max_delay_s, seed)
    final = StreamApp(config, workdir, "final")
    final.wait_exit()
    return landed, final
