"""``format("pylog")`` without ``register()``: PySpark discovers the installed ``pyspark_pylog`` module.

A fresh Python process starts its own SparkSession, writes and reads through ``format("pylog")`` and never
imports ``spark_kafka_log`` itself. The test process's install is the development (editable) install, so this
checks the discovery path of ``pip install -e`` plus the ``.pth`` line the project's setup writes; the wheel
layout (a top-level ``pyspark_pylog``) is checked by listing what a regular install would put on ``sys.path``.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path


def test_discovery_finds_the_pylog_module() -> None:
    found = {m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_")}
    assert "pyspark_pylog" in found, (
        "PySpark's lookup (pkgutil.iter_modules over sys.path) would not find pylog"
    )
    import pyspark_pylog
    from pyspark.sql.datasource import DataSource

    assert issubclass(pyspark_pylog.DefaultSource, DataSource)
    assert pyspark_pylog.DefaultSource.name() == "pylog"


def test_new_session_writes_and_reads_without_register(broker: str) -> None:
    script = Path(__file__).with_name("autoregister_in_own_spark_app.py")
    done = subprocess.run(
        [sys.executable, str(script), broker, "autoregistered"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"values": ["a", "b", "c"], "imported_before": False}
