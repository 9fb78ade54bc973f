"""Writes whose write stage Spark re-attempts after a FetchFailed, end to end: a Spark driver of its own
(:mod:`tests.connector.rerun_in_own_spark_app`, which needs a private ``spark.local.dir``: its fault deletes the
shuffle files there), the module's real broker, and confluent-kafka read_committed / read_uncommitted consumers
as the judges. One driver run covers the transactional and the idempotent write (the JVM starts once).

What happens in the run (see the app's docstring): the first attempt of Spark partition 0 has 3 requests
acknowledged, loses the map output and its Python worker dies (the test-only
``pylog.test.loseShuffleAfterRequests``), leaving its transaction open; its retry hits FetchFailed; the map stage runs again and the write stage is
re-attempted with attempt numbers starting at 0 again, while partition 1's attempt of the old stage attempt may
still run as a zombie next to its copy in the new one.

Speculation is not covered here because Spark runs no speculative copy on one host: in local mode the
scheduler never starts its speculation thread, and a copy never goes to a host where an attempt of the task
runs (all executors of local-cluster mode share the host). Concurrent attempts of one partition are driven at
the task level instead (test_writer_reruns.py, test_writer_transactions_tasks.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from broker_runtime.launch.process import create_topic
from tests.connector.kafka_peer import consume_to_end

pytestmark = [pytest.mark.timeout(600)]

ROWS = 10_000


def test_a_stage_retry_after_a_fetch_failure_writes_every_row_exactly_once(
    broker: str, tmp_path: Path
) -> None:
    topics = {"transactional": f"sr-tx-{uuid.uuid4().hex[:8]}", "idempotent": f"sr-id-{uuid.uuid4().hex[:8]}"}
    for topic in topics.values():
        create_topic(broker, topic, 2)
    script = Path(__file__).with_name("rerun_in_own_spark_app.py")
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            broker,
            str(ROWS),
            str(tmp_path),
            *(f"{m}={t}" for m, t in topics.items()),
        ],
        capture_output=True,
        text=True,
        timeout=540,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for mode, topic in topics.items():
        run = report[mode]
        assert run["error"] is None, (mode, run)
        assert run["faulted"] == 1, (mode, run)  # the map output was lost once: the stage was retried
        values = [m.value for m in consume_to_end(broker, topic, 2, "read_committed")]
        assert len(values) == ROWS and len(set(values)) == ROWS, (mode, len(values), len(set(values)))
    # The crashed attempt had written (its transaction was aborted by the fence): read_uncommitted sees more.
    everything = consume_to_end(broker, topics["transactional"], 2, "read_uncommitted")
    assert len(everything) > ROWS
