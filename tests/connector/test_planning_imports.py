"""The Python worker that plans a ``readStream.format("pylog")`` query starts with the query (a per-query fixed
cost of every AvailableNow read) and imports ``spark_kafka_log.datasource`` and the stream reader: it must not
load the write path (the record encoder brings pandas through pyarrow; together about half of that worker's
import CPU), the executors' record reading, nor the broker's optional security libraries."""

from __future__ import annotations

import json
import subprocess
import sys

#: What the planning worker of a streaming read must not import (packages: their submodules too).
NOT_FOR_READING = (
    "pandas",
    "spark_kafka_log.write",
    "spark_kafka_log.stream.stream_writer",
    "broker_runtime.protocol.record_codec.encode",
    "broker_runtime.storage",  # the executors' local segment scan
    "jwt",
    "scramp",
    "cryptography",
)


def test_the_stream_reading_worker_imports_neither_the_write_path_nor_pandas() -> None:
    script = (
        "import json, sys\n"
        "import spark_kafka_log.datasource, spark_kafka_log.stream.stream_reader\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    found = sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in NOT_FOR_READING))
    assert not found, f"planning a stream read imported {found}"
