"""``pyspark_pylog``: the module PySpark's data source discovery finds, so ``format("pylog")`` works in any
SparkSession without ``spark_kafka_log.register(spark)``.

Runs on: driver (session).

How PySpark 4.3 finds Python data sources: the first time a session resolves a data source name, the JVM's
``DataSourceManager`` asks a Python worker (``pyspark.sql.worker.lookup_data_sources``) to import every
top-level module whose name starts with ``pyspark_`` (``pkgutil.iter_modules()`` over ``sys.path``) and to
register each one's ``DefaultSource`` under its ``name()``. This package is that module: it is installed as
the top-level ``pyspark_pylog`` (pyproject maps it from ``spark_kafka_log/discovery/``; the repository's top
level holds only the project's fixed layout), and it only re-exports the connector's data source.

Discovery needs a directory on ``sys.path`` that holds ``pyspark_pylog``: a regular install puts it in
site-packages; the development install (``pip install -e .`` with ``editable_mode=compat``, as the project's
setup runs it) adds ``spark_kafka_log/discovery`` to ``sys.path`` through the ``.pth`` file setuptools writes.
Importing this module imports the connector (and pyarrow), in the lookup worker only.
"""

from __future__ import annotations

from spark_kafka_log.datasource import PylogDataSource as DefaultSource

__all__ = ["DefaultSource"]
