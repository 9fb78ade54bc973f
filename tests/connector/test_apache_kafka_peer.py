"""The connector against Apache Kafka: the tests it has against pylog's broker, run against the real thing.

Most tests here ARE tests of the connector's other modules (imported, not copied: :func:`peer` takes a copy of
the function with its ``compat`` mark, so the original keeps running against pylog unmarked): this module only
gives them Apache Kafka's broker through the fixtures they take. ``broker``, ``rbroker``, ``sbroker`` and
``txn_broker`` are the session's Apache Kafka node (``apache_kafka``: one KRaft node with 3 partitions per
auto-created topic and retention off, as the pylog brokers of those modules); their log directory is that node's,
so ``pylog.transport=local`` (and ``auto``) read the files Apache Kafka wrote. The records are checked as in the
original tests (confluent-kafka, or the connector's own reader compared with what was sent), and where the issue
asks for Kafka's own judgement, by Kafka's Java consumer (``kafka-console-consumer --isolation-level
read_committed``, :func:`kafka_read_committed`).

Written here, because their setup is Kafka's: the leader SIGKILL of one node of the 3-node
``apache_kafka_cluster`` during an acks=all write, and SASL_SSL with SCRAM-SHA-512 and ACLs
(``apache_kafka_secured``). A test listed here is one whose behaviour should be the same on both brokers; a
difference found is fixed in the connector, never in the test.
"""

from __future__ import annotations

import re
import sys
import types
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.launch import create_topic
from jobs.bench.sink_chaos import ChaosOutcome, kill_runs, outcome, write_input
from tests.connector import (
    test_failover_spark,
    test_reader,
    test_stream_exactly_once,
    test_stream_reader,
    test_writer,
    test_writer_transactional,
)
from tests.support.apache_kafka import KafkaCluster, run_tool
from tests.support.cluster import metadata, partition_state, wait_for

pytestmark = pytest.mark.timeout(300)

PEER = "kafka-broker"


def peer(test: Any, feature: str, *, differs: str | None = None, parametrize: Any = None) -> Any:
    """A copy of another module's ``test`` carrying ``compat(PEER, feature)`` and the marks of its own module
    (``slow``, ``timeout``), with ``parametrize`` instead of its own when given. A copy: marking the original
    would mark it in its own module too."""
    copy = types.FunctionType(
        test.__code__, test.__globals__, test.__name__, test.__defaults__, test.__closure__
    )
    copy.__dict__.update(test.__dict__)
    copy.__kwdefaults__ = test.__kwdefaults__
    copy.__annotations__ = dict(test.__annotations__)
    copy.__doc__ = test.__doc__
    own_module = sys.modules[test.__module__].__dict__.get("pytestmark", [])
    marks = [
        *(own_module if isinstance(own_module, list) else [own_module]),
        *getattr(test, "pytestmark", []),
    ]
    marks = [getattr(m, "mark", m) for m in marks]
    if parametrize is not None:
        marks = [m for m in marks if m.name != "parametrize"] + [parametrize.mark]
    kwargs = {"differs": differs} if differs else {}
    copy.pytestmark = [*marks, pytest.mark.compat(PEER, feature, **kwargs).mark]
    return copy


# --------------------------------------------------------------------------------------------- the brokers


@pytest.fixture(scope="module")
def broker(apache_kafka: KafkaCluster) -> str:
    return apache_kafka.bootstrap


@pytest.fixture(scope="module")
def rbroker(apache_kafka: KafkaCluster) -> tuple[str, str]:
    return apache_kafka.bootstrap, str(apache_kafka.nodes[0].data_dir)


@pytest.fixture(scope="module")
def sbroker(apache_kafka: KafkaCluster) -> tuple[str, str]:
    return apache_kafka.bootstrap, str(apache_kafka.nodes[0].data_dir)


@pytest.fixture(scope="module")
def txn_broker(apache_kafka: KafkaCluster) -> str:
    return apache_kafka.bootstrap


# --------------------------------------------------------------------------------------------- Kafka's judge


#: The key of every record of the control topic (:func:`control_topic`), which Kafka's judge reads beside the
#: topic under test (the console consumer's formatter does not print the topic).
CONTROL_KEY = "pylog-control"


def kafka_read_committed(
    bootstrap: str, topic: str, control_topic: str
) -> tuple[list[tuple[int, int, str, str]], int]:
    """What Kafka's Java consumer returns of ``topic`` with ``isolation.level=read_committed``
    (``kafka-console-consumer`` from the beginning, one JVM, ``topic`` and ``control_topic`` together):
    ``(partition, offset, key, value)`` in partition/offset order, and how many control records it returned
    (all of them, or the consumer stopped before it had read everything). The tool stops 3 s after the last
    record it got."""
    done = run_tool(
        "kafka-console-consumer",
        "--bootstrap-server",
        bootstrap,
        "--include",
        f"{re.escape(topic)}|{re.escape(control_topic)}",
        "--from-beginning",
        "--isolation-level",
        "read_committed",
        "--timeout-ms",
        "3000",
        *(
            arg
            for prop in ("print.partition=true", "print.offset=true", "print.key=true", "key.separator=|")
            for arg in ("--formatter-property", prop)
        ),
        check=False,
    )
    # It ends by its timeout: exit 0 and "Processed a total of N messages" on stderr.
    found = re.search(r"Processed a total of (\d+) messages", done.stderr)
    assert done.returncode == 0 and found, done.stderr[-3000:]
    records, control = [], 0
    for line in done.stdout.splitlines():
        fields = re.fullmatch(r"Partition:(\d+)\|Offset:(\d+)\|([^|]*)\|(.*)", line)
        assert fields, f"unexpected kafka-console-consumer line {line!r}"
        partition, offset, key, value = fields.groups()
        if key == CONTROL_KEY:
            control += 1
        else:
            records.append((int(partition), int(offset), key, value))
    assert len(records) + control == int(found.group(1)), (found.group(0), len(done.stdout))
    return sorted(records), control


@pytest.fixture(scope="module")
def control_topic(broker: str, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A topic holding 30 committed records (a transactional write of the connector, key :data:`CONTROL_KEY`):
    Kafka's judge reads it beside the topic under test, so that "nothing visible" means the consumer did read
    and found nothing, not that it stopped before its first fetch."""
    topic = f"control-{uuid.uuid4().hex[:8]}"
    df = spark.range(0, 30, 1, 1).selectExpr(f"'{CONTROL_KEY}' as key", "cast(id as string) as value")
    test_writer_transactional._write(df, broker, topic, tmp_path_factory.mktemp("control"))
    return topic


@pytest.fixture(scope="module")
def read_committed(control_topic: str) -> Callable[[str, str], list[bytes]]:
    """test_writer_transactional's judge: Kafka's Java consumer with read_committed."""

    def read(bootstrap: str, topic: str) -> list[bytes]:
        records, control = kafka_read_committed(bootstrap, topic, control_topic)
        assert control == 30, f"Kafka's consumer returned {control} of the 30 control records"
        return [value.encode() for _, _, _, value in records]

    return read


@pytest.fixture(scope="module")
def chaos_judge(control_topic: str) -> Callable[[str, str, int, int], ChaosOutcome]:
    """test_stream_exactly_once's judge: Kafka's Java consumer with read_committed."""

    def judge(bootstrap: str, topic: str, partitions: int, total: int) -> ChaosOutcome:
        records, control = kafka_read_committed(bootstrap, topic, control_topic)
        assert control == 30, f"Kafka's consumer returned {control} of the 30 control records"
        per_partition: dict[int, list[tuple[int, bytes, int]]] = defaultdict(list)
        for partition, offset, key, value in records:
            assert partition < partitions
            per_partition[partition].append((offset, key.encode(), int(value)))
        return outcome(per_partition, total)

    return judge


# --------------------------------------------------------------------------------------------- batch writes

test_headers_timestamp_and_explicit_partition = peer(
    test_writer.test_headers_timestamp_and_explicit_partition,
    "batch write: headers, CreateTime timestamps, explicit partitions",
)
test_acks = peer(test_writer.test_acks, "batch write: acks 0, 1, all (idempotent by default)")
test_unknown_partition_fails_naming_topic_and_partition = peer(
    test_writer.test_unknown_partition_fails_naming_topic_and_partition,
    "batch write: a partition the topic lacks fails naming it",
)
test_each_codec_is_read_back_by_confluent_kafka = peer(
    test_writer.test_each_codec_is_read_back_by_confluent_kafka,
    "batch write: every codec (none, gzip, snappy, lz4, zstd)",
)
test_keyed_rows_land_where_librdkafka_murmur2_puts_them = peer(
    test_writer.test_keyed_rows_land_where_librdkafka_murmur2_puts_them,
    "batch write: keyed rows placed by murmur2 as Kafka's producers place them",
)
test_written_rows_read_back_with_format_pylog = peer(
    test_writer.test_written_rows_read_back_with_format_pylog,
    "batch read of what the connector wrote (Fetch)",
)

# --------------------------------------------------------------------------------------------- batch reads

ts_topic = test_reader.ts_topic
big_topic = test_reader.big_topic
test_confluent_kafka_round_trip_every_codec = peer(
    test_reader.test_confluent_kafka_round_trip_every_codec,
    "batch read: every codec, by Fetch and by scanning Kafka's segment files (pylog.transport=local)",
)
test_starting_timestamp_lands_on_first_offset_with_timestamp_at_or_after = peer(
    test_reader.test_starting_timestamp_lands_on_first_offset_with_timestamp_at_or_after,
    "batch read by timestamps (ListOffsets on Kafka's time index)",
)
test_pushdown_same_rows_and_fewer_batches = peer(
    test_reader.test_pushdown_same_rows_and_fewer_batches,
    "batch read with pushdown of partition, offset and timestamp filters (the Fetch path)",
)
# test_reader.test_direct_scan_and_fetch_give_identical_dataframes cannot run as it is: it needs several
# segments of 64 KiB, and Apache Kafka 4.x refuses a segment.bytes under 1 MiB.

# --------------------------------------------------------------------------------------------- streaming source

test_concurrent_producers_every_record_once_in_order_and_rate_limited = peer(
    test_stream_reader.test_concurrent_producers_every_record_once_in_order_and_rate_limited,
    "streaming read: every record once, in order, maxOffsetsPerTrigger",
)
test_min_offsets_per_trigger_waits_for_enough_data_or_max_trigger_delay = peer(
    test_stream_reader.test_min_offsets_per_trigger_waits_for_enough_data_or_max_trigger_delay,
    "streaming read: minOffsetsPerTrigger and maxTriggerDelay",
)
test_available_now_stops_at_the_offsets_latest_at_start_while_data_arrives = peer(
    test_stream_reader.test_available_now_stops_at_the_offsets_latest_at_start_while_data_arrives,
    "streaming read: Trigger.AvailableNow",
)
test_restart_from_checkpoint_continues_exactly_and_trigger_once = peer(
    test_stream_reader.test_restart_from_checkpoint_continues_exactly_and_trigger_once,
    "streaming read: restart from the checkpoint, Trigger.Once",
)
test_read_committed_stream_stops_at_an_open_transaction_and_drops_aborted_ones = peer(
    test_stream_reader.test_read_committed_stream_stops_at_an_open_transaction_and_drops_aborted_ones,
    "streaming read: kafka.isolation.level=read_committed (open and aborted transactions)",
)


@pytest.fixture(scope="module")
def retention_broker(apache_kafka: KafkaCluster) -> tuple[str, str]:
    return apache_kafka.bootstrap, str(apache_kafka.nodes[0].data_dir)


class TimeRetention(test_stream_reader.Retention):
    """Retention on Apache Kafka, whose segments are 1 MiB at least: by time. Records 0..1999 carry a CreateTime
    of 2023 (each append of them rolls a segment, its first record being older than segment.ms), the rest the
    time they are written; once all are written the topic gets ``retention.ms`` of an hour, and the next
    retention check (every 200 ms on the shared node) deletes every segment of 2023 records: the log then starts
    at offset 2000."""

    def timestamp(self, i: int) -> int:
        return test_reader.T0 + i if i < 2000 else 0

    def start(self, address: str, topic: str) -> None:
        with KafkaClient(address) as client:
            client.alter_configs(2, topic, {"retention.ms": "3600000"})  # 2: TOPIC


@pytest.fixture(scope="module")
def retention() -> test_stream_reader.Retention:
    return TimeRetention()


test_retention_between_batches_with_fail_on_data_loss_both_ways = peer(
    test_stream_reader.test_retention_between_batches_with_fail_on_data_loss_both_ways,
    "streaming read: failOnDataLoss true and false after retention deleted unread records",
)

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
    test_stream_exactly_once._finish_and_judge(spark, stream, total, seed, landed, judge_with=chaos_judge)


# --------------------------------------------------------------------------------------------- failover


@pytest.mark.slow
@pytest.mark.compat(
    PEER, "batch write through a SIGKILL of the partition leader of a 3-node cluster (acks=all)"
)
def test_writer_rides_through_a_kafka_leader_sigkill_with_every_row_once(
    spark: Any, apache_kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """RF=3, min.insync.replicas=2: partition 0's leader is SIGKILLed inside the connector's acks=all write
    (test_failover_spark's gate: the tasks wait with a third of their rows still to write until it is dead);
    every row is then in the topic exactly once, read from the new leaders."""
    cluster, n, topic = apache_kafka_cluster, 30_000, f"failover-{uuid.uuid4().hex[:6]}"
    create_topic(
        cluster.bootstrap, topic, 3, {"min.insync.replicas": "2"}, replication_factor=3, timeout_s=60
    )
    nodes = {node.node_id: node for node in cluster.nodes}

    def leader(bootstrap: str) -> int:
        """Partition 0's leader as the node at ``bootstrap`` knows it; -1 before it knows the topic."""
        partitions = metadata(bootstrap, [topic])["Topics"][0]["Partitions"]
        return int(partitions[0]["LeaderId"]) if partitions else -1

    wait_for(
        lambda: all(leader(node.bootstrap) > 0 for node in cluster.nodes),
        what=f"every node to know the leader of {topic}",
    )
    victim = leader(cluster.nodes[0].bootstrap)
    survivor = next(node.bootstrap for node in cluster.nodes if node.node_id != victim)
    test_failover_spark.write_through_a_leader_kill(
        spark, cluster.bootstrap, nodes[victim].bootstrap, topic, n, nodes[victim].kill, tmp_path / "gate"
    )
    new = partition_state(survivor, topic, 0)
    assert new["LeaderId"] not in (victim, -1), new
    # The dead node is first in the bootstrap list when it was node 1.
    test_failover_spark._assert_exactly_once(
        test_failover_spark._read(spark, cluster.bootstrap, topic, **{"pylog.transport": "fetch"}), n
    )


# --------------------------------------------------------------------------------------------- security


def _admin_security(cluster: KafkaCluster) -> Any:
    from broker_runtime.security.client_security import ClientSecurity

    assert cluster.secured is not None
    return ClientSecurity.from_properties(cluster.secured.client_properties(cluster.secured.admin))


@pytest.mark.compat(PEER, "transactions: the first InitProducerId of a new cluster waits for its coordinator")
def test_the_first_transactional_id_of_a_new_cluster_waits_for_its_coordinator(
    apache_kafka_secured: KafkaCluster,
) -> None:
    """Kafka creates ``__transaction_state`` on the first FindCoordinator for a transactional id and answers
    COORDINATOR_NOT_AVAILABLE meanwhile; its producer looks again until max.block.ms. The connector's client
    does too, within its retry budget (the task's kafka.delivery.timeout.ms). The secured node is this
    module's own and nothing else here uses transactions on it: the call is the cluster's first."""
    cluster = apache_kafka_secured
    with KafkaClient(cluster.bootstrap, security=_admin_security(cluster), retry_timeout_ms=60000) as client:
        assert "__transaction_state" not in client.metadata().topics, "not the cluster's first transaction"
        producer_id, epoch = client.init_producer_id("pylog-first-transaction", 60000)
    assert producer_id >= 0 and epoch == 0


def _secured_options(cluster: KafkaCluster, user: str, password: str | None = None) -> dict[str, str]:
    assert cluster.secured is not None
    props = cluster.secured.client_properties(user)
    if password is not None:
        props["sasl.jaas.config"] = props["sasl.jaas.config"].replace(cluster.secured.users[user], password)
    return {f"kafka.{k}": v for k, v in props.items()}


def _kafka_acls(cluster: KafkaCluster, tmp_path: Path, *args: str) -> str:
    """kafka-acls as the super user over the SASL_SSL listener; its stdout."""
    assert cluster.secured is not None
    config = tmp_path / "admin.properties"
    props = cluster.secured.client_properties(cluster.secured.admin)
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return run_tool(
        "kafka-acls", "--bootstrap-server", cluster.bootstrap, "--command-config", str(config), *args
    ).stdout


@pytest.mark.compat(PEER, "SASL_SSL with SCRAM-SHA-512: batch write and read")
@pytest.mark.compat(
    PEER, "ACLs (StandardAuthorizer): allowed topics written and read, others refused by name"
)
def test_sasl_ssl_scram_sha_512_and_acls(
    spark: Any, apache_kafka_secured: KafkaCluster, tmp_path: Path
) -> None:
    """User ``spark`` may write and read topics prefixed ``granted-``; ``mallory`` has no ACL. The connector logs
    in with SCRAM-SHA-512 over TLS (Kafka's PEM key store), writes and reads back a granted topic, and is refused
    a topic it has no ACL for (Kafka's TOPIC_AUTHORIZATION_FAILED named with the topic), and a wrong password
    (SASL authentication failed), without the password in the message."""
    cluster = apache_kafka_secured
    assert cluster.secured is not None
    granted, refused = f"granted-{uuid.uuid4().hex[:6]}", f"refused-{uuid.uuid4().hex[:6]}"
    with KafkaClient(cluster.bootstrap, security=_admin_security(cluster)) as client:
        codes = client.create_topics({granted: (3, 1), refused: (3, 1)})
        assert set(codes.values()) == {0}, codes
    listed = _kafka_acls(
        cluster,
        tmp_path,
        "--add",
        "--allow-principal",
        "User:spark",
        "--operation",
        "Write",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        "granted-",
        "--resource-pattern-type",
        "prefixed",
    )
    assert "User:spark" in listed and "granted-" in listed, listed

    rows = [(f"k{i}", f"v{i}") for i in range(300)]
    df = spark.createDataFrame(rows, "key string, value string")

    def write(topic: str, user: str, password: str | None = None) -> None:
        writer = df.write.format("pylog").option("kafka.bootstrap.servers", cluster.bootstrap)
        writer = writer.option("topic", topic)
        for k, v in _secured_options(cluster, user, password).items():
            writer = writer.option(k, v)
        writer.mode("append").save()

    def read(topic: str, user: str) -> list[tuple[str, str]]:
        reader = spark.read.format("pylog").option("kafka.bootstrap.servers", cluster.bootstrap)
        reader = reader.option("subscribe", topic)
        for k, v in _secured_options(cluster, user).items():
            reader = reader.option(k, v)
        got = reader.load().selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v").collect()
        return sorted((r.k, r.v) for r in got)

    write(granted, "spark")
    assert read(granted, "spark") == sorted(rows)

    with pytest.raises(Exception) as denied:
        write(refused, "spark")
    text = str(denied.value)
    assert "TOPIC_AUTHORIZATION_FAILED" in text and refused in text, text[-3000:]
    assert "auto-creation" not in text, "a refused topic must not be reported as a missing one"
    with pytest.raises(Exception) as denied_read:
        read(granted, "mallory")
    text = str(denied_read.value)
    assert "TOPIC_AUTHORIZATION_FAILED" in text and granted in text, text[-3000:]
    with pytest.raises(Exception) as bad_login:
        write(granted, "spark", "not-the-password")
    text = str(bad_login.value)
    assert "not-the-password" not in text and "spark-secret" not in text
    assert re.search(r"(?i)authentication failed", text), text[-3000:]
    assert read(granted, "spark") == sorted(rows), "the refused writes wrote nothing"
