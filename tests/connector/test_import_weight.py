"""The Python workers that plan and commit a ``write.format("pylog")`` (Spark's write planning, batch commit and
streaming-sink commit workers: a process each per driver, and one per use with the worker daemon off) import the
write path (``spark_kafka_log.write``, the record encoder) but never build a pyarrow array there. pandas, about a
third of a second of CPU of such a worker's imports, comes only with the first ``pa.array``/``pa.scalar``
(pyarrow's pandas shim), so no module of the write path may build one at import time: ``record_codec.encode``
builds its empty join separator on first use. (The read side's planning worker: ``test_planning_imports.py``.)
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Modules that importing the write path must not load.
NOT_AT_IMPORT = ("pandas",)


def test_importing_the_write_path_does_not_import_pandas() -> None:
    code = (
        "import json, sys\n"
        "import spark_kafka_log, spark_kafka_log.write.writer, spark_kafka_log.stream.stream_writer\n"
        "import broker_runtime.protocol.record_codec.encode\n"
        f"print(json.dumps([m for m in {list(NOT_AT_IMPORT)!r} if m in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == [], f"importing the write path loaded {loaded}: build pyarrow values on first use"
