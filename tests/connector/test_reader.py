"""spark.read.format("pylog") end to end: a real broker on a loopback port, real Kafka clients producing, real Spark.

One broker for the module (3 partitions per topic, 64 KiB segments so every topic spans several segments, a
dense offset index), and one more for the retention tests. Rows are compared with what the producers sent.
"""

from __future__ import annotations

import contextlib
import glob
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality

from broker_runtime.launch import broker_process

pytestmark = [pytest.mark.timeout(240)]

T0 = 1_700_000_000_000
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture(scope="module")
def rbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(host:port, log dir) of a broker whose logs the direct scan can read."""
    data_dir = tmp_path_factory.mktemp("reader-broker")
    logs = data_dir / "logs"
    overrides = {
        "num.partitions": "3",
        "log.dirs": str(logs),
        "log.segment.bytes": "65536",
        "log.index.interval.bytes": "1024",
        "log.retention.ms": "-1",  # the test data carries 2023 timestamps
    }
    with broker_process(data_dir, overrides=overrides) as address:
        yield address, str(logs)


@contextlib.contextmanager
def pushdown(spark: Any, enabled: bool) -> Iterator[None]:
    old = spark.conf.get(PUSHDOWN_CONF, "false")
    spark.conf.set(PUSHDOWN_CONF, "true" if enabled else "false")
    try:
        yield
    finally:
        spark.conf.set(PUSHDOWN_CONF, old)


def _reader(spark: Any, rbroker: tuple[str, str], **options: str) -> Any:
    address, logs = rbroker
    r = spark.read.format("pylog").option("kafka.bootstrap.servers", address).option("pylog.logDirs", logs)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def _metrics(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(Path(p).read_text()) for p in glob.glob(str(directory / "read-*.json"))]


def _rows(df: Any) -> list[tuple[Any, ...]]:
    cols = "partition, offset, key, value, unix_millis(timestamp) AS ts, timestampType"
    if "headers" in df.columns:
        cols += ", headers"
    out = []
    for r in df.selectExpr(*cols.split(", ")).collect():
        row = (r.partition, r.offset, r.key, r.value, r.ts, r.timestampType)
        if "headers" in df.columns:
            row += (tuple((h.key, h.value) for h in r.headers),)
        out.append(row)
    return sorted(out)


def _messages(n: int, partitions: int = 3) -> list[tuple[int, bytes | None, bytes | None, int, list[Any]]]:
    """(partition, key, value, timestamp ms, headers) with null keys, null values and headers mixed in."""
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value = None if i % 11 == 0 and i % 5 != 0 else f"value-{i:05d}-".encode() * (1 + i % 4)
        headers = [] if i % 3 == 0 else [("h1", f"x{i}".encode()), ("nullh", None)]
        out.append((i % partitions, key, value, T0 + i, headers))
    return out


def _expected(messages: list[Any]) -> list[tuple[Any, ...]]:
    """Rows in partition/offset order: offsets follow send order within each partition."""
    counters: dict[int, int] = {}
    out = []
    for p, key, value, ts, headers in messages:
        off = counters.get(p, 0)
        counters[p] = off + 1
        out.append((p, off, key, value, ts, 0, tuple(headers)))
    return sorted(out)


def _produce_confluent(address: str, topic: str, messages: list[Any], codec: str, batch: int = 10000) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": address,
            "compression.type": codec,
            "linger.ms": 20,
            "enable.idempotence": True,
            "batch.num.messages": batch,
        }
    )
    errors: list[Any] = []
    for p, key, value, ts, headers in messages:
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=p,
            timestamp=ts,
            headers=headers or None,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0
    assert not errors, errors


def _produce_kafka_python(address: str, topic: str, messages: list[Any], codec: str | None) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=address, compression_type=codec, linger_ms=20, acks="all")
    futures = [
        producer.send(topic, value=value, key=key, partition=p, timestamp_ms=ts, headers=headers)
        for p, key, value, ts, headers in messages
    ]
    producer.flush(30)
    for f in futures:
        f.get(timeout=30)
    producer.close()


def _create_topic(address: str, topic: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


# --------------------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_round_trip_every_codec(spark: Any, rbroker: tuple[str, str], codec: str) -> None:
    topic = f"ck-{codec}-{uuid.uuid4().hex[:6]}"
    _create_topic(rbroker[0], topic)
    messages = _messages(600)
    _produce_confluent(rbroker[0], topic, messages, codec)
    for transport in ("fetch", "local"):
        df = _reader(
            spark, rbroker, subscribe=topic, includeHeaders="true", **{"pylog.transport": transport}
        ).load()
        assert df.schema.simpleString() == (
            "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
            "timestampType:int,headers:array<struct<key:string,value:binary>>>"
        )
        assert _rows(df) == _expected(messages), transport
        assert {r.topic for r in df.select("topic").distinct().collect()} == {topic}


@pytest.mark.parametrize("codec", [None, "gzip", "lz4", "zstd"])
def test_kafka_python_round_trip(spark: Any, rbroker: tuple[str, str], codec: str | None) -> None:
    topic = f"kp-{codec}-{uuid.uuid4().hex[:6]}"
    _create_topic(rbroker[0], topic)
    # kafka-python refuses null header values.
    messages = [(p, k, v, ts, [(hk, hv or b"") for hk, hv in h]) for p, k, v, ts, h in _messages(300)]
    _produce_kafka_python(rbroker[0], topic, messages, codec)
    df = _reader(spark, rbroker, subscribe=topic, includeHeaders="true").load()
    assert _rows(df) == _expected(messages)
    # Without includeHeaders the schema is Spark's seven columns.
    plain = _reader(spark, rbroker, subscribe=topic).load()
    assert plain.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert plain.count() == 300


# --------------------------------------------------------------------------------------------- transports


@pytest.fixture(scope="module")
def big_topic(rbroker: tuple[str, str]) -> tuple[str, list[Any]]:
    """3 partitions x 3000 records of ~60 bytes in batches of 100: each partition spans several 64 KiB segments."""
    topic = f"big-{uuid.uuid4().hex[:6]}"
    _create_topic(rbroker[0], topic)
    messages = _messages(9000)
    _produce_confluent(rbroker[0], topic, messages, "none", batch=100)
    return topic, messages


def test_direct_scan_and_fetch_give_identical_dataframes(
    spark: Any, rbroker: tuple[str, str], big_topic: tuple[str, list[Any]], tmp_path: Path
) -> None:
    topic, messages = big_topic
    segments = glob.glob(str(Path(rbroker[1]) / f"{topic}-0" / "*.log"))
    assert len(segments) >= 2, "the topic should span several segments"
    frames = {}
    for transport in ("fetch", "local"):
        metrics = tmp_path / transport
        frames[transport] = (
            _reader(
                spark,
                rbroker,
                subscribe=topic,
                includeHeaders="true",
                minPartitions="7",
                startingOffsets=json.dumps({topic: {"0": 17, "1": -2, "2": 1500}}),
                endingOffsets=json.dumps({topic: {"0": 2999, "1": 2000, "2": -1}}),
                **{"pylog.transport": transport, "pylog.metricsDir": str(metrics)},
            )
            .load()
            .orderBy("partition", "offset")
        )
        assert frames[transport].count() == (2999 - 17) + 2000 + (3000 - 1500)
        reported = _metrics(metrics)
        assert reported and {m["transport"] for m in reported} == {transport}
    assert_df_equality(frames["fetch"], frames["local"])
    wanted = {0: (17, 2999), 1: (0, 2000), 2: (1500, 3000)}
    expected = [r for r in _expected(messages) if wanted[r[0]][0] <= r[1] < wanted[r[0]][1]]
    assert _rows(frames["local"]) == expected


def test_min_partitions_and_max_records_per_partition(
    spark: Any, rbroker: tuple[str, str], big_topic: tuple[str, list[Any]]
) -> None:
    topic, _ = big_topic
    assert _reader(spark, rbroker, subscribe=topic).load().rdd.getNumPartitions() == 3
    assert _reader(spark, rbroker, subscribe=topic, minPartitions="12").load().rdd.getNumPartitions() == 12
    df = _reader(spark, rbroker, subscribe=topic, maxRecordsPerPartition="1000").load()
    assert df.rdd.getNumPartitions() == 9
    assert df.count() == 9000
    assert df.select("partition", "offset").distinct().count() == 9000


def test_assign_and_subscribe_pattern(
    spark: Any, rbroker: tuple[str, str], big_topic: tuple[str, list[Any]]
) -> None:
    topic, _ = big_topic
    df = _reader(spark, rbroker, assign=json.dumps({topic: [1, 2]})).load()
    assert sorted(r.partition for r in df.select("partition").distinct().collect()) == [1, 2]
    assert df.count() == 6000
    pattern = _reader(spark, rbroker, subscribePattern=topic[:7] + ".*").load()
    assert pattern.count() == 9000
    assert _reader(spark, rbroker, subscribePattern="no-such-topic-.*").load().count() == 0
    # Spark's Kafka source matches with Java's Matcher.find: a pattern found inside the name selects the topic
    # (a full match would read nothing here); anchored, it must match the whole name.
    inner = _reader(spark, rbroker, subscribePattern=topic[2:7]).load()
    assert inner.select("topic").distinct().collect()[0].topic == topic
    assert inner.count() == 9000
    assert _reader(spark, rbroker, subscribePattern=f"^{topic[2:7]}$").load().count() == 0


# --------------------------------------------------------------------------------------------- timestamps


@pytest.fixture(scope="module")
def ts_topic(rbroker: tuple[str, str]) -> str:
    """One partition, 1000 records at T0 + 10*i ms, except records 500-509 which go back in time."""
    topic = f"ts-{uuid.uuid4().hex[:6]}"
    _create_topic(rbroker[0], topic, partitions=1)
    messages = []
    for i in range(1000):
        ts = T0 + 10 * i if not 500 <= i < 510 else T0 + 10 * (i - 300)
        messages.append((0, f"k{i}".encode(), f"v{i}".encode(), ts, []))
    _produce_confluent(rbroker[0], topic, messages, "zstd")
    return topic


def test_starting_timestamp_lands_on_first_offset_with_timestamp_at_or_after(
    spark: Any, rbroker: tuple[str, str], ts_topic: str
) -> None:
    first = _reader(spark, rbroker, subscribe=ts_topic, startingTimestamp=str(T0 + 2345)).load()
    offsets = sorted(r.offset for r in first.select("offset").collect())
    assert offsets[0] == 235 and offsets[-1] == 999 and len(offsets) == 765
    by_partition = _reader(
        spark,
        rbroker,
        subscribe=ts_topic,
        startingOffsetsByTimestamp=json.dumps({ts_topic: {"0": T0 + 5000}}),
        endingOffsetsByTimestamp=json.dumps({ts_topic: {"0": T0 + 6000}}),
    ).load()
    offsets = sorted(r.offset for r in by_partition.select("offset").collect())
    # 499 has T0+4990 and 500-509 go back in time (T0+2000...), so the first offset with ts >= T0+5000 is 510.
    assert offsets == list(range(510, 600))


def test_starting_timestamp_strategy(spark: Any, rbroker: tuple[str, str], ts_topic: str) -> None:
    future = str(T0 + 10**9)
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        _reader(spark, rbroker, subscribe=ts_topic, startingTimestamp=future).load().count()
    latest = _reader(
        spark,
        rbroker,
        subscribe=ts_topic,
        startingTimestamp=future,
        startingOffsetsByTimestampStrategy="latest",
    ).load()
    assert latest.count() == 0
    ending = _reader(spark, rbroker, subscribe=ts_topic, endingTimestamp=future).load()
    assert ending.count() == 1000


# --------------------------------------------------------------------------------------------- pushdown


@pytest.mark.parametrize("enabled", [True, False])
def test_pushdown_same_rows_and_fewer_batches(
    spark: Any, rbroker: tuple[str, str], big_topic: tuple[str, list[Any]], tmp_path: Path, enabled: bool
) -> None:
    topic, messages = big_topic
    where = f"partition IN (1, 2) AND offset >= 1000 AND offset < 1200 AND timestamp >= TIMESTAMP_MILLIS({T0 + 3 * 1100})"
    expected = [
        r for r in _expected(messages) if r[0] in (1, 2) and 1000 <= r[1] < 1200 and r[4] >= T0 + 3 * 1100
    ]
    with pushdown(spark, enabled):
        full_dir, pushed_dir = tmp_path / "full", tmp_path / "pushed"
        full = _reader(
            spark, rbroker, subscribe=topic, includeHeaders="true", **{"pylog.metricsDir": str(full_dir)}
        )
        assert full.load().count() == 9000
        df = (
            _reader(
                spark,
                rbroker,
                subscribe=topic,
                includeHeaders="true",
                **{"pylog.metricsDir": str(pushed_dir)},
            )
            .load()
            .where(where)
        )
        assert _rows(df) == expected
    full_batches = sum(m["batches"] for m in _metrics(full_dir))
    pushed_batches = sum(m["batches"] for m in _metrics(pushed_dir))
    if enabled:
        assert pushed_batches * 10 < full_batches, (pushed_batches, full_batches)
        assert {m["partition"] for m in _metrics(pushed_dir)} == {1, 2}
    else:
        assert pushed_batches == full_batches


# --------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "exactly one of the options"),
        ({}, "exactly one of the options"),
        ({"assign": "{not json"}, "option 'assign'"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"0": }'}, "option 'startingOffsets'"),
        ({"subscribe": "t", "startingOffsets": "latest"}, "can't be latest for batch queries"),
        ({"subscribe": "t", "endingOffsets": "earliest"}, "can't be earliest for batch queries"),
        ({"subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'}, "can't be earliest"),
        ({"subscribe": "t", "startingTimestamp": "yesterday"}, "option 'startingTimestamp'"),
        ({"subscribe": "t", "failOnDataLoss": "maybe"}, "option 'failOnDataLoss'"),
        (
            {"subscribe": "t", "kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JCEKS"},
            "kafka.ssl.truststore.type='JCEKS'",
        ),
        ({"subscribe": "t", "pylog.transport": "carrier-pigeon"}, "option 'pylog.transport'"),
        # A typo is never ignored; load(path) sets the option 'path', which names nothing for pylog.
        ({"subscribe": "t", "startingOffset": "latest"}, "did you mean 'startingOffsets'?"),
        ({"subscribe": "t", "path": "t"}, "format('pylog') takes no path"),
    ],
)
def test_bad_options_fail_with_a_message_naming_the_option(
    spark: Any, rbroker: tuple[str, str], options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        _reader(spark, rbroker, **options).load().collect()
    assert "ConfigError" in str(info.value)


def test_unknown_topic_and_partition(
    spark: Any, rbroker: tuple[str, str], big_topic: tuple[str, list[Any]]
) -> None:
    with pytest.raises(Exception, match="'no-such-topic' do not exist"):
        _reader(spark, rbroker, subscribe="no-such-topic").load().collect()
    with pytest.raises(Exception, match="partition 7 of topic"):
        _reader(spark, rbroker, assign=json.dumps({big_topic[0]: [7]})).load().collect()


def test_offsets_beyond_the_log(spark: Any, rbroker: tuple[str, str], ts_topic: str) -> None:
    beyond = json.dumps({ts_topic: {"0": 5000}})
    with pytest.raises(Exception, match=rf"topic '{ts_topic}' partition 0: ending offset 5000"):
        _reader(spark, rbroker, subscribe=ts_topic, endingOffsets=beyond).load().collect()
    df = _reader(spark, rbroker, subscribe=ts_topic, endingOffsets=beyond, failOnDataLoss="false").load()
    assert df.count() == 1000
    with pytest.raises(Exception, match=r"starting offset 5000 is after the ending offset 1000"):
        _reader(spark, rbroker, subscribe=ts_topic, startingOffsets=beyond).load().collect()
    assert (
        _reader(spark, rbroker, subscribe=ts_topic, startingOffsets=beyond, failOnDataLoss="false")
        .load()
        .count()
        == 0
    )


def test_partial_offsets_json_is_rejected(
    spark: Any, rbroker: tuple[str, str], big_topic: tuple[str, list[Any]]
) -> None:
    topic = big_topic[0]
    with pytest.raises(Exception, match="must name exactly the partitions"):
        _reader(
            spark, rbroker, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 5}})
        ).load().collect()


# --------------------------------------------------------------------------------------------- retention


@pytest.fixture(scope="module")
def retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    data_dir = tmp_path_factory.mktemp("retention-broker")
    logs = data_dir / "logs"
    overrides = {
        "num.partitions": "1",
        "log.dirs": str(logs),
        "log.segment.bytes": "16384",
        "log.retention.bytes": "65536",
        "log.retention.check.interval.ms": "100",
    }
    with broker_process(data_dir, overrides=overrides) as address:
        yield address, str(logs)


def test_retention_deleted_range_with_fail_on_data_loss_both_ways(
    spark: Any, retention_broker: tuple[str, str]
) -> None:
    import time

    topic = f"ret-{uuid.uuid4().hex[:6]}"
    _create_topic(retention_broker[0], topic, partitions=1)
    now = int(time.time() * 1000)  # recent: only size-based retention may delete (retention.ms is 7 days)
    messages = [(0, None, f"v{i:04d}".encode() * 10, now + i, []) for i in range(3000)]
    _produce_confluent(retention_broker[0], topic, messages, "none", batch=50)
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=retention_broker[0])
    tp = TopicPartition(topic, 0)
    deadline = time.monotonic() + 30
    while consumer.beginning_offsets([tp])[tp] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # let the retention pass finish (it keeps the newest ~64 KiB)
    earliest = consumer.beginning_offsets([tp])[tp]
    consumer.close()
    assert earliest > 0, "retention should have deleted the first segments"

    from_zero = json.dumps({topic: {"0": 0}})
    for transport in ("fetch", "local"):
        opts = {"subscribe": topic, "startingOffsets": from_zero, "pylog.transport": transport}
        with pytest.raises(Exception, match=rf"topic '{topic}' partition 0: offsets \[0, {earliest}\)"):
            _reader(spark, retention_broker, **opts).load().collect()
        df = _reader(spark, retention_broker, failOnDataLoss="false", **opts).load()
        offsets = sorted(r.offset for r in df.select("offset").collect())
        assert offsets[0] >= earliest and offsets[-1] == 2999
        assert offsets == list(range(offsets[0], 3000))


# --------------------------------------------------------------------------------------------- with the writer


def test_round_trip_with_the_pylog_writer(spark: Any, rbroker: tuple[str, str]) -> None:
    from pyspark.sql import functions as F

    topic = f"w-{uuid.uuid4().hex[:6]}"
    _create_topic(rbroker[0], topic)
    source = spark.range(5000).select(
        F.col("id").cast("string").cast("binary").alias("key"),
        F.concat(F.lit("payload-"), F.col("id").cast("string")).cast("binary").alias("value"),
    )
    source.write.format("pylog").option("kafka.bootstrap.servers", rbroker[0]).option("topic", topic).mode(
        "append"
    ).save()
    back = _reader(spark, rbroker, subscribe=topic).load().select("key", "value")
    assert_df_equality(back, source, ignore_row_order=True, ignore_nullable=True)
