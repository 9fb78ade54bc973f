"""The checks that need a Spark application of their own and kill nothing, run in ONE driver process
(:mod:`tests.connector.checks_in_own_spark_app`: one JVM, a SparkContext of its own settings per check, in an
order that is part of what they check) against the module's real broker, then judged here, one test per check:

* a new session writes and reads through ``format("pylog")`` without ``register()`` (PySpark's discovery of the
  installed ``pyspark_pylog``; the module-level half is ``test_autoregister.py``);
* reads with filter pushdown off and on with the Python worker daemon off (``spark.python.use.daemon`` is fixed
  when a SparkContext starts; the daemon-on case runs in the suite's session, ``test_spark_compat.py``);
* writes whose write stage Spark re-attempts after a FetchFailed, transactional and idempotent, judged by
  confluent-kafka read_committed / read_uncommitted consumers (needs a private ``spark.local.dir``: the fault
  deletes the shuffle files there). The first attempt of Spark partition 0 has 3 requests acknowledged, loses
  the map output and its Python worker dies (the test-only ``pylog.test.loseShuffleAfterRequests``), leaving its
  transaction open; its retry hits FetchFailed; the map stage runs again and the write stage is re-attempted
  with attempt numbers starting at 0 again, while partition 1's attempt of the old stage attempt may still run
  as a zombie next to its copy in the new one. Speculation is not covered here because Spark runs no
  speculative copy on one host: in local mode the scheduler never starts its speculation thread, and a copy
  never goes to a host where an attempt of the task runs (all executors of local-cluster mode share the host).
  Concurrent attempts of one partition are driven at the task level instead (test_writer_reruns.py,
  test_writer_transactions_tasks.py);
* ``register()`` with a worker interpreter that cannot import pylog fails with one clear line.

The app runs once, in the module fixture :func:`checks`; a check that raised is reported as ``{"error": ...}``
and fails its own test only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.launch.process import create_topic
from tests.connector.checks_in_own_spark_app import check_off_and_on
from tests.connector.kafka_peer import consume_to_end, produce_keys

# The fixture runs the one app: a JVM start and four checks (60-150 s on a busy 2-core machine).
pytestmark = [pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).with_name("checks_in_own_spark_app.py")
#: Rows of each stage-retry write.
ROWS = 10_000


@pytest.fixture(scope="module")
def checks(broker: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Set up every check's topics, run the app once; the config it ran with, its ``results`` and the
    daemon-off topic's layout (``placed``: partition per key, ``in_p0``: records in partition 0)."""
    work = tmp_path_factory.mktemp("own-spark-app")
    compat_topic = f"compat-{uuid.uuid4().hex[:8]}"
    placed = produce_keys(broker, compat_topic, [f"k{i}".encode() for i in range(40)])
    in_p0 = sum(1 for p in placed.values() if p == 0)
    assert in_p0 > 2
    retry_topics = {
        "transactional": f"sr-tx-{uuid.uuid4().hex[:8]}",
        "idempotent": f"sr-id-{uuid.uuid4().hex[:8]}",
    }
    for topic in retry_topics.values():
        create_topic(broker, topic, 2)
    bare = work / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    config = {
        "bootstrap": broker,
        "workdir": str(work),
        "autoregister": {"topic": f"autoregistered-{uuid.uuid4().hex[:8]}"},
        "daemon_off": {"topic": compat_topic},
        "stage_retry": {"rows": ROWS, "topics": retry_topics},
        "bare_python": {"python": str(bare / "bin" / "python")},
    }
    # As a user's fresh process: the bare interpreter's check must not find pylog through an inherited path.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")
    }
    done = subprocess.run(
        [sys.executable, str(APP), json.dumps(config)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    results = json.loads(done.stdout.strip().splitlines()[-1])
    print(next((line for line in done.stderr.splitlines() if line.startswith("seconds per check")), ""))
    return {"config": config, "results": results, "placed": placed, "in_p0": in_p0, "stderr": done.stderr}


def _result(checks: dict[str, Any], name: str) -> dict[str, Any]:
    result: dict[str, Any] = checks["results"][name]
    assert "error" not in result, (name, result["error"], checks["stderr"][-3000:])
    return result


def test_new_session_writes_and_reads_without_register(checks: dict[str, Any]) -> None:
    assert _result(checks, "autoregister") == {"values": ["a", "b", "c"], "imported_before": False}


def test_reads_with_pushdown_on_and_off_with_the_worker_daemon_off(checks: dict[str, Any]) -> None:
    result = _result(checks, "daemon_off")
    assert result["daemon"] == "false"
    check_off_and_on(result, checks["placed"], checks["in_p0"])


def test_a_stage_retry_after_a_fetch_failure_writes_every_row_exactly_once(
    checks: dict[str, Any], broker: str
) -> None:
    report = _result(checks, "stage_retry")
    topics = checks["config"]["stage_retry"]["topics"]
    for mode, topic in topics.items():
        run = report[mode]
        assert run["error"] is None, (mode, run)
        assert run["faulted"] == 1, (mode, run)  # the map output was lost once: the stage was retried
        values = [m.value for m in consume_to_end(broker, topic, 2, "read_committed")]
        assert len(values) == ROWS and len(set(values)) == ROWS, (mode, len(values), len(set(values)))
    # The crashed attempt had written (its transaction was aborted by the fence): read_uncommitted sees more.
    everything = consume_to_end(broker, topics["transactional"], 2, "read_uncommitted")
    assert len(everything) > ROWS


def test_a_bare_worker_interpreter_fails_register_with_one_clear_line(checks: dict[str, Any]) -> None:
    line = _result(checks, "bare_python")["line"]
    bare_python = checks["config"]["bare_python"]["python"]
    assert line.startswith("ERROR WorkerPythonError: "), line
    assert bare_python in line and "cannot import spark_kafka_log" in line
    assert "export PYSPARK_PYTHON=" in line and "spark.pyspark.python=" in line
