"""The streaming example job (jobs/stream_job.py) on the suite's Spark session and a real broker: every order
comes out of the pipeline once, with AvailableNow and with a processing-time trigger while orders keep arriving."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from jobs.stream_job import run

pytestmark = [pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def job_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from broker_runtime.launch import broker_process

    with broker_process(tmp_path_factory.mktemp("stream-job-broker")) as address:
        yield address


@pytest.mark.parametrize("seconds", [0.0, 3.0])
def test_stream_job_every_order_once(spark: Any, job_broker: str, seconds: float) -> None:  # noqa: F811
    prefix = f"job-{uuid.uuid4().hex[:6]}"
    result = run(
        spark, {"kafka.bootstrap.servers": job_broker}, prefix, 3000, seconds, max_offsets_per_trigger=1000
    )
    assert result["ok"], result
    assert result["output_rows"] == result["written"] >= 3000
    if seconds == 0:
        # 3000 orders at most 1000 offsets per micro-batch (rounded down per partition: a 4th batch may take the rest)
        assert result["batches"] in (3, 4) and max(result["batch_rows"]) <= 1000, result
    else:
        assert result["written"] > 3000  # orders kept arriving while the stream ran
