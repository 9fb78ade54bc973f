"""The exactly-once streaming sink across query restarts: a real Spark driver of its own (a subprocess,
``jobs/bench/sink_app.py``) SIGKILLed with everything it started, restarted from the same checkpoint, and the
topic judged afterwards by a read_committed confluent-kafka consumer (:mod:`jobs.bench.sink_chaos`: every row
exactly once, each key's rows in input order). The full form (20 micro-batches, 6 kills) is the benchmark
section ``sink``.

What costs here is starting drivers of their own (a JVM each, 15-40 s): only the runs that are SIGKILLed, and
one restart that must show its driver log, get one; the other restarts run the same query
(:func:`jobs.bench.sink_app.start_query`) from the same checkpoint in the suite's Spark session, which is a real
restart too (the checkpoint and the sink log are files; the broker holds the transactions). The module's
killed drivers run in one fixture (:func:`killed_drivers`): the first of the random-kill run's drivers also runs
the two mid-commit tests' queries to their stalls, so four drivers of their own serve the three tests (the
three kills and the restart whose log a test reads).
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.launch import create_topic
from jobs.bench.sink_app import start_query
from jobs.bench.sink_chaos import (
    ChaosOutcome,
    StreamApp,
    input_order,
    judge,
    kill_runs,
    sink_entries,
    write_input,
)

# slow: the module starts four Spark drivers of its own (20-40 s each on a busy machine): KILLS (the first also
# runs the mid-commit queries to their stalls) and the restart whose driver log a test reads.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PARTITIONS = 3
#: The bounded form of the random-kill run: input files (one micro-batch each), rows per file, kills.
FILES, ROWS, KILLS = 6, 300, 3
#: Its full length (the benchmark section ``sink``'s chaos run), in ``bash jobs/dev.sh soak``.
SOAK_FILES, SOAK_ROWS, SOAK_KILLS = 20, 500, 6


def _config(broker: str, work: Path) -> dict[str, Any]:
    """A topic, an input folder and a checkpoint under ``work`` for one query: the config ``sink_app`` takes."""
    topic = f"xo-{uuid.uuid4().hex[:10]}"
    create_topic(broker, topic, partitions=PARTITIONS)
    (work / "in").mkdir(parents=True)
    return {
        "bootstrap": broker,
        "topic": topic,
        "source": str(work / "in"),
        "checkpoint": str(work / "checkpoint"),
        # Restarts of a driver take 30-60 s on a busy machine: a prepared micro-batch must outlive them (the
        # broker aborts transactions open longer than this; that case has a test of its own).
        "options": {"pylog.dataDir": str(work / "data"), "kafka.transaction.timeout.ms": "600000"},
    }


def _with(config: dict[str, Any], **options: str) -> dict[str, Any]:
    return {**config, "options": {**config["options"], **options}}


def _run_in_session(spark: Any, config: dict[str, Any]) -> None:
    """Restart the query of ``config`` in the suite's Spark session and run it to the end (raises its failure)."""
    query = start_query(spark, config)
    try:
        assert query.awaitTermination(300), "the restarted query did not finish in 300 s"
    finally:
        query.stop()


def _finish_and_judge(
    spark: Any,
    stream: dict[str, Any],
    total: int,
    seed: int,
    landed: list[str],
    rows_per_file: int,
    judge_with: Callable[..., ChaosOutcome] = judge,
) -> None:
    """The last restart of a random-kill run, to the end in this session, then the judges: ``judge_with`` reads
    the topic with read_committed against rows ``0..total-1`` (confluent-kafka's consumer here; Kafka's Java
    consumer in the Apache Kafka peer module), and the sink log must hold every micro-batch, committed."""
    print(f"seed {seed}; the kills landed {landed}")  # shown with -s
    try:
        _run_in_session(spark, stream)
    except Exception as e:
        raise AssertionError(f"seed {seed}, kills landed {landed}: the last restart failed: {e}") from e
    order = input_order(stream["checkpoint"], rows_per_file)
    outcome = judge_with(stream["bootstrap"], stream["topic"], PARTITIONS, total, order_key=order)
    assert outcome.exact, f"seed {seed}, kills landed {landed}: {outcome}"
    # Every micro-batch is in the sink log, committed. (Spark's file source may put two files into one
    # micro-batch after a restart, so the count of micro-batches is not checked.)
    entries = sink_entries(stream["checkpoint"])
    assert [e["batchId"] for e in entries] == list(range(len(entries))), (seed, landed)
    assert all(e["status"] == "committed" for e in entries) and sum(e["records"] for e in entries) == total


def _seed() -> int:
    return int(os.environ.get("PYLOG_TEST_SEED", random.randrange(2**31)))


@pytest.fixture(scope="module")
def killed_drivers(broker: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The module's killed drivers, KILLS of them: the bounded random-kill run (``"random"``: its config,
    ``total`` rows, ``seed`` and where the kills ``landed``; each run SIGKILLed at a seeded step of the
    micro-batches, inside the run, checked there; the runs after the first are restarts in a fresh process).

    Its first driver also runs two queries, each stopped for good in micro-batch 0's ``commit()`` once the
    sink-log entry is ``prepared`` (``pylog.test.stallCommitAfterPrepared``), and is SIGKILLed only once both
    stopped there (they start first, the random-kill query once both stalled, so its kill lands as aimed):

    * ``"finish"``: 2 files of 200 rows, ONE of micro-batch 0's two transactions committed before the stop;
    * ``"aborted"``: 1 file of 200 rows, none committed.

    The queries have their own checkpoints, so their own query ids and transactional ids: each test continues
    one of them without touching the others' transactions. Configs without the stall option."""
    work = tmp_path_factory.mktemp("killed-drivers")
    configs = {name: _config(broker, work / name) for name in ("finish", "aborted", "random")}
    write_input(configs["finish"]["source"], 2, 200)
    write_input(configs["aborted"]["source"], 1, 200)
    total = write_input(configs["random"]["source"], FILES, ROWS)
    seed = _seed()
    landed = kill_runs(
        configs["random"],
        work,
        kills=KILLS,
        files=FILES,
        seed=seed,
        alongside=[
            _with(configs["finish"], **{"pylog.test.stallCommitAfterPrepared": "1"}),
            _with(configs["aborted"], **{"pylog.test.stallCommitAfterPrepared": "0"}),
        ],
        stalled=[
            Path(configs[name]["checkpoint"], "pylog-sink", "stalled-0.test")
            for name in ("finish", "aborted")
        ],
    )
    return {**configs, "total": total, "seed": seed, "landed": landed}


def test_driver_sigkilled_at_random_points_then_restarted_writes_every_row_once(
    spark: Any, killed_drivers: dict[str, Any]
) -> None:
    """The bounded form: FILES micro-batches, KILLS kills (the fixture's), the last restart in this session."""
    stream = killed_drivers["random"]
    _finish_and_judge(
        spark, stream, killed_drivers["total"], killed_drivers["seed"], killed_drivers["landed"], ROWS
    )


@pytest.mark.soak
def test_driver_sigkilled_at_random_points_then_restarted_writes_every_row_once_soak(
    spark: Any, broker: str, tmp_path: Path
) -> None:
    """The full length (the benchmark section ``sink``'s chaos run), in ``bash jobs/dev.sh soak``."""
    stream = _config(broker, tmp_path)
    seed = _seed()
    total = write_input(stream["source"], SOAK_FILES, SOAK_ROWS)
    landed = kill_runs(stream, tmp_path, kills=SOAK_KILLS, files=SOAK_FILES, seed=seed)
    _finish_and_judge(spark, stream, total, seed, landed, SOAK_ROWS)


def test_driver_killed_between_prepared_and_committed_restart_finishes_the_commit(
    killed_drivers: dict[str, Any], tmp_path: Path
) -> None:
    stream = killed_drivers["finish"]
    [entry] = sink_entries(stream["checkpoint"])
    assert entry["status"] == "prepared" and len(entry["transactions"]) == 2, entry
    # Half of it is visible now: the restart (a fresh driver, whose log we read) must finish the other half and
    # not write micro-batch 0 again.
    second = StreamApp(stream, tmp_path, "second")
    assert second.wait_exit() == 0, second.tail()
    outcome = judge(stream["bootstrap"], stream["topic"], PARTITIONS, 400)
    assert outcome.exact, outcome
    entries = sink_entries(stream["checkpoint"])
    assert [(e["batchId"], e["status"]) for e in entries] == [(0, "committed"), (1, "committed")]
    log = second.err.read_text()
    assert "pylog stream batch 0: finished the commit an earlier run of the query left prepared" in log
    assert "pylog stream batch 0 was already committed" in log


def test_prepared_batch_whose_transactions_were_aborted_fails_naming_it(
    spark: Any, killed_drivers: dict[str, Any]
) -> None:
    stream = killed_drivers["aborted"]
    [entry] = sink_entries(stream["checkpoint"])
    assert entry["status"] == "prepared" and len(entry["transactions"]) == 2, entry
    # While the query is down another producer takes the transactional ids: the coordinator aborts the
    # prepared transactions (as it does when transaction.timeout.ms runs out).
    with KafkaClient(stream["bootstrap"]) as client:
        for txn in entry["transactions"]:
            client.transactions.init_producer_id(txn["transactionalId"], transaction_timeout_ms=60000)
    # The restart, in this session: the query fails (as the user sees it: the StreamingQueryException).
    with pytest.raises(Exception) as failed:
        _run_in_session(spark, stream)
    failure = " ".join(str(failed.value).split())
    assert "micro-batch 0 was prepared by an earlier run of this query" in failure, failure
    assert f"delete {Path(stream['checkpoint'], 'pylog-sink', '0.json')}" in failure, failure
    # Nothing of the micro-batch is visible, and its entry still says prepared (no silent skip).
    assert judge(stream["bootstrap"], stream["topic"], PARTITIONS, 200).records == 0
    assert [e["status"] for e in sink_entries(stream["checkpoint"])] == ["prepared"]
