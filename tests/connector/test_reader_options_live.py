"""Spark's reader options whose effect needs a real broker (child process, loopback): ``kafkaConsumer.pollTimeoutMs``
bounds how long a read task waits for the records of its range, ``fetchOffset.numRetries`` /
``fetchOffset.retryIntervalMs`` how often and how far apart the driver tries an offset lookup, and pylog's opt-in
``commitOffsetsToGroup`` commits a stream's progress to ``kafka.group.id``.

The read task (:func:`spark_kafka_log.read.read_task.read_range`), the driver's planning
(:func:`spark_kafka_log.read.read_plan.plan_input_partitions`) and the stream reader's ``commit`` are called directly,
as Spark's Python workers call them; no Spark session is needed to see the waits (``test_stream_reader.py`` checks
that Spark calls ``commit``). The broker is SIGSTOPped (its socket stays open, it answers nothing: what a hung or
partitioned leader looks like) or asked for offsets its log does not have.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.errors import DataLossError, KafkaError, WaitTimeoutError
from spark_kafka_log.common.reader_options import parse_reader_options
from spark_kafka_log.common.schema import arrow_schema, reader_schema
from spark_kafka_log.read.input_partition import PylogInputPartition
from spark_kafka_log.read.pushdown import PushedFilters
from spark_kafka_log.read.read_plan import plan_input_partitions
from spark_kafka_log.read.read_task import read_range
from spark_kafka_log.stream.stream_reader import create_stream_reader
from tests.support.cluster import paused
from tests.support.processes import broker_pid

_TOPIC = "waits"


@pytest.fixture(scope="module")
def waits_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(bootstrap, pid) of a broker child process with the (empty) topic ``waits``."""
    from broker_runtime.launch import broker_process

    data_dir = Path(tmp_path_factory.mktemp("waits-broker"))
    with broker_process(data_dir) as address:
        with KafkaClient(address) as client:
            assert client.admin.create_topics({_TOPIC: (1, 1)}) == {_TOPIC: 0}
            client.partitions_for(_TOPIC, timeout_ms=10000)
        yield address, broker_pid(data_dir)


def _read(bootstrap: str, end: int, **options: str) -> None:
    parsed = parse_reader_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": _TOPIC, "pylog.transport": "fetch", **options}
    )
    part = PylogInputPartition(_TOPIC, 0, 0, end, bootstrap, ())
    list(read_range(parsed, part, arrow_schema(reader_schema())))


def test_a_short_poll_timeout_fails_a_task_whose_leader_answers_nothing_with_sparks_timeout(
    waits_broker: tuple[str, int],
) -> None:
    bootstrap, pid = waits_broker
    # Without the poll timeout the task would wait out the 8 s request timeout, then retry for 8 s more.
    slow = {"kafka.request.timeout.ms": "8000", "kafka.default.api.timeout.ms": "8000"}
    with paused(pid):
        began = time.monotonic()
        with pytest.raises(WaitTimeoutError) as info:
            _read(bootstrap, 10, **slow, **{"kafkaConsumer.pollTimeoutMs": "1000"})
        took = time.monotonic() - began
    assert "Cannot fetch record for offset 0 in 1000 milliseconds" in str(info.value)
    assert f"topic '{_TOPIC}' partition 0, reading range [0, 10)" in str(info.value)
    assert took < 5, took


def test_a_short_poll_timeout_ends_the_wait_for_a_high_watermark_below_the_range(
    waits_broker: tuple[str, int],
) -> None:
    """The range promises offsets [0, 10) of an empty log: the task waits for the high watermark (a new leader's
    may lag) no longer than pollTimeoutMs, then reports the data loss."""
    bootstrap, _ = waits_broker
    began = time.monotonic()
    with pytest.raises(DataLossError, match=r"offsets \[0, 10\) are beyond the log's latest offset 0"):
        _read(
            bootstrap, 10, **{"kafka.default.api.timeout.ms": "10000", "kafkaConsumer.pollTimeoutMs": "500"}
        )
    took = time.monotonic() - began
    assert took < 4, took


def test_fetch_offset_retries_are_counted_and_spaced_on_the_driver(
    waits_broker: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap, pid = waits_broker
    # Each attempt fails after ~300 ms (the stopped broker answers nothing; the client gives up at its timeouts).
    quick = {"kafka.request.timeout.ms": "300", "kafka.default.api.timeout.ms": "300"}
    attempts: dict[tuple[str, str], tuple[int, float]] = {}
    with paused(pid):
        for tries, interval in (("1", "0"), ("3", "600")):
            caplog.clear()
            options = parse_reader_options(
                {
                    "kafka.bootstrap.servers": bootstrap,
                    "subscribe": _TOPIC,
                    **quick,
                    "fetchOffset.numRetries": tries,
                    "fetchOffset.retryIntervalMs": interval,
                }
            )
            began = time.monotonic()
            with (
                caplog.at_level(logging.WARNING, logger="spark_kafka_log.read_plan"),
                pytest.raises(KafkaError),
            ):
                plan_input_partitions(options, PushedFilters())
            failed = [r.getMessage() for r in caplog.records if "(fetchOffset.numRetries)" in r.getMessage()]
            attempts[(tries, interval)] = (len(failed), time.monotonic() - began)
            assert failed[-1].startswith(f"pylog reader: attempt {tries} of {tries} (fetchOffset.numRetries)")
    assert attempts[("1", "0")][0] == 1
    assert attempts[("3", "600")][0] == 3
    # Two pauses of 600 ms between the three attempts.
    assert attempts[("3", "600")][1] >= attempts[("1", "0")][1] + 1.2, attempts


def test_a_stream_that_opts_in_commits_its_progress_to_the_group_and_warns_when_it_cannot(
    waits_broker: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap, pid = waits_broker
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": _TOPIC,
        "kafka.group.id": "lag-watch",
        "commitOffsetsToGroup": "true",
        "kafka.request.timeout.ms": "300",
        "kafka.default.api.timeout.ms": "300",
    }
    reader = create_stream_reader(options)
    reader.commit({_TOPIC: {"0": 0}})
    with KafkaClient(bootstrap) as client:
        assert client.groups.committed_offsets("lag-watch") == {(_TOPIC, 0): 0}
    # Without the opt-in nothing is committed (and kafka.group.id alone is refused: see test_spark_options.py).
    create_stream_reader({k: v for k, v in options.items() if "group" not in k.lower()}).commit(
        {_TOPIC: {"0": 0}}
    )
    # A commit that cannot be made is a WARNING naming the group; the checkpoint, not the group, is the truth.
    with paused(pid), caplog.at_level(logging.WARNING, logger="spark_kafka_log.stream_reader"):
        reader.commit({_TOPIC: {"0": 1}})
    assert any(
        "could not commit the offsets" in r.getMessage() and "'lag-watch'" in r.getMessage()
        for r in caplog.records
    )
