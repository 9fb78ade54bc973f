"""What importing the connector costs a fresh process: every Spark Python worker that plans a ``format("pylog")``
query (data source lookup, schema, filter pushdown, partition planning: a process each when the worker daemon is
off, e.g. ``spark.python.use.daemon=false``) and every driver imports ``spark_kafka_log`` before it does any work,
so what that import pulls in is paid per process. pandas (about a quarter of a second of CPU) is not needed until a
pyarrow array is built; pyarrow's pandas shim imports it on the first ``pa.array``/``pa.scalar``, so no module of
the connector or of the record codec may build one at import time (``record_codec.encode`` builds its empty
separator on first use).
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Modules a bare ``import spark_kafka_log`` must not load.
NOT_AT_IMPORT = ("pandas",)


def test_importing_the_connector_does_not_import_pandas() -> None:
    code = (
        "import json, sys\n"
        "import spark_kafka_log, pyspark_pylog\n"
        f"print(json.dumps([m for m in {list(NOT_AT_IMPORT)!r} if m in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == [], (
        f"`import spark_kafka_log` loaded {loaded}: build pyarrow values on first use instead"
    )
