"""CPU of a read task outside Spark: the same code a read task runs, over lz4 batches of both row kinds.

Not a benchmark section (no figures in the suite): a tool for finding where the reader's time goes, the
reader's counterpart of :mod:`jobs.bench.writer_profile`. It starts an embedded broker in a temporary data
directory and writes ``--rows`` rows of 16-byte keys and 100-byte values to a one-partition topic per row kind
with the writer task's own code (:func:`spark_kafka_log.write.writer.write_task`, ``kafka.compression.type``
lz4 as the "anchors" section writes, or ``--codec``): incompressible (random bytes) and compressible (values
from a 16-symbol alphabet, as the benchmarks' hex text). It then reads each topic back ``--repeat`` times,
alternating the kinds, with :func:`spark_kafka_log.read.read_task.read_range` over Fetch (``--transport
local``: the direct segment scan), dropping each Arrow batch as Spark's ``noop`` sink would, and prints per
kind the bytes on disk, the batches and the task's CPU (``time.process_time``) and wall time per row: median
and range over the runs. ``--top N`` profiles the last run of each kind with cProfile and prints its top
functions by own time.

Run: ``python -m jobs.bench.reader_profile [--rows N] [--repeat R] [--codec lz4] [--transport fetch] [--top 20]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time
import uuid

__all__ = ["main"]

KINDS = {"incompressible": False, "compressible": True}


def main(argv: list[str] | None = None) -> int:
    from jobs.bench.common import embedded_broker

    parser = argparse.ArgumentParser(prog="python -m jobs.bench.reader_profile", description=__doc__)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--codec", default="lz4", help="kafka.compression.type of the written batches")
    parser.add_argument("--transport", choices=("fetch", "local"), default="fetch")
    parser.add_argument("--top", type=int, default=0, help="cProfile the last run of each kind: top N")
    args = parser.parse_args(argv)

    with embedded_broker("pylog-reader-profile-") as broker:
        written: dict[str, tuple[str, int, int]] = {}
        for kind, compressible in KINDS.items():
            topic = f"profile-{kind[:3]}-{uuid.uuid4().hex[:8]}"
            records, size = broker.write(
                topic, args.rows, compressible, **{"kafka.compression.type": args.codec}
            )
            written[kind] = (topic, records, size)
        readers = {kind: broker.reader(topic, args.transport) for kind, (topic, _, _) in written.items()}
        cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
        wall: dict[str, list[float]] = {kind: [] for kind in KINDS}
        profiles: dict[str, cProfile.Profile] = {}
        for run in range(args.repeat):
            for kind, (_, records, _) in written.items():
                prof = cProfile.Profile() if args.top and run == args.repeat - 1 else None
                t0, c0 = time.perf_counter(), time.process_time()
                if prof is not None:
                    prof.enable()
                rows = readers[kind](records)
                if prof is not None:
                    prof.disable()
                    profiles[kind] = prof
                cpu[kind].append(time.process_time() - c0)
                wall[kind].append(time.perf_counter() - t0)
                if rows != records:
                    raise RuntimeError(f"{kind}: read {rows} rows of the {records} written")
        for kind, (_, records, size) in written.items():
            us = [1e6 * s / records for s in cpu[kind]]
            wall_us = [1e6 * s / records for s in wall[kind]]
            print(
                f"{kind}: rows={records:,} bytes={size:,} codec={args.codec} transport={args.transport} "
                f"task CPU {statistics.median(us):.3f} us/row ({min(us):.3f}-{max(us):.3f}), "
                f"wall {statistics.median(wall_us):.3f} us/row ({min(wall_us):.3f}-{max(wall_us):.3f}), "
                f"{args.repeat} runs"
            )
            if kind in profiles:
                out = io.StringIO()
                pstats.Stats(profiles[kind], stream=out).sort_stats("tottime").print_stats(args.top)
                print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
