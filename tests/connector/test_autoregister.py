"""``format("pylog")`` without ``register()``: PySpark discovers the installed ``pyspark_pylog`` module.

A fresh Python process starts its own SparkSession, writes and reads through ``format("pylog")`` and never
imports ``spark_kafka_log`` itself: that end-to-end check is one of the checks sharing one driver in
``test_checks_in_own_spark_app.py``. The test process's install is the development (editable) install, so this
checks the discovery path of ``pip install -e`` plus the ``.pth`` line the project's setup writes; the wheel
layout (a top-level ``pyspark_pylog``) is checked by listing what a regular install would put on ``sys.path``.
"""

from __future__ import annotations

import pkgutil


def test_discovery_finds_the_pylog_module() -> None:
    found = {m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_")}
    assert "pyspark_pylog" in found, (
        "PySpark's lookup (pkgutil.iter_modules over sys.path) would not find pylog"
    )
    import pyspark_pylog
    from pyspark.sql.datasource import DataSource

    assert issubclass(pyspark_pylog.DefaultSource, DataSource)
    assert pyspark_pylog.DefaultSource.name() == "pylog"
