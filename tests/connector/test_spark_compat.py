"""The PySpark-dependent pieces (:mod:`spark_kafka_log.common.spark_compat`): the pushdown probe and the worker-interpreter check.

The daemon-on reads run in the suite's session (the daemon is Spark's default, and the session's). The daemon-off
reads and the bare-interpreter check need a Spark application of their own (``spark.python.use.daemon`` and
``PYSPARK_PYTHON`` are fixed when a SparkContext starts): they are two of the checks that share one driver in
``test_checks_in_own_spark_app.py``.
"""

from __future__ import annotations

import importlib.machinery
import logging
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import WorkerPythonError
from spark_kafka_log.common import spark_compat
from tests.connector.checks_in_own_spark_app import check_off_and_on, read_off_and_on
from tests.connector.kafka_peer import produce_keys

ROOT = Path(__file__).resolve().parents[2]


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def test_installed_pyspark_is_the_version_the_probe_was_checked_on() -> None:
    import pyspark

    lo, hi = spark_compat.CHECKED_PYSPARK
    installed = _version_tuple(pyspark.__version__)
    assert lo <= installed < hi, (
        f"PySpark {pyspark.__version__} is outside the range spark_kafka_log/common/spark_compat.py was checked on "
        f"({lo} <= v < {hi}): re-check the pushdown probe against pyspark/sql/worker/plan_data_source_read.py and "
        "data_source_pushdown_filters.py of this version (the module and local-variable names it relies on), "
        "re-check the worker-interpreter rule in pyspark/core/context.py, then update CHECKED_PYSPARK"
    )


def _call_reader_as(module: str, local_value: object, *, as_main: bool) -> bool | None:
    """Run the probe from a frame that looks like PySpark's planner module ``module`` (imported or ``-m``)."""
    spec = importlib.machinery.ModuleSpec(module, None)
    scope: dict[str, Any] = {
        "__name__": "__main__" if as_main else module,
        "__spec__": spec,
        "probe": spark_compat.pushdown_enabled_in_planner,
    }
    exec("def _main(enable_pushdown):\n    return probe()\n", scope)
    result: bool | None = scope["_main"](local_value)
    return result


@pytest.mark.parametrize("as_main", [False, True], ids=["daemon-import", "python-m"])
@pytest.mark.parametrize("enabled", [False, True])
def test_probe_reads_the_planner_local_imported_and_run_as_main(as_main: bool, enabled: bool) -> None:
    assert _call_reader_as("pyspark.sql.worker.plan_data_source_read", enabled, as_main=as_main) is enabled


def test_probe_knows_the_pushdown_worker_means_enabled() -> None:
    assert _call_reader_as("pyspark.sql.worker.data_source_pushdown_filters", None, as_main=True) is True


def test_undecided_probe_takes_the_reader_without_pushdown_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from spark_kafka_log.read.reader import PylogPushdownReader, create_reader

    monkeypatch.setattr(spark_compat, "_warned_undecided", False)
    assert spark_compat.pushdown_enabled_in_planner() is None  # called from a test, not from PySpark
    with caplog.at_level(logging.WARNING, logger="spark_kafka_log.spark_compat"):
        readers = [create_reader({"subscribe": "t"}) for _ in range(3)]
    assert not any(isinstance(r, PylogPushdownReader) for r in readers)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "pushdown is skipped" in warnings[0].getMessage()
    assert "spark.sql.python.filterPushdown.enabled" in warnings[0].getMessage()


# ------------------------------------------------------------------------------ reads, daemon on and off


def _produced(broker: str) -> tuple[str, dict[bytes, int], int]:
    """A fresh topic of 40 keyed records: (its name, partition per key, records in partition 0)."""
    topic = f"compat-{uuid.uuid4().hex[:8]}"
    placed = produce_keys(broker, topic, [f"k{i}".encode() for i in range(40)])
    in_p0 = sum(1 for p in placed.values() if p == 0)
    assert in_p0 > 2
    return topic, placed, in_p0


def test_reads_with_pushdown_on_and_off_with_the_worker_daemon_on(
    spark: Any, broker: str, tmp_path: Path
) -> None:
    """The suite's session runs the Python workers through the daemon (Spark's default), as a new app would."""
    assert spark.sparkContext.getConf().get("spark.python.use.daemon", "true") == "true"
    topic, placed, in_p0 = _produced(broker)
    check_off_and_on(read_off_and_on(spark, broker, topic, str(tmp_path)), placed, in_p0)


# ------------------------------------------------------------------------------ worker interpreter


class _FakeContext:
    def __init__(self, master: str, python: str) -> None:
        self.master = master
        self.pythonExec = python


class _FakeSparkSession:
    def __init__(self, master: str, python: str) -> None:
        self.sparkContext = _FakeContext(master, python)


def test_the_suites_worker_interpreter_passes_the_check() -> None:
    spark_compat.check_worker_python(_FakeSparkSession("local[2]", sys.executable))


def test_a_non_local_master_is_not_guessed() -> None:
    spark_compat.check_worker_python(_FakeSparkSession("spark://elsewhere:7077", "/no/such/python"))


def test_a_missing_interpreter_fails_naming_it_and_the_fix() -> None:
    with pytest.raises(WorkerPythonError, match=r"'/no/such/python'.*export PYSPARK_PYTHON="):
        spark_compat.check_worker_python(_FakeSparkSession("local[*]", "/no/such/python"))
