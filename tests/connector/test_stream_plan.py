"""The streaming reader's pure pieces: Spark's Kafka source offsets JSON, rate limit, trigger delay, batch ranges,
and the streaming option rules (no broker, no Spark)."""

from __future__ import annotations

import logging

import pytest

from broker_runtime.errors import ConfigError, DataLossError
from spark_kafka_log.common.reader_options import OffsetBound, parse_reader_options
from spark_kafka_log.stream.stream_plan import (
    available,
    batch_ranges,
    from_json,
    rate_limit,
    should_delay,
    to_json,
)


def test_offsets_json_is_sparks_kafka_source_offset_and_sorted() -> None:
    offsets = {("b", 1): 7, ("a", 10): 3, ("a", 2): 23}
    assert to_json(offsets) == {"a": {"2": 23, "10": 3}, "b": {"1": 7}}
    assert list(to_json(offsets)["a"]) == ["2", "10"]
    assert from_json({"a": {"2": 23, "10": 3}, "b": {"1": 7}}) == offsets
    with pytest.raises(ConfigError, match="not a JSON object of topics"):
        from_json([1, 2])
    with pytest.raises(ConfigError, match="not partition -> offset"):
        from_json({"a": {"x": 1}})


def test_rate_limit_spreads_the_limit_proportionally_as_spark() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 100, ("t", 1): 400, ("t", 2): 50}  # 100 and 300 available, none in partition 2
    assert rate_limit(100, start, latest, {}) == {("t", 0): 25, ("t", 1): 175, ("t", 2): 50}
    # More than available: everything.
    assert rate_limit(1000, start, latest, {}) == latest
    # A share below one record is rounded up, so a small partition is not starved.
    tiny = rate_limit(10, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 5}, {})
    assert tiny == {("t", 0): 9, ("t", 1): 1}
    # A new partition (not in start) counts from its earliest offset.
    new = rate_limit(20, {("t", 0): 0}, {("t", 0): 10, ("u", 0): 40}, {("u", 0): 30})
    assert new == {("t", 0): 10, ("u", 0): 40}
    assert rate_limit(10, {("t", 0): 0}, {("t", 0): 100, ("u", 0): 40}, {("u", 0): 0}) == {
        ("t", 0): 7,
        ("u", 0): 2,
    }
    assert available({("t", 0): 0}, {("t", 0): 10, ("u", 0): 40}, {("u", 0): 30}) == 20


def test_min_offsets_delay_until_max_trigger_delay() -> None:
    assert should_delay(100, pending=99, now_ms=1000, last_trigger_ms=500, max_trigger_delay_ms=1000)
    assert not should_delay(100, pending=100, now_ms=1000, last_trigger_ms=500, max_trigger_delay_ms=1000)
    assert not should_delay(100, pending=1, now_ms=1500, last_trigger_ms=500, max_trigger_delay_ms=1000)


def test_batch_ranges_new_gone_and_reset_partitions(caplog: pytest.LogCaptureFixture) -> None:
    start = {("t", 0): 5, ("t", 1): 9}
    end = {("t", 0): 8, ("t", 1): 9, ("t", 2): 4}
    assert batch_ranges(start, end, {("t", 2): 0}, True) == [("t", 0, 5, 8), ("t", 1, 9, 9), ("t", 2, 0, 4)]
    with pytest.raises(DataLossError, match=r"topic 't' partition 2 was added and starts from offset 3"):
        batch_ranges(start, end, {("t", 2): 3}, True)
    with pytest.raises(DataLossError, match="partitions t-1 are gone"):
        batch_ranges(start, {("t", 0): 8}, {}, True)
    with pytest.raises(DataLossError, match="went from 5 back to 2"):
        batch_ranges(start, {("t", 0): 2, ("t", 1): 9}, {}, True)
    with caplog.at_level(logging.WARNING, logger="spark_kafka_log.stream_plan"):
        ranges = batch_ranges(start, {("t", 0): 2, ("t", 2): 4}, {("t", 2): 3}, False)
    assert ranges == [("t", 2, 3, 4)]
    assert len([r for r in caplog.records if "failOnDataLoss=false" in r.getMessage()]) == 3


def test_streaming_options() -> None:
    base = {"subscribe": "t", "kafka.bootstrap.servers": "localhost:1"}
    assert parse_reader_options(base, streaming=True).starting == OffsetBound("latest")
    assert parse_reader_options(base).starting == OffsetBound("earliest")
    assert (
        parse_reader_options({**base, "startingOffsets": "earliest"}, streaming=True).starting.kind
        == "earliest"
    )
    assert parse_reader_options(
        {**base, "startingoffsets": '{"t": {"0": -1, "1": -2}}'}, streaming=True
    ).starting
    with pytest.raises(ConfigError, match="can't be latest for batch queries"):
        parse_reader_options({**base, "startingOffsets": "latest"})
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        with pytest.raises(ConfigError, match=f"option '{name}' is not valid in streaming queries"):
            parse_reader_options({**base, name: "latest"}, streaming=True)
    opts = parse_reader_options(
        {**base, "maxOffsetsPerTrigger": "500", "minOffsetsPerTrigger": "10", "maxTriggerDelay": "5s"},
        streaming=True,
    )
    assert (opts.max_offsets_per_trigger, opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (
        500,
        10,
        5000,
    )
    assert parse_reader_options(base, streaming=True).max_trigger_delay_ms == 15 * 60 * 1000
    for value, ms in (("100ms", 100), ("250", 250), ("2m", 120_000), ("1h", 3_600_000)):
        assert (
            parse_reader_options({**base, "maxTriggerDelay": value}, streaming=True).max_trigger_delay_ms
            == ms
        )
    with pytest.raises(ConfigError, match="'maxTriggerDelay': 'soon' is not a duration"):
        parse_reader_options({**base, "maxTriggerDelay": "soon"}, streaming=True)
    with pytest.raises(ConfigError, match="'maxOffsetsPerTrigger'"):
        parse_reader_options({**base, "maxOffsetsPerTrigger": "0"}, streaming=True)
