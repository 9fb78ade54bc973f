"""Profile of the writer's task side outside Spark: the same code a write task runs, fed the same Arrow batches.

Not a benchmark section (no figures in the suite): a tool for finding where the writer's time goes. It starts
an embedded broker in a temporary data directory, builds ``--rows`` rows of 16-byte keys and 100-byte values
(``--compressible``: values from a 16-symbol alphabet with repeats, as the benchmark's hex strings; otherwise
random bytes) in Arrow batches of 10,000 rows (Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch``) and
runs :func:`spark_kafka_log.write.writer.write_task` on them under cProfile, once per ``--partitions`` value (a
topic of that many partitions, created up front). It prints the wall time, the broker process's CPU time
(``/proc/<pid>/stat`` just before and after the task: start-up not counted) per row and per MB of message bytes
(key + value, 116 B a row, 10^6 bytes per MB: the unit of the "broker" section's ingest figure, so the two
compare) and the top functions of the task by own CPU time (the profiler's clock is the process's CPU time,
so neither waiting for acknowledgements nor a loaded machine's run queue is counted as the task's work).
``--bootstrap HOST:PORT --broker-pid PID`` writes to a broker already running instead of the embedded one,
e.g. an Apache Kafka node (the bench's ``anchors`` pairs), and reads that process's CPU time.
``--broker-profile FILE`` additionally
records the broker with ``py-spy`` when it is installed (collapsed stacks, ``FILE.<partitions>.txt``).
``--rss`` makes the rows while the task writes them and prints the peak RSS of the task process and of the
broker (the memory bound: run N and 10 x N rows, each run with its own broker, and compare).

Run: ``python -m jobs.bench.writer_profile [--rows N] [--partitions 1 4] [--compressible] [--top 25]
[--option kafka.compression.type=lz4] [--bootstrap HOST:PORT --broker-pid PID]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

__all__ = ["arrow_rows", "broker_cpu_seconds", "iter_arrow_rows", "main", "peak_rss_mib"]

BATCH_ROWS = 10_000
#: Message bytes of a row (16-byte key + 100-byte value), for the broker's CPU per MB.
ROW_BYTES = 116


def arrow_rows(rows: int, compressible: bool, seed: int = 7) -> list[pa.RecordBatch]:
    """``rows`` rows of 16-byte keys and 100-byte values as Arrow batches of :data:`BATCH_ROWS` rows."""
    return list(iter_arrow_rows(rows, compressible, seed))


def iter_arrow_rows(rows: int, compressible: bool, seed: int = 7) -> Iterator[pa.RecordBatch]:
    """:func:`arrow_rows` made one batch at a time (what a Spark task receives: nothing held in advance)."""
    rng = np.random.default_rng(seed)
    for start in range(0, rows, BATCH_ROWS):
        n = min(BATCH_ROWS, rows - start)
        keys = rng.integers(0, 256, size=n * 16, dtype=np.uint8)
        if compressible:
            values = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[rng.integers(0, 16, size=n * 100)]
        else:
            values = rng.integers(0, 256, size=n * 100, dtype=np.uint8)
        key_arr = pa.Array.from_buffers(
            pa.binary(),
            n,
            [None, pa.py_buffer(np.arange(0, 16 * n + 1, 16, dtype=np.int32)), pa.py_buffer(keys)],
        )
        val_arr = pa.Array.from_buffers(
            pa.binary(),
            n,
            [None, pa.py_buffer(np.arange(0, 100 * n + 1, 100, dtype=np.int32)), pa.py_buffer(values.copy())],
        )
        yield pa.RecordBatch.from_arrays([key_arr, val_arr], ["key", "value"])


def broker_cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process ``pid`` so far (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def peak_rss_mib(pid: int | None = None) -> float:
    """Peak resident set (``VmHWM`` of ``/proc/PID/status``) in MiB; this process when ``pid`` is None."""
    with open(f"/proc/{pid or 'self'}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM line in /proc status")


def main(argv: list[str] | None = None) -> int:
    from broker_runtime.client import KafkaClient
    from broker_runtime.launch import embedded_broker_status, ensure_embedded_broker, stop_embedded_broker
    from spark_kafka_log.common.schema import InputLayout
    from spark_kafka_log.common.writer_options import parse_writer_options
    from spark_kafka_log.write.task_state import TaskIdentity
    from spark_kafka_log.write.writer import write_task

    parser = argparse.ArgumentParser(prog="python -m jobs.bench.writer_profile", description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--compressible", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-profile", action="store_true", help="time only (no cProfile overhead)")
    parser.add_argument(
        "--broker-profile", help="record the broker with py-spy (collapsed stacks) into FILE.<partitions>.txt"
    )
    parser.add_argument("--option", action="append", default=[], help="extra writer option KEY=VALUE")
    parser.add_argument("--bootstrap", help="write to this running broker instead of an embedded one")
    parser.add_argument(
        "--broker-pid", type=int, help="with --bootstrap: the broker process whose CPU is read"
    )
    parser.add_argument(
        "--rss",
        action="store_true",
        help="make the rows while writing (as a Spark task gets them) and print the peak RSS of this process "
        "and of the broker; compare runs of N and 10 x N rows (each run starts its own broker)",
    )
    args = parser.parse_args(argv)
    if (args.bootstrap is None) != (args.broker_pid is None):
        parser.error("--bootstrap and --broker-pid go together (the broker's CPU is read from /proc/PID)")

    batches = None if args.rss else arrow_rows(args.rows, args.compressible)
    work = tempfile.mkdtemp(prefix="pylog-writer-profile-")
    data_dir = os.path.join(work, "data")
    try:
        if args.bootstrap is not None:
            bootstrap, broker_pid = args.bootstrap, args.broker_pid
        else:
            bootstrap = ensure_embedded_broker(data_dir)
            status = embedded_broker_status(data_dir)
            assert status is not None
            broker_pid = int(status["pid"])
        for n_parts in args.partitions:
            topic = f"prof-{uuid.uuid4().hex[:8]}"
            with KafkaClient(bootstrap) as client:
                client.admin.create_topics({topic: (n_parts, 1)})
            extra = dict(o.split("=", 1) for o in args.option)
            options = parse_writer_options(
                {
                    "kafka.bootstrap.servers": bootstrap,
                    "topic": topic,
                    "pylog.producerStateDir": work,
                    **extra,
                }
            )
            layout = InputLayout(value="value", key="key")
            spy = None
            if args.broker_profile and shutil.which("py-spy"):
                spy = subprocess.Popen(
                    [
                        "py-spy",
                        "record",
                        "--format",
                        "raw",
                        "--nonblocking",
                        "-p",
                        str(broker_pid),
                        "-o",
                        f"{args.broker_profile}.{n_parts}.txt",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1.0)
            cpu0 = broker_cpu_seconds(broker_pid)
            t0 = time.perf_counter()
            c0 = time.process_time()
            prof = None if args.no_profile else cProfile.Profile(time.process_time)
            if prof is not None:
                prof.enable()
            identity = TaskIdentity(f"write-{uuid.uuid4().hex}", 0, 0)
            if options.enable_idempotence:
                from spark_kafka_log.write.task_state import prepare_write_dir

                prepare_write_dir(options.producer_state_dir, identity.write_id)
            rows = iter_arrow_rows(args.rows, args.compressible) if batches is None else iter(batches)
            msg = write_task(options, layout, bootstrap, identity, rows)
            if prof is not None:
                prof.disable()
            wall = time.perf_counter() - t0
            task_cpu = time.process_time() - c0
            cpu1 = broker_cpu_seconds(broker_pid)
            user, system = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
            cpu = user + system
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                spy.wait()
            per_row = 1e6 / args.rows
            print(
                f"partitions={n_parts} compressible={args.compressible} rows={msg.records:,} "
                f"bytes={msg.bytes:,} wall={wall:.2f}s ({wall * per_row:.2f} us/row) "
                f"task_cpu={task_cpu:.2f}s ({task_cpu * per_row:.2f} us/row) "
                f"broker_cpu={cpu:.2f}s ({cpu * per_row:.2f} us/row, "
                f"{cpu * 1000 / (args.rows * ROW_BYTES / 1e6):.2f} ms/MB; user {user:.2f}s, system {system:.2f}s)"
            )
            if args.rss:
                print(f"peak RSS: task {peak_rss_mib():.0f} MiB, broker {peak_rss_mib(broker_pid):.0f} MiB")
            if prof is not None:
                out = io.StringIO()
                stats = pstats.Stats(prof, stream=out)
                stats.sort_stats("tottime").print_stats(args.top)
                print(out.getvalue())
    finally:
        if args.bootstrap is None:
            stop_embedded_broker(data_dir)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
