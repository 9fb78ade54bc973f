"""Every option of Spark's Kafka integration guide, walked: honoured with Spark's meaning, or refused with Spark's
text. The guide's tables are kept here as data (Spark 4.x, "Structured Streaming + Kafka Integration Guide":
the source's required and optional options, the sink's, and the "Kafka Specific Configurations" that cannot be
set), each with what pylog does. An option that is neither parsed (its value changes the parsed options) nor
refused fails the walk, so a new Spark option added to these tables cannot go unnoticed.

Pure option parsing (no broker, no Spark); the behaviour behind the honoured options is tested where it lives
(``test_reader_options_live.py`` for ``kafkaConsumer.pollTimeoutMs``, ``fetchOffset.*`` and
``commitOffsetsToGroup``).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from broker_runtime.errors import ConfigError
from spark_kafka_log.common.reader_options import READER_OPTIONS, parse_reader_options
from spark_kafka_log.common.writer_options import batch_options, parse_writer_options

_SERVERS = {"kafka.bootstrap.servers": "127.0.0.1:9092"}

#: Spark's guide, source options (required table, then optional table): name -> (query type, a valid value
#: other than the default, pylog's treatment: "honoured", or ("refused", a fragment of the message)).
SPARK_SOURCE_OPTIONS: dict[str, tuple[str, str, Any]] = {
    "assign": ("streaming and batch", '{"t": [0, 1]}', "honoured"),
    "subscribe": ("streaming and batch", "t", "honoured"),
    "subscribePattern": ("streaming and batch", "t.*", "honoured"),
    "kafka.bootstrap.servers": ("streaming and batch", "127.0.0.1:9093", "honoured"),
    "startingTimestamp": ("streaming and batch", "1000", "honoured"),
    "startingOffsetsByTimestamp": ("streaming and batch", '{"t": {"0": 1000}}', "honoured"),
    "startingOffsets": ("streaming and batch", '{"t": {"0": 23}}', "honoured"),
    "endingTimestamp": ("batch query", "1000", "honoured"),
    "endingOffsetsByTimestamp": ("batch query", '{"t": {"0": 1000}}', "honoured"),
    "endingOffsets": ("batch query", '{"t": {"0": 50}}', "honoured"),
    "failOnDataLoss": ("streaming and batch", "false", "honoured"),
    "kafkaConsumer.pollTimeoutMs": ("streaming and batch", "5000", "honoured"),
    "fetchOffset.numRetries": ("streaming and batch", "5", "honoured"),
    "fetchOffset.retryIntervalMs": ("streaming and batch", "10", "honoured"),
    "maxOffsetsPerTrigger": ("streaming query", "1000", "honoured"),
    "minOffsetsPerTrigger": ("streaming query", "10", "honoured"),
    "maxTriggerDelay": ("streaming query", "5s", "honoured"),
    "minPartitions": ("streaming and batch", "8", "honoured"),
    "maxRecordsPerPartition": ("streaming and batch", "1000", "honoured"),
    "groupIdPrefix": ("streaming and batch", "app", ("refused", "pylog reads with no consumer group")),
    "kafka.group.id": ("streaming and batch", "app", ("refused", "pylog reads with no consumer group")),
    "includeHeaders": ("streaming and batch", "true", "honoured"),
    "startingOffsetsByTimestampStrategy": ("streaming and batch", "latest", "honoured"),
}

#: Spark's guide, sink options: name -> (a valid value, pylog's treatment). ``includeHeaders`` is in the sink's
#: table, yet Spark's sink writes a ``headers`` column whenever there is one and never reads the option: pylog
#: does the same and only checks the value is a boolean ("checked").
SPARK_SINK_OPTIONS: dict[str, tuple[str, Any]] = {
    "kafka.bootstrap.servers": ("127.0.0.1:9093", "honoured"),
    "topic": ("events", "honoured"),
    "includeHeaders": ("true", "checked"),
}

#: Spark's guide, "Kafka Specific Configurations": the Kafka params that cannot be set (source or sink), with
#: a fragment of Spark's error text. ``group.id`` is the guide's exception (Spark warns); pylog refuses it.
SPARK_REFUSED_KAFKA_PARAMS: dict[str, tuple[str, str]] = {
    "group.id": ("reader", "pylog reads with no consumer group"),
    "auto.offset.reset": ("reader", "Instead set the source option 'startingOffsets'"),
    "key.deserializer": ("reader", "keys are deserialized as byte arrays with ByteArrayDeserializer"),
    "value.deserializer": ("reader", "values are deserialized as byte arrays with ByteArrayDeserializer"),
    "key.serializer": ("writer", "keys are serialized with ByteArraySerializer"),
    "value.serializer": ("writer", "value are serialized with ByteArraySerializer"),
    "enable.auto.commit": ("reader", "Kafka option 'enable.auto.commit' is not supported"),
    "interceptor.classes": ("reader", "Kafka option 'interceptor.classes' is not supported"),
}

_STRATEGIES = ("assign", "subscribe", "subscribePattern")


def _source_base(name: str) -> dict[str, str]:
    base = {**_SERVERS, **({} if name in _STRATEGIES else {"subscribe": "t"})}
    if name in ("minOffsetsPerTrigger", "maxTriggerDelay"):
        base["maxOffsetsPerTrigger"] = "100000"  # Spark: the minimum may not exceed the maximum
    return base


@pytest.mark.parametrize("name", sorted(SPARK_SOURCE_OPTIONS))
def test_every_option_of_sparks_source_table_is_honoured_or_refused(name: str) -> None:
    query_type, value, treatment = SPARK_SOURCE_OPTIONS[name]
    modes = {"streaming and batch": (False, True), "batch query": (False,), "streaming query": (True,)}[
        query_type
    ]
    for streaming in modes:
        base = _source_base(name)
        if treatment != "honoured":
            with pytest.raises(ConfigError, match=treatment[1]):
                parse_reader_options({**base, name: value}, streaming=streaming)
            continue
        if name in _STRATEGIES:
            # The strategies: exactly one is required; each gives its own subscription.
            parsed = parse_reader_options({**base, name: value}, streaming=streaming)
            assert parsed.topic_label().startswith(f"{name}="), parsed.topic_label()
            continue
        without = parse_reader_options(base, streaming=streaming)
        given = parse_reader_options({**base, name: value}, streaming=streaming)
        assert given != without, (
            f"option {name!r} (Spark's {query_type} option) was accepted but changed nothing"
        )


def test_sparks_batch_only_options_are_refused_by_streams_and_stream_only_ones_warned_by_batch_reads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for name, (query_type, value, _) in SPARK_SOURCE_OPTIONS.items():
        if query_type == "batch query":
            with pytest.raises(ConfigError, match="not valid in streaming queries"):
                parse_reader_options({**_source_base(name), name: value}, streaming=True)
    with caplog.at_level(logging.WARNING, logger="spark_kafka_log.writer"):
        parse_reader_options(
            {**_SERVERS, "subscribe": "t", "maxOffsetsPerTrigger": "10", "maxTriggerDelay": "1s"}
        )
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "maxOffsetsPerTrigger option ignored in batch queries" in warned
    assert "maxTriggerDelay option ignored in batch queries" in warned


def test_the_reader_knows_every_option_of_sparks_source_table() -> None:
    """The other direction: pylog's list of unprefixed reader options is Spark's table (nothing invented)."""
    spark_unprefixed = {n for n in SPARK_SOURCE_OPTIONS if not n.startswith("kafka.")} - {"groupIdPrefix"}
    assert set(READER_OPTIONS) - {"commitOffsetsToGroup"} == spark_unprefixed  # pylog's opt-in, not Spark's


def test_a_group_is_only_taken_by_a_stream_that_commits_its_progress_to_it() -> None:
    base = {**_SERVERS, "subscribe": "t"}
    opt_in = {"kafka.group.id": "lag-watch", "commitOffsetsToGroup": "true"}
    assert parse_reader_options({**base, **opt_in}, streaming=True).commit_group == "lag-watch"
    assert parse_reader_options(base, streaming=True).commit_group is None
    refusals = [
        ({**opt_in}, False, "applies to readStream only"),
        ({"commitOffsetsToGroup": "true"}, True, "give kafka.group.id"),
        ({"kafka.group.id": "g"}, True, "not supported alone: pylog reads with no consumer group"),
        ({"groupIdPrefix": "g", **opt_in}, True, "option 'groupIdPrefix' is not supported"),
    ]
    for extra, streaming, message in refusals:
        with pytest.raises(ConfigError, match=message):
            parse_reader_options({**base, **extra}, streaming=streaming)


@pytest.mark.parametrize("name", sorted(SPARK_SINK_OPTIONS))
def test_every_option_of_sparks_sink_table_is_honoured_or_checked(name: str) -> None:
    value, treatment = SPARK_SINK_OPTIONS[name]
    without = parse_writer_options({**_SERVERS, "topic": "t"} if name != "topic" else dict(_SERVERS))
    given = parse_writer_options({**_SERVERS, "topic": "t", name: value})
    if treatment == "honoured":
        assert given != without, f"sink option {name!r} was accepted but changed nothing"
    else:
        assert treatment == "checked"
        with pytest.raises(ConfigError, match=f"option '{name}'"):
            parse_writer_options({**_SERVERS, name: "maybe"})


@pytest.mark.parametrize("param", sorted(SPARK_REFUSED_KAFKA_PARAMS))
def test_the_kafka_params_spark_refuses_are_refused_with_sparks_text(param: str) -> None:
    role, text = SPARK_REFUSED_KAFKA_PARAMS[param]
    options = {**_SERVERS, f"kafka.{param}": "x"}
    with pytest.raises(ConfigError, match=text.replace("(", r"\(")):
        if role == "reader":
            parse_reader_options({**options, "subscribe": "t"})
        else:
            parse_writer_options(options)
    if role == "reader":
        with pytest.raises(ConfigError, match=text.replace("(", r"\(")):
            parse_reader_options({**options, "subscribe": "t"}, streaming=True)


@pytest.mark.parametrize(
    ("role", "options", "message"),
    [
        ("reader", {"subscribe": "t", "startingOffset": "latest"}, "did you mean 'startingOffsets'"),
        ("stream", {"subscribe": "t", "maxOffsetPerTrigger": "5"}, "did you mean 'maxOffsetsPerTrigger'"),
        ("reader", {"subscribe": "t", "failondatalos": "false"}, "did you mean 'failOnDataLoss'"),
        (
            "reader",
            {"subscribe": "t", "kafkaConsumer.pollTimeout": "5"},
            "did you mean 'kafkaConsumer.pollTimeoutMs'",
        ),
        ("writer", {"topics": "t"}, "did you mean 'topic'"),
        ("writer", {"checkpointLocaton": "/c"}, "did you mean 'checkpointLocation'"),
        ("reader", {"subscribe": "t", "zzz": "1"}, "option 'zzz' is not an option of the pylog reader"),
        ("reader", {"subscribe": "t", "path": "t"}, "format\\('pylog'\\) takes no path"),
        ("stream", {"subscribe": "t", "path": "t"}, "format\\('pylog'\\) takes no path"),
        ("writer", {"topic": "t", "path": "t"}, "format\\('pylog'\\) takes no path"),
    ],
)
def test_an_unknown_option_fails_naming_it_and_the_closest_known_one(
    role: str, options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        if role == "writer":
            parse_writer_options({**_SERVERS, **options})
        else:
            parse_reader_options({**_SERVERS, **options}, streaming=role == "stream")


def test_what_spark_passes_a_stream_sink_is_allowed_and_a_batch_write_refuses_it() -> None:
    """PySpark 4.3 passes writeStream's ``checkpointLocation`` and ``queryName`` to the sink as options."""
    options = parse_writer_options({**_SERVERS, "topic": "t", "checkpointLocation": "/c", "queryName": "q"})
    assert options.stream_only_given == ("checkpointLocation", "queryName")
    with pytest.raises(ConfigError, match="apply to writeStream only"):
        batch_options(options)


def test_spark_option_values_and_defaults() -> None:
    base = {**_SERVERS, "subscribe": "t"}
    default = parse_reader_options(base)
    # Spark: pollTimeoutMs falls back to spark.network.timeout (120 s); KafkaOffsetReader: 3 attempts, 1000 ms.
    assert (default.poll_timeout_ms, default.fetch_offset_num_retries) == (120_000, 3)
    assert default.fetch_offset_retry_interval_ms == 1000
    for bad in ({"fetchOffset.numRetries": "0"}, {"kafkaConsumer.pollTimeoutMs": "soon"}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            parse_reader_options({**base, **bad})
    with pytest.raises(
        ConfigError, match=r"minOffsetPerTrigger\(5\) is higher than the maxOffsetsPerTrigger\(2\)"
    ):
        parse_reader_options(
            {**base, "minOffsetsPerTrigger": "5", "maxOffsetsPerTrigger": "2"}, streaming=True
        )
