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
import os
import shutil
import tempfile
import uuid

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from broker_runtime.client import KafkaClient
    from broker_runtime.launch import embedded_broker_status, ensure_embedded_broker, stop_embedded_broker
    from jobs.bench.writer_profile import iter_arrow_rows, peak_rss_mib
    from spark_kafka_log.common.reader_options import parse_reader_options
    from spark_kafka_log.common.schema import InputLayout, arrow_schema, reader_schema
    from spark_kafka_log.common.writer_options import parse_writer_options
    from spark_kafka_log.read.input_partition import PylogInputPartition
    from spark_kafka_log.read.read_task import read_range
    from spark_kafka_log.write.task_state import TaskIdentity, prepare_write_dir
    from spark_kafka_log.write.writer import write_task

    parser = argparse.ArgumentParser(prog="python -m jobs.bench.reader_rss", description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args(argv)

    work = tempfile.mkdtemp(prefix="pylog-reader-rss-")
    data_dir = os.path.join(work, "data")
    try:
        bootstrap = ensure_embedded_broker(data_dir)
        status = embedded_broker_status(data_dir)
        assert status is not None
        topic = f"rss-{uuid.uuid4().hex[:8]}"
        with KafkaClient(bootstrap) as client:
            client.admin.create_topics({topic: (1, 1)})
        options = parse_writer_options({"kafka.bootstrap.servers": bootstrap, "topic": topic})
        identity = TaskIdentity(f"write-{uuid.uuid4().hex}", 0, 0)
        prepare_write_dir(options.producer_state_dir, identity.write_id)
        layout = InputLayout(value="value", key="key")
        msg = write_task(options, layout, bootstrap, identity, iter_arrow_rows(args.rows, False))
        print(f"rows={msg.records:,} written; peak RSS after the write: {peak_rss_mib():.0f} MiB")
        schema = arrow_schema(reader_schema(False))
        log_dirs = (str(status["log_dir"]),)
        for transport in ("local", "fetch"):
            reader = parse_reader_options(
                {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "pylog.transport": transport}
            )
            part = PylogInputPartition(topic, 0, 0, msg.records, bootstrap, log_dirs)
            rows = sum(batch.num_rows for batch in read_range(reader, part, schema))
            print(f"read {transport}: rows={rows:,}; peak RSS {peak_rss_mib():.0f} MiB")
        print(f"broker peak RSS {peak_rss_mib(int(status['pid'])):.0f} MiB")
    finally:
        stop_embedded_broker(data_dir)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
