"""The PySpark-dependent pieces (:mod:`spark_kafka_log.spark_compat`): the pushdown probe and the worker-interpreter check.

The daemon-on reads run in the suite's session (the daemon is Spark's default, and the session's). The daemon-off
reads and the bare-interpreter check need Spark applications of their own (``spark.python.use.daemon`` and
``PYSPARK_PYTHON`` are fixed when a SparkContext starts), so they run in subprocesses.
"""

from __future__ import annotations

import importlib.machinery
import json
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import WorkerPythonError
from spark_kafka_log import spark_compat
from tests.connector.kafka_peer import produce_keys
from tests.connector.read_in_own_spark_app import read_off_and_on

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
        f"PySpark {pyspark.__version__} is outside the range spark_kafka_log/spark_compat.py was checked on "
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
    from spark_kafka_log.reader import PylogPushdownReader, create_reader

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


def _check_off_and_on(result: dict[str, Any], placed: dict[bytes, int], in_p0: int) -> None:
    assert result["off"]["rows"] == result["on"]["rows"] == in_p0 - 2
    # Off: every partition is read whole; on: only partition 0 from offset 2 (the filters were pushed).
    assert sorted(p for p, _, _ in result["off"]["ranges"]) == sorted({p for p in placed.values()})
    assert result["on"]["ranges"] == [[0, 2, in_p0]]


def test_reads_with_pushdown_on_and_off_with_the_worker_daemon_on(
    spark: Any, broker: str, tmp_path: Path
) -> None:
    """The suite's session runs the Python workers through the daemon (Spark's default), as a new app would."""
    assert spark.sparkContext.getConf().get("spark.python.use.daemon", "true") == "true"
    topic, placed, in_p0 = _produced(broker)
    _check_off_and_on(read_off_and_on(spark, broker, topic, str(tmp_path)), placed, in_p0)


@pytest.mark.timeout(300)
def test_reads_with_pushdown_on_and_off_with_the_worker_daemon_off(broker: str, tmp_path: Path) -> None:
    topic, placed, in_p0 = _produced(broker)
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("read_in_own_spark_app.py")),
            broker,
            topic,
            "false",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    _check_off_and_on(json.loads(done.stdout.strip().splitlines()[-1]), placed, in_p0)


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


@pytest.mark.timeout(300)
def test_a_bare_worker_interpreter_fails_register_with_one_clear_line(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    script = (
        "import os, sys\n"
        f"os.environ['PYSPARK_PYTHON'] = {str(bare / 'bin' / 'python')!r}\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
        "import spark_kafka_log\n"
        "try:\n"
        "    spark_kafka_log.register(spark)\n"
        "except Exception as exc:\n"
        "    print('ERROR ' + type(exc).__name__ + ': ' + str(exc))\n"
        "else:\n"
        "    print('REGISTERED')\n"
        "spark.stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("ERROR", "REGISTERED"))]
    assert lines, done.stderr[-3000:]
    line = lines[-1]
    assert line.startswith("ERROR WorkerPythonError: "), line
    assert str(bare / "bin" / "python") in line and "cannot import spark_kafka_log" in line
    assert "export PYSPARK_PYTHON=" in line and "spark.pyspark.python=" in line
