"""The main job: keyed records through the embedded broker and back, checked end to end.

Runs on the driver only (no Spark yet): starts an embedded broker on loopback over ``$PYLOG_DATA_DIR`` (default
``./pylog-data``), partitions generated keys by murmur2 exactly as Kafka's Java client does, builds Magic-v2 batches
with the vectorized builder, produces them with acks=-1, fetches every partition back, decodes the batches with the
vectorized decoder and checks that every record came back unchanged, in order, in the partition its key hashes to.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_runtime.client import KafkaClient
from broker_runtime.embedded import embedded_broker
from broker_runtime.protocol.arrow_records import build_batches, decode_batches
from broker_runtime.protocol.compression import codec_from_name
from broker_runtime.protocol.murmur2 import partitions_for_keys


def _generate(rows: int, seed: int) -> tuple[pa.Array, pa.Array]:
    rng = np.random.default_rng(seed)
    keys = pc.binary_join_element_wise(
        "user-", pc.cast(pa.array(rng.integers(0, 10_000, rows)), pa.string()), ""
    ).cast(pa.binary())
    values = pa.array([bytes(v) for v in rng.integers(0, 256, (rows, 100), dtype=np.uint8)], pa.binary())
    return keys, values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.main", description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--compression", default="lz4", help="none, gzip, snappy, lz4 or zstd")
    args = parser.parse_args(argv)
    data_dir = Path(os.environ.get("PYLOG_DATA_DIR", "pylog-data")).resolve()
    codec = codec_from_name(args.compression)
    topic = f"main-job-{int(time.time())}"
    keys, values = _generate(args.rows, seed=7)
    target = partitions_for_keys(keys, args.partitions)

    with embedded_broker(data_dir) as bootstrap, KafkaClient(bootstrap) as client:
        print(f"embedded broker on {bootstrap}, data in {data_dir}")
        client.create_topics({topic: (args.partitions, 1)})
        started = time.perf_counter()
        sent: dict[int, tuple[pa.Array, pa.Array]] = {}
        for partition in range(args.partitions):
            rows = np.flatnonzero(target == partition)
            part_keys, part_values = keys.take(rows), values.take(rows)
            sent[partition] = (part_keys, part_values)
            batches = build_batches(part_values, part_keys, compression=codec, max_batch_bytes=1 << 20)
            leader = client.leader_for(topic, partition)
            for result in client.produce_pipelined(
                leader, ({(topic, partition): b.data} for b in batches), acks=-1, timeout_ms=30_000
            ):
                assert result is not None
                if result[(topic, partition)].error:
                    raise SystemExit(f"produce to {topic}-{partition} failed: {result[(topic, partition)]}")
        produced = time.perf_counter() - started

        ok = True
        print(f"{'partition':>9} {'records':>9} {'unchanged':>10} {'murmur2 placement':>18}")
        for partition in range(args.partitions):
            got: list[pa.RecordBatch] = []
            offset = 0
            while offset < len(sent[partition][1]):
                fetched = client.fetch({(topic, partition): offset}, partition_max_bytes=4 << 20)
                batch = decode_batches(fetched[(topic, partition)].records or b"", start_offset=offset)
                got.append(batch)
                offset += batch.num_rows
            table = pa.Table.from_batches(got)
            same = table.column("key").combine_chunks().equals(sent[partition][0]) and table.column(
                "value"
            ).combine_chunks().equals(sent[partition][1])
            placed = bool(
                np.all(
                    partitions_for_keys(table.column("key").combine_chunks(), args.partitions) == partition
                )
            )
            ok &= same and placed
            print(
                f"{partition:>9} {table.num_rows:>9} {'yes' if same else 'NO':>10} {'yes' if placed else 'NO':>18}"
            )
    print(
        f"topic {topic}: {args.rows} records produced in {produced:.2f} s "
        f"({args.rows / produced:,.0f} records/s, {args.compression}, acks=-1); "
        f"round trip {'OK' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
