"""The exactly-once streaming sink across query restarts: a real Spark driver of its own (a subprocess,
``jobs/bench/sink_app.py``) SIGKILLed with everything it started, restarted from the same checkpoint, and the
topic judged afterwards by a read_committed confluent-kafka consumer (:mod:`jobs.bench.sink_chaos`: every row
exactly once, each key's rows in input order). The full form (20 micro-batches) is the benchmark section
``stream``.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.launch import create_topic
from jobs.bench.sink_chaos import StreamApp, judge, run_with_kills, sink_entries, write_input

# slow: each test starts a Spark driver of its own two or four times (20-40 s each on a busy machine).
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

PARTITIONS = 3


@pytest.fixture
def stream(broker: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A topic, an input folder and a checkpoint for one query: the config ``sink_app`` takes."""
    topic = f"xo-{uuid.uuid4().hex[:10]}"
    create_topic(broker, topic, partitions=PARTITIONS)
    (tmp_path / "in").mkdir()
    yield {
        "bootstrap": broker,
        "topic": topic,
        "source": str(tmp_path / "in"),
        "checkpoint": str(tmp_path / "checkpoint"),
        # Restarts of a driver take 30-60 s on a busy machine: a prepared micro-batch must outlive them (the
        # broker aborts transactions open longer than this; that case has a test of its own).
        "options": {"pylog.dataDir": str(tmp_path / "data"), "kafka.transaction.timeout.ms": "600000"},
    }


def _with(config: dict[str, Any], **options: str) -> dict[str, Any]:
    return {**config, "options": {**config["options"], **options}}


def test_driver_sigkilled_at_random_points_then_restarted_writes_every_row_once(
    stream: dict[str, Any], tmp_path: Path
) -> None:
    files, rows = 6, 300
    seed = int(os.environ.get("PYLOG_TEST_SEED", random.randrange(2**31)))
    total = write_input(stream["source"], files, rows)
    landed, final = run_with_kills(stream, tmp_path, kills=3, max_delay_s=4.0, seed=seed)
    print(f"seed {seed}; the kills landed {landed}")  # shown with -s
    assert final.proc.returncode == 0, final.tail()
    outcome = judge(stream["bootstrap"], stream["topic"], PARTITIONS, total)
    assert outcome.exact, f"seed {seed}, kills landed {landed}: {outcome}"
    # Every micro-batch is in the sink log, committed. (Spark's file source may put two files into one
    # micro-batch after a restart, so the count of micro-batches is not checked.)
    entries = sink_entries(stream["checkpoint"])
    assert [e["batchId"] for e in entries] == list(range(len(entries))), landed
    assert all(e["status"] == "committed" for e in entries) and sum(e["records"] for e in entries) == total


def test_driver_killed_between_prepared_and_committed_restart_finishes_the_commit(
    stream: dict[str, Any], tmp_path: Path
) -> None:
    # Micro-batch 0 is written `prepared`, ONE of its two transactions committed, then the driver dies.
    total = write_input(stream["source"], 2, 200)
    first = StreamApp(_with(stream, **{"pylog.test.stallCommitAfterPrepared": "1"}), tmp_path, "first")
    first.wait_for(Path(stream["checkpoint"], "pylog-sink", "stalled-0.test"))
    first.kill()
    [entry] = sink_entries(stream["checkpoint"])
    assert entry["status"] == "prepared" and len(entry["transactions"]) == 2, entry
    # Half of it is visible now: the restart must finish the other half and not write micro-batch 0 again.
    second = StreamApp(stream, tmp_path, "second")
    assert second.wait_exit() == 0, second.tail()
    outcome = judge(stream["bootstrap"], stream["topic"], PARTITIONS, total)
    assert outcome.exact, outcome
    entries = sink_entries(stream["checkpoint"])
    assert [(e["batchId"], e["status"]) for e in entries] == [(0, "committed"), (1, "committed")]
    log = second.err.read_text()
    assert "pylog stream batch 0: finished the commit an earlier run of the query left prepared" in log
    assert "pylog stream batch 0 was already committed" in log


def test_prepared_batch_whose_transactions_were_aborted_fails_naming_it(
    stream: dict[str, Any], tmp_path: Path
) -> None:
    write_input(stream["source"], 1, 200)
    first = StreamApp(_with(stream, **{"pylog.test.stallCommitAfterPrepared": "0"}), tmp_path, "first")
    first.wait_for(Path(stream["checkpoint"], "pylog-sink", "stalled-0.test"))
    first.kill()
    [entry] = sink_entries(stream["checkpoint"])
    # While the query is down another producer takes the transactional ids: the coordinator aborts the
    # prepared transactions (as it does when transaction.timeout.ms runs out).
    with KafkaClient(stream["bootstrap"]) as client:
        for txn in entry["transactions"]:
            client.init_producer_id(txn["transactionalId"], transaction_timeout_ms=60000)
    second = StreamApp(stream, tmp_path, "second")
    assert second.wait_exit() == 3, second.tail()
    [failure] = [line for line in second.lines() if line.startswith("failed:")]
    assert "micro-batch 0 was prepared by an earlier run of this query" in failure, failure
    assert f"delete {Path(stream['checkpoint'], 'pylog-sink', '0.json')}" in failure, failure
    # Nothing of the micro-batch is visible, and its entry still says prepared (no silent skip).
    assert judge(stream["bootstrap"], stream["topic"], PARTITIONS, 200).records == 0
    assert [e["status"] for e in sink_entries(stream["checkpoint"])] == ["prepared"]
