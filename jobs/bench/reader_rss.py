"""Peak memory of a read task outside Spark: the same code a read task runs over N rows of one partition.

Not a benchmark section (its figure is a memory bound, not a speed): it starts an embedded broker in a
temporary data directory, writes ``--rows`` rows of 16-byte keys and 100-byte random values to a
one-partition topic with the writer task's own code (:func:`spark_kafka_log.write.writer.write_task`, fed the rows
while they are made, so this process never holds them all), then reads the whole partition with
:func:`spark_kafka_log.read.read_task.read_range` -- the direct segment scan, then Fetch over TCP -- dropping each
Arrow batch as Spark's ``noop`` sink would. It prints the rows read and the process's peak resident set
(``VmHWM`` of ``/proc/self/status``) after the write and after each read, and the broker's. Compare a run of
N rows with one of 10 x N (each run is a fresh process with its own broker, since the peak only grows): a
reader that holds a chunk at a time stays flat; one that gathers the partition grows tenfold.

Run: ``python -m jobs.bench.reader_rss --rows 200000`` and ``--rows 2000000``.
"""

from __future__ import annotations

import argparse
import uuid

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from jobs.bench.common import embedded_broker
    from jobs.bench.writer_profile import peak_rss_mib

    parser = argparse.ArgumentParser(prog="python -m jobs.bench.reader_rss", description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args(argv)

    with embedded_broker("pylog-reader-rss-") as broker:
        topic = f"rss-{uuid.uuid4().hex[:8]}"
        records, _ = broker.write(topic, args.rows, compressible=False)
        print(f"rows={records:,} written; peak RSS after the write: {peak_rss_mib():.0f} MiB")
        for transport in ("local", "fetch"):
            rows = broker.reader(topic, transport)(records)
            print(f"read {transport}: rows={rows:,}; peak RSS {peak_rss_mib():.0f} MiB")
        print(f"broker peak RSS {peak_rss_mib(broker.pid):.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
