"""Transactional batch writes and the exactly-once streaming sink against Apache Kafka, judged by Kafka's Java
consumer with read_committed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobs.bench.sink_chaos import ChaosOutcome, kill_runs, write_input
from tests.connector import (
    test_stream_exactly_once,
    test_writer_transactional,
)
from tests.connector.on_apache_kafka.support import PEER, peer

pytestmark = pytest.mark.timeout(300)


# --------------------------------------------------------------------------------------------- transactions

test_a_job_whose_last_task_fails_for_good_leaves_nothing_visible = peer(
    test_writer_transactional.test_a_job_whose_last_task_fails_for_good_leaves_nothing_visible,
    "transactional batch write: a failed job leaves nothing visible to Kafka's read_committed consumer",
)
test_task_retries_write_every_row_exactly_once_for_read_committed = peer(
    test_writer_transactional.test_task_retries_write_every_row_exactly_once_for_read_committed,
    "transactional batch write: retried tasks, every row once for Kafka's read_committed consumer",
)


@pytest.mark.slow
@pytest.mark.compat(
    PEER,
    "exactly-once streaming sink: driver SIGKILLed and restarted, every row once for Kafka's read_committed "
    "consumer",
)
@pytest.mark.parametrize(
    ("files", "rows", "kills"),
    [
        pytest.param(4, 300, 1, id="bounded"),
        pytest.param(
            test_stream_exactly_once.FILES,
            test_stream_exactly_once.ROWS,
            test_stream_exactly_once.KILLS,
            id="soak",
            marks=pytest.mark.soak,
        ),
    ],
)
def test_driver_sigkilled_at_random_points_then_restarted_writes_every_row_once(
    spark: Any,
    broker: str,
    chaos_judge: Callable[[str, str, int, int], ChaosOutcome],
    tmp_path: Path,
    files: int,
    rows: int,
    kills: int,
) -> None:
    """test_stream_exactly_once's random-kill run against Apache Kafka (its drivers SIGKILLed at seeded steps of
    the micro-batches, inside the run; the last restart in this session), judged by Kafka's Java consumer."""
    stream = test_stream_exactly_once._config(broker, tmp_path)
    seed = test_stream_exactly_once._seed()
    total = write_input(stream["source"], files, rows)
    landed = kill_runs(stream, tmp_path, kills=kills, files=files, seed=seed)
    test_stream_exactly_once._finish_and_judge(
        spark, stream, total, seed, landed, rows, judge_with=chaos_judge
    )
