"""Measurement helpers shared by the benchmark sections: timings of repeated runs, printable results, the
CPU time of a broker child process, and an embedded broker that the task-side tools (``reader_profile``,
``reader_rss``) fill with the writer task's own code and read back with the read task's.

A broker's CPU is read from ``/proc/<pid>/stat`` (utime + stime, clock ticks: 10 ms resolution) before and
after the measured work only, so the broker's start-up (interpreter, imports, log recovery) is not counted;
``getrusage(RUSAGE_CHILDREN)`` would count the whole child life and only after it exits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EmbeddedBroker",
    "Figure",
    "Result",
    "Timing",
    "broker_pid",
    "embedded_broker",
    "log_mb",
    "process_cpu_s",
    "spark_session",
    "timed",
    "timed_interleaved",
]


@dataclass(frozen=True)
class Figure:
    """A figure derived from repeated runs: the median and the spread (min-max) over the runs."""

    value: float
    low: float
    high: float


@dataclass(frozen=True)
class Timing:
    """Wall times in seconds of repeated runs of the same work."""

    runs: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    def rate(self, amount: float) -> Figure:
        """``amount`` per second: the median run's rate, from the slowest run's to the fastest's."""
        return Figure(amount / self.median, amount / max(self.runs), amount / min(self.runs))

    def scaled(self, factor: float) -> Figure:
        """The run time times ``factor`` (e.g. 1000 for ms, or 1/n per item)."""
        return Figure(self.median * factor, min(self.runs) * factor, max(self.runs) * factor)


def timed(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> Timing:
    """Wall times of ``repeat`` runs of ``fn()`` after ``warmup`` discarded runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return Timing(tuple(times))


def timed_interleaved(fns: list[Callable[[], object]], repeat: int = 5, warmup: int = 1) -> list[Timing]:
    """Wall times of ``fns`` run in turn (f1, f2, ..., f1, f2, ...) ``repeat`` times after ``warmup`` rounds, so
    that a drift of the machine over the runs affects each alike (for ratios measured in the same run)."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [Timing(tuple(t)) for t in times]


def _shown(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:,.2f}"
    return f"{value:.4g}"


@dataclass(frozen=True)
class Result:
    """One figure: ``value`` in ``unit``; ``target`` is the goal as text (e.g. ">= 5M/s"), ``met`` the verdict.

    ``spread`` is (min, max) over the repeated runs when ``value`` is their median (see :meth:`measured`).
    """

    section: str
    name: str
    value: float
    unit: str
    target: str = ""
    met: bool | None = None
    spread: tuple[float, float] | None = None

    @classmethod
    def measured(
        cls, section: str, name: str, figure: Figure, unit: str, target: str = "", met: bool | None = None
    ) -> Result:
        return cls(section, name, figure.value, unit, target, met, (figure.low, figure.high))

    def line(self, quick: bool = False) -> str:
        """The printed line; in quick mode no spread and no verdict (quick figures are not measurements)."""
        shown = f"{_shown(self.value):>14}"
        if not quick:  # a column of its own, blank for figures that are not medians, so units line up
            spread = "" if self.spread is None else f"({_shown(self.spread[0])}-{_shown(self.spread[1])})"
            shown += f" {spread:<27}"
        verdict = "" if self.met is None or quick else ("  [met]" if self.met else "  [NOT met]")
        target = f"  (target {self.target})" if self.target else ""
        return f"{self.section:<10} {self.name:<58} {shown} {self.unit:<10}{target}{verdict}"


def spark_session(app: str, master: str, **conf: str) -> Any:
    """The active SparkSession if there is one (left as it is), else a new one with ``master`` and ``conf``.

    A process keeps one Spark session: the Spark sections share it, and a caller's session (a test run's)
    is reused rather than replaced. The caller does not stop it; the process's exit does.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # keeps result lines whole
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def broker_pid(data_dir: str) -> int:
    """The pid of the broker child process started on ``data_dir`` (its command line names its config file)."""
    config = os.path.join(data_dir, "broker.properties")
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if b"broker_runtime" in args and config.encode() in args:
                return int(entry)
    raise RuntimeError(f"no broker process runs on {data_dir}")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log_mb(data_dir: str, topic: str) -> float:
    """MB (10^6 bytes) of ``topic``'s segment files (``.log``) under ``data_dir``."""
    total = 0
    for root, _dirs, files in os.walk(data_dir):
        if os.path.basename(root).startswith(f"{topic}-"):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(".log"))
    return total / 1e6


@dataclass(frozen=True)
class EmbeddedBroker:
    """A broker process of ``pylog-broker``'s embedded kind (:func:`embedded_broker`)."""

    bootstrap: str
    pid: int
    log_dirs: tuple[str, ...]

    def write(self, topic: str, rows: int, compressible: bool, **options: str) -> tuple[int, int]:
        """Create ``topic`` (one partition) and write ``rows`` rows of 16-byte keys and 100-byte values to it with
        the writer task's own code, fed while they are made (:func:`jobs.bench.writer_profile.iter_arrow_rows`);
        ``options`` are more writer options. Returns the task's ``(records, bytes)``."""
        from broker_runtime.client import KafkaClient
        from jobs.bench.writer_profile import iter_arrow_rows
        from spark_kafka_log.common.schema import InputLayout
        from spark_kafka_log.common.writer_options import parse_writer_options
        from spark_kafka_log.write.task_state import TaskIdentity, prepare_write_dir
        from spark_kafka_log.write.writer import write_task

        with KafkaClient(self.bootstrap) as client:
            client.admin.create_topics({topic: (1, 1)})
        parsed = parse_writer_options({"kafka.bootstrap.servers": self.bootstrap, "topic": topic, **options})
        identity = TaskIdentity(f"write-{uuid.uuid4().hex}", 0, 0)
        prepare_write_dir(parsed.producer_state_dir, identity.write_id)
        layout = InputLayout(value="value", key="key")
        msg = write_task(parsed, layout, self.bootstrap, identity, iter_arrow_rows(rows, compressible))
        return msg.records, msg.bytes

    def reader(self, topic: str, transport: str) -> Callable[[int], int]:
        """A read of partition 0 of ``topic`` with the read task's own code over ``transport`` (``local``: the
        direct segment scan, ``fetch``): called with the records it holds, it reads them all, dropping each Arrow
        batch as Spark's ``noop`` sink would, and returns the rows read. The options are parsed here, once."""
        from spark_kafka_log.common.reader_options import parse_reader_options
        from spark_kafka_log.common.schema import arrow_schema, reader_schema
        from spark_kafka_log.read.input_partition import PylogInputPartition
        from spark_kafka_log.read.read_task import read_range

        options = parse_reader_options(
            {"kafka.bootstrap.servers": self.bootstrap, "subscribe": topic, "pylog.transport": transport}
        )
        schema = arrow_schema(reader_schema(False))

        def read(records: int) -> int:
            part = PylogInputPartition(topic, 0, 0, records, self.bootstrap, self.log_dirs)
            return sum(batch.num_rows for batch in read_range(options, part, schema))

        return read


@contextlib.contextmanager
def embedded_broker(prefix: str) -> Iterator[EmbeddedBroker]:
    """An embedded broker on a data directory under a new temporary directory (named ``prefix...``), stopped and
    the directory removed on exit."""
    from broker_runtime.launch import embedded_broker_status, ensure_embedded_broker, stop_embedded_broker

    work = tempfile.mkdtemp(prefix=prefix)
    data_dir = os.path.join(work, "data")
    try:
        bootstrap = ensure_embedded_broker(data_dir)
        status = embedded_broker_status(data_dir)
        assert status is not None
        yield EmbeddedBroker(bootstrap, int(status["pid"]), (str(status["log_dir"]),))
    finally:
        stop_embedded_broker(data_dir)
        shutil.rmtree(work, ignore_errors=True)
