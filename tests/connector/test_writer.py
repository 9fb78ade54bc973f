"""df.write.format("pylog") end to end: real Spark, a real pylog broker over sockets, confluent-kafka as the peer.

One broker for the module (3 partitions per auto-created topic). Every topic name is unique per test.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from broker_runtime.launch import ensure_embedded_broker, stop_embedded_broker
from tests.connector.kafka_peer import consume_all, partition_counts, produce_keys

pytestmark = [pytest.mark.timeout(180)]

READ_BACK = StructType(
    [
        StructField("partition", IntegerType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
    ]
)


def topic_name() -> str:
    return f"w-{uuid.uuid4().hex[:10]}"


def write(df: Any, bootstrap: str, topic: str | None = None, **options: str) -> None:
    w = df.write.format("pylog").option("kafka.bootstrap.servers", bootstrap)
    if topic is not None:
        w = w.option("topic", topic)
    for k, v in options.items():
        w = w.option(k.replace("_", "."), v)
    w.mode("append").save()


def read_back(spark: Any, bootstrap: str, topic: str, partitions: int = 3) -> Any:
    rows = [(m.partition, m.key, m.value) for m in consume_all(bootstrap, topic, partitions)]
    return spark.createDataFrame(rows, READ_BACK)


# ---------------------------------------------------------------------------------------- columns


@pytest.mark.parametrize(
    "key_expr, value_expr",
    [
        ("cast(id as string)", "concat('v', cast(id as string))"),  # string key, string value
        ("cast(cast(id as string) as binary)", "cast(concat('v', cast(id as string)) as binary)"),
        ("cast(null as binary)", "cast(concat('v', cast(id as string)) as binary)"),  # null keys: sticky
        ("cast(null as string)", "cast(null as binary)"),  # tombstones without keys
    ],
)
def test_key_and_value_types_round_trip(spark: Any, broker: str, key_expr: str, value_expr: str) -> None:
    topic = topic_name()
    df = spark.range(0, 500, 1, 2).selectExpr(f"{key_expr} as key", f"{value_expr} as value")
    write(df, broker, topic)
    expected = df.select(
        F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value")
    )
    got = read_back(spark, broker, topic).drop("partition")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_value_only_with_a_null_type_key_column(spark: Any, broker: str) -> None:
    topic = topic_name()
    df = spark.range(0, 50, 1, 1).selectExpr("null as key", "cast(id as string) as value")
    write(df, broker, topic)
    messages = consume_all(broker, topic, 3)
    assert sorted(int(m.value) for m in messages if m.value) == list(range(50))
    assert {m.key for m in messages} == {None}
    assert len({m.partition for m in messages}) == 1, "one small batch of null keys sticks to one partition"


def test_headers_timestamp_and_explicit_partition(spark: Any, broker: str) -> None:
    topic = topic_name()
    df = spark.range(0, 30, 1, 2).selectExpr(
        "cast(id as string) as key",
        "cast(id as string) as value",
        "array(named_struct('key', 'h1', 'value', cast(cast(id as string) as binary)),"
        "      named_struct('key', 'h2', 'value', cast(null as binary))) as headers",
        "timestamp_millis(1700000000000 + id) as timestamp",
        "cast(id % 3 as int) as partition",
    )
    write(df, broker, topic)
    messages = consume_all(broker, topic, 3)
    assert len(messages) == 30
    for m in messages:
        i = int(m.value or b"")
        assert m.partition == i % 3
        assert m.headers == (("h1", str(i).encode()), ("h2", None))
        assert m.timestamp_type == 1 and m.timestamp == 1_700_000_000_000 + i  # CreateTime


def test_null_timestamps_take_the_write_time(spark: Any, broker: str) -> None:
    topic = topic_name()
    before = int(time.time() * 1000)
    df = spark.range(0, 5, 1, 1).selectExpr(
        "cast(id as string) as value", "cast(null as timestamp) as timestamp"
    )
    write(df, broker, topic)
    after = int(time.time() * 1000)
    assert all(before - 1000 <= m.timestamp <= after + 1000 for m in consume_all(broker, topic, 3))


def test_topic_column_routes_rows_and_the_topic_option_overrides_it(spark: Any, broker: str) -> None:
    a, b, c = topic_name(), topic_name(), topic_name()
    df = spark.range(0, 100, 1, 2).selectExpr(
        f"if(id % 2 = 0, '{a}', '{b}') as topic", "cast(id as string) as key", "cast(id as string) as value"
    )
    write(df, broker)
    assert sorted(int(m.value or b"") for m in consume_all(broker, a, 3)) == list(range(0, 100, 2))
    assert sorted(int(m.value or b"") for m in consume_all(broker, b, 3)) == list(range(1, 100, 2))
    write(df, broker, c)  # the option wins over the column
    assert len(consume_all(broker, c, 3)) == 100


# -------------------------------------------------------------------------------------- partitioning


def test_keyed_rows_land_where_librdkafka_murmur2_puts_them(spark: Any, broker: str) -> None:
    ours, theirs = topic_name(), topic_name()
    keys = [f"user-{i}".encode() * (1 + i % 3) for i in range(600)]
    df = spark.createDataFrame([(k, b"v") for k in keys], "key binary, value binary").repartition(2)
    write(df, broker, ours)
    pylog_placed = {m.key: m.partition for m in consume_all(broker, ours, 3)}
    confluent_placed = produce_keys(broker, theirs, keys)
    assert len(pylog_placed) == len(keys)
    assert pylog_placed == confluent_placed
    assert len(set(pylog_placed.values())) == 3


# ---------------------------------------------------------------------------------- codecs and acks


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_each_codec_is_read_back_by_confluent_kafka(spark: Any, broker: str, codec: str) -> None:
    topic = topic_name()
    df = spark.range(0, 3000, 1, 2).selectExpr(
        "cast(id as string) as key", "repeat(cast(id as string), 20) as value"
    )
    write(df, broker, topic, **{"kafka.compression.type": codec})
    got = read_back(spark, broker, topic).drop("partition")
    expected = df.select(F.col("key").cast("binary"), F.col("value").cast("binary"))
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(spark: Any, broker: str, acks: str) -> None:
    topic = topic_name()
    df = spark.range(0, 2000, 1, 2).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    write(df, broker, topic, **{"kafka.acks": acks})
    deadline = time.monotonic() + 10
    while sum(partition_counts(broker, topic, 3).values()) < 2000 and time.monotonic() < deadline:
        time.sleep(0.2)  # acks=0: the broker may still be appending what was written to the socket
    assert sum(partition_counts(broker, topic, 3).values()) == 2000


# -------------------------------------------------------------------------------- errors and modes


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"kafka.acks": "2"}, "kafka.acks"),
        ({"kafka.compression.type": "brotli"}, "zstd"),
        ({"kafka.linger.ms": "soon"}, "kafka.linger.ms"),
        (
            {"kafka.sasl.mechanism": "PLAIN", "kafka.security.protocol": "SASL_PLAINTEXT"},
            "kafka.sasl.jaas.config is required",
        ),
        ({"kafka.no.such.setting": "1"}, "kafka.no.such.setting"),
    ],
)
def test_bad_options_fail_before_any_task(
    spark: Any, broker: str, options: dict[str, str], fragment: str
) -> None:
    topic = topic_name()
    df = spark.range(3).selectExpr("cast(id as string) as value")
    with pytest.raises(Exception, match=fragment):
        write(df, broker, topic, **options)
    assert sum(partition_counts(broker, topic, 3).values()) == 0


@pytest.mark.parametrize(
    "exprs, topic, fragment",
    [
        (["cast(id as string) as key"], "t", "'value' not found"),
        (["id as value"], "t", "value attribute type must be a string or binary"),
        (["cast(id as string) as value", "id as partition"], "t", "partition attribute type must be an int"),
        (["cast(id as string) as value"], None, "Topic option required"),
    ],
)
def test_bad_columns_fail_naming_the_column(
    spark: Any, broker: str, exprs: list[str], topic: str | None, fragment: str
) -> None:
    with pytest.raises(Exception, match=fragment):
        write(spark.range(3).selectExpr(*exprs), broker, topic)


def test_unknown_partition_fails_naming_topic_and_partition(spark: Any, broker: str) -> None:
    topic = topic_name()
    df = spark.range(0, 10, 1, 1).selectExpr("cast(id as string) as value", "cast(7 as int) as partition")
    with pytest.raises(Exception, match=r"\[7\] are not partitions of topic"):
        write(df, broker, topic)
    assert sum(partition_counts(broker, topic, 3).values()) == 0


def test_null_topic_in_the_topic_column_fails(spark: Any, broker: str) -> None:
    df = spark.range(0, 4, 1, 1).selectExpr("cast(null as string) as topic", "cast(id as string) as value")
    with pytest.raises(Exception, match="null topic present"):
        write(df, broker)


def test_overwrite_is_rejected(spark: Any, broker: str) -> None:
    df = spark.range(3).selectExpr("cast(id as string) as value")
    with pytest.raises(Exception, match="overwrite not allowed"):
        df.write.format("pylog").option("kafka.bootstrap.servers", broker).option("topic", "t").mode(
            "overwrite"
        ).save()


# ------------------------------------------------------------------------------ failures and retries


def _slow_rows(spark: Any, batches: int, rows: int, delay_s: float) -> Any:
    """A DataFrame whose single partition yields ``batches`` Arrow batches ``delay_s`` apart."""

    def gen(_: Any) -> Any:
        for b in range(batches):
            time.sleep(delay_s)
            ids = pa.array(range(b * rows, (b + 1) * rows), pa.int64())
            yield pa.RecordBatch.from_arrays(
                [pa.compute.cast(ids, pa.string()), pa.compute.cast(ids, pa.string())], ["key", "value"]
            )

    return spark.range(0, 1, 1, 1).mapInArrow(gen, "key string, value string")


def test_broker_stopped_mid_write_fails_the_job_clearly(spark: Any, tmp_path: Path) -> None:
    address = ensure_embedded_broker(tmp_path)  # auto-created topics get 1 partition
    topic = topic_name()
    # Spark hands the writer Arrow batches of (up to) 10,000 rows as they are produced.
    df = _slow_rows(spark, batches=30, rows=10000, delay_s=0.1)
    seen_before_stop: list[int] = []

    def stop_once_records_arrive() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            count = partition_counts(address, topic, 1)[0]
            if count > 0:
                seen_before_stop.append(count)
                break
            time.sleep(0.05)
        stop_embedded_broker(tmp_path)

    stopper = threading.Thread(target=stop_once_records_arrive)
    stopper.start()
    try:
        with pytest.raises(Exception) as info:
            write(
                df,
                address,
                topic,
                **{
                    "kafka.linger.ms": "0",
                    "kafka.delivery.timeout.ms": "1500",
                    "kafka.request.timeout.ms": "1000",
                },
            )
    finally:
        stopper.join()
        stop_embedded_broker(tmp_path)
    assert seen_before_stop and 0 < seen_before_stop[0] < 300000, (
        "the broker must stop in the middle of the write"
    )
    text = str(info.value)
    # The first attempt runs out of delivery.timeout.ms; a retried attempt cannot even reach the broker.
    assert (
        f"writing to topic '{topic}' partition 0 failed" in text
        or f"broker {address}: cannot connect" in text
    ), text[-3000:]


def _duplicates(messages: list[Any]) -> int:
    values = [m.value for m in messages]
    return len(values) - len(set(values))


def test_lost_responses_are_resent_without_duplicates_when_idempotent(spark: Any, broker: str) -> None:
    topic = topic_name()
    df = spark.range(0, 20000, 1, 1).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    write(df, broker, topic, **{"kafka.batch.size": "2048", "pylog.test.dropResponseAfterRequests": "3"})
    messages = consume_all(broker, topic, 3)
    assert len(messages) == 20000 and _duplicates(messages) == 0


def test_lost_responses_duplicate_without_idempotence(spark: Any, broker: str) -> None:
    """The control experiment: the same fault with idempotence off does write duplicates."""
    topic = topic_name()
    df = spark.range(0, 20000, 1, 1).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    write(
        df,
        broker,
        topic,
        **{
            "kafka.batch.size": "2048",
            "kafka.enable.idempotence": "false",
            "pylog.test.dropResponseAfterRequests": "3",
        },
    )
    messages = consume_all(broker, topic, 3)
    assert _duplicates(messages) > 0 and len({m.value for m in messages}) == 20000


def test_a_retried_task_writes_no_duplicates_when_idempotent(spark: Any, broker: str) -> None:
    """The first attempt of the task fails after 3 acknowledged requests; Spark's retry resumes its producer."""
    topic = topic_name()
    df = spark.range(0, 20000, 1, 1).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    write(df, broker, topic, **{"kafka.batch.size": "2048", "pylog.test.failAfterRequests": "3"})
    messages = consume_all(broker, topic, 3)
    assert _duplicates(messages) == 0 and len(messages) == 20000
    # Per partition, the log holds the rows in their input order (the resumed attempt continued, not restarted).
    for p in range(3):
        ids = [int(m.value or b"") for m in messages if m.partition == p]
        assert ids == sorted(ids)


def test_a_retried_task_duplicates_without_idempotence(spark: Any, broker: str) -> None:
    """Control experiment: at-least-once without idempotence, the retried task rewrites what it had sent."""
    topic = topic_name()
    df = spark.range(0, 20000, 1, 1).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    write(
        df,
        broker,
        topic,
        **{
            "kafka.batch.size": "2048",
            "kafka.enable.idempotence": "false",
            "pylog.test.failAfterRequests": "3",
        },
    )
    messages = consume_all(broker, topic, 3)
    assert _duplicates(messages) > 0 and len({m.value for m in messages}) == 20000


def test_a_committed_write_leaves_no_producer_state(spark: Any, broker: str, tmp_path: Path) -> None:
    """commit() removes the write's producer-state folder, also after a retried task used it."""
    topic = topic_name()
    state = tmp_path / "producer-state"
    df = spark.range(0, 20000, 1, 2).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    write(
        df,
        broker,
        topic,
        **{
            "kafka.batch.size": "2048",
            "pylog.test.failAfterRequests": "3",
            "pylog.producerStateDir": str(state),
        },
    )
    messages = consume_all(broker, topic, 3)
    assert _duplicates(messages) == 0 and len(messages) == 20000
    assert list(state.iterdir()) == []


def test_an_aborted_write_leaves_no_producer_state(spark: Any, broker: str, tmp_path: Path) -> None:
    state = tmp_path / "producer-state"
    df = spark.range(0, 100, 1, 1).selectExpr("cast(null as string) as topic", "'v' as value")
    with pytest.raises(Exception, match="topic"):
        write(df, broker, None, **{"pylog.producerStateDir": str(state)})
    assert list(state.iterdir()) == []


def test_a_record_over_max_request_size_fails_naming_the_option(spark: Any, broker: str) -> None:
    topic = topic_name()
    df = spark.range(0, 1, 1, 1).selectExpr("repeat('x', 2000000) as value")
    with pytest.raises(Exception, match=r"larger than kafka.max.request.size=1048576"):
        write(df, broker, topic)


def test_a_non_retriable_broker_error_names_topic_partition_and_error(spark: Any, broker: str) -> None:
    """The broker refuses a 2 MB batch (message.max.bytes 1048588): MESSAGE_TOO_LARGE fails the task."""
    topic = topic_name()
    df = spark.range(0, 1, 1, 1).selectExpr("repeat('x', 2000000) as value", "cast(1 as int) as partition")
    with pytest.raises(
        Exception, match=rf"writing to topic '{topic}' partition 1 failed: MESSAGE_TOO_LARGE \(10\)"
    ):
        write(df, broker, topic, **{"kafka.max.request.size": "4194304"})


def test_sticky_null_keys_move_on_after_batch_size_bytes(spark: Any, broker: str) -> None:
    """Null keys stick to one partition per ~batch.size bytes, then move: partitions are first touched while
    requests for others are in flight (the producer asks for their start offsets on the same connections)."""
    topic = topic_name()
    df = spark.range(0, 20000, 1, 1).selectExpr(
        "cast(null as binary) as key", "repeat(cast(id as string), 20) as value"
    )
    write(df, broker, topic, **{"kafka.batch.size": "4096"})
    messages = consume_all(broker, topic, 3)
    assert len(messages) == 20000 and _duplicates(messages) == 0
    counts = [sum(1 for m in messages if m.partition == p) for p in range(3)]
    assert min(counts) > 2000, counts  # spread over every partition, not stuck on one


def test_a_topic_first_seen_mid_task_while_requests_are_in_flight(spark: Any, broker: str) -> None:
    a, b = topic_name(), topic_name()
    df = spark.range(0, 30000, 1, 1).selectExpr(
        f"if(id < 25000, '{a}', '{b}') as topic", "cast(id as string) as key", "cast(id as string) as value"
    )
    write(df, broker, None, **{"kafka.batch.size": "2048"})
    assert len(consume_all(broker, a, 3)) == 25000
    assert len(consume_all(broker, b, 3)) == 5000


def test_a_retry_with_different_input_fails_instead_of_losing_records(spark: Any, broker: str) -> None:
    """Resuming is only sound for deterministic input: the retry checks the resume point and refuses."""
    topic = topic_name()

    def attempt_dependent(batches: Any) -> Any:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        shift = 1_000_000 * (ctx.attemptNumber() if ctx is not None else 0)
        for batch in batches:
            ids = pa.compute.add(batch.column(0), shift)
            yield pa.RecordBatch.from_arrays([pa.compute.cast(ids, pa.string())], ["value"])

    df = spark.range(0, 20000, 1, 1).mapInArrow(attempt_dependent, "value string")
    with pytest.raises(Exception, match="input is not deterministic"):
        write(df, broker, topic, **{"kafka.batch.size": "2048", "pylog.test.failAfterRequests": "3"})


def test_a_retried_task_with_null_keys_writes_no_duplicates(spark: Any, broker: str) -> None:
    """Sticky placement of null keys is seeded per task, so the retry places rows as the failed attempt did."""
    topic = topic_name()
    df = spark.range(0, 20000, 1, 1).selectExpr("cast(id as string) as value")
    write(df, broker, topic, **{"kafka.batch.size": "2048", "pylog.test.failAfterRequests": "3"})
    messages = consume_all(broker, topic, 3)
    assert _duplicates(messages) == 0 and len(messages) == 20000
    assert len({m.partition for m in messages}) == 3


def test_written_rows_read_back_with_format_pylog(spark: Any, broker: str) -> None:
    """... and the console lists the write (its provenance record, written by the driver after the commit)."""
    topic = topic_name()
    df = spark.range(0, 1000, 1, 2).selectExpr(
        "cast(cast(id as string) as binary) as key",
        "cast(concat('v', cast(id as string)) as binary) as value",
        "array(named_struct('key', 'h', 'value', cast(cast(id as string) as binary))) as headers",
    )
    write(df, broker, topic)
    back = (
        spark.read.format("pylog")
        .option("kafka.bootstrap.servers", broker)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    assert_df_equality(
        back.select("key", "value", "headers"), df, ignore_row_order=True, ignore_nullable=True
    )
    assert back.filter(f"timestampType != 0 or topic != '{topic}'").count() == 0
    _console_lists_the_write(broker, topic, rows=1000, tasks=2)


def _console_lists_the_write(bootstrap: str, topic: str, rows: int, tasks: int) -> None:
    """The driver recorded the committed write (``__pylog_spark_writes``) and the web console's topic page lists
    it: its rows, tasks, delivery and the offsets each partition received."""
    import re
    import urllib.request

    from broker_runtime.client import KafkaClient
    from broker_runtime.console.server import ConsoleServer
    from broker_runtime.protocol.messages import LATEST_TIMESTAMP

    with KafkaClient(bootstrap) as client:
        tps = [(topic, p) for p in client.partitions_for(topic)]
        ends = client.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP))
    expected = ", ".join(f"{p}@0..{end - 1}" for (_, p), (end, _) in sorted(ends.items()) if end > 0)
    with (
        ConsoleServer(bootstrap) as console,
        urllib.request.urlopen(f"{console.url}topics/{topic}") as answer,
    ):
        page = answer.read().decode()
    assert 'id="spark-writes"' in page, "no Spark write listed on the topic page"
    table = page.split('id="spark-writes"', 1)[1].split("</table>", 1)[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", table)
    assert len(cells) == 10, table  # one write
    write_id, kind, _, _, delivery, n_tasks, all_rows, here, _, ranges = cells
    assert write_id.startswith("write-") and kind == "batch" and delivery == "idempotent", cells
    assert (n_tasks, all_rows, here) == (str(tasks), str(rows), str(rows)), cells
    assert ranges == expected, (ranges, expected)
