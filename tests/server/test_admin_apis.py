"""The admin APIs on one broker, driven by real admin clients: confluent-kafka's AdminClient (librdkafka) and
kafka-python's KafkaAdminClient. Each goes create -> create partitions -> alter configs -> describe -> delete
and checks the broker's files, not only the answers; DeleteRecords is checked by a fetch below the new log
start (OFFSET_OUT_OF_RANGE), deleted segments and a restart; a dynamic retention change (topic, then broker
default) takes effect without a restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
)
from confluent_kafka.admin import NewTopic as CkNewTopic
from kafka import KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic

from broker_runtime.client import KafkaClient, NewTopic
from broker_runtime.errors import ErrorCode
from broker_runtime.launch.process import broker_process
from broker_runtime.protocol.messages import EARLIEST_TIMESTAMP, ApiKey
from broker_runtime.server.config import BROKER_CONFIGS, BrokerConfig
from broker_runtime.server.node.broker import Broker
from tests.server.rawclient import request
from tests.support.cluster import wait_for
from tests.support.processes import kill_broker

pytestmark = pytest.mark.timeout(90)


def _start(log_dir: Path, **extra: str) -> Broker:
    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(log_dir), **extra}
    return Broker(BrokerConfig.from_properties(props)).start()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture
def broker(log_dir: Path) -> Iterator[Broker]:
    instance = _start(log_dir, **{"log.retention.check.interval.ms": "100"})
    try:
        yield instance
    finally:
        instance.stop()


def _partition_dirs(log_dir: Path, topic: str) -> list[str]:
    return sorted(p.name for p in log_dir.iterdir() if p.is_dir() and p.name.rsplit("-", 1)[0] == topic)


def test_confluent_admin_create_alter_describe_delete(broker: Broker, log_dir: Path) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([CkNewTopic("ck", 1, 1, config={"retention.ms": "600000"})])["ck"].result(10)
    admin.create_partitions([NewPartitions("ck", 3)])["ck"].result(10)
    assert _partition_dirs(log_dir, "ck") == ["ck-0", "ck-1", "ck-2"]
    # A count not above the current one is refused with Kafka's error.
    with pytest.raises(Exception, match="INVALID_PARTITIONS"):
        admin.create_partitions([NewPartitions("ck", 2)])["ck"].result(10)

    ops = [
        ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ]
    res = ConfigResource("topic", "ck", incremental_configs=ops)
    admin.incremental_alter_configs([res])[res].result(10)
    broker_res = ConfigResource(
        "broker",
        "0",
        incremental_configs=[
            ConfigEntry("log.retention.bytes", "99999999", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([broker_res])[broker_res].result(10)

    described = admin.describe_configs([ConfigResource("topic", "ck")])
    configs = next(iter(described.values())).result(10)
    assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == (
        "1048576",
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
    )
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert (configs["retention.bytes"].value, configs["retention.bytes"].source) == (
        "99999999",
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    )
    # The overrides are persisted with every partition and applied to the open logs.
    log = broker.ctx.topics.get_log("ck", 2)
    assert log is not None and log.config.segment_bytes == 1048576 and log.config.compact
    assert (log_dir / "ck-2" / "topic.config").read_text().count("segment.bytes=1048576") == 1

    # Bad values and unknown topics: Kafka's error codes.
    bad = ConfigResource(
        "topic",
        "ck",
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(Exception, match="INVALID_CONFIG"):
        admin.incremental_alter_configs([bad])[bad].result(10)
    not_list = ConfigResource(
        "topic",
        "ck",
        incremental_configs=[ConfigEntry("segment.ms", "1", incremental_operation=AlterConfigOpType.APPEND)],
    )
    with pytest.raises(Exception, match="INVALID_CONFIG"):
        admin.incremental_alter_configs([not_list])[not_list].result(10)

    # AlterConfigs (not incremental) replaces the whole set: keys not named go back to their defaults.
    replace = ConfigResource("topic", "ck", set_config={"segment.bytes": "2097152"})
    with pytest.warns(DeprecationWarning):
        admin.alter_configs([replace])[replace].result(10)
    log = broker.ctx.topics.get_log("ck", 0)
    assert log is not None and dict(log.config.topic_overrides) == {"segment.bytes": "2097152"}
    assert not log.config.compact

    cluster = admin.describe_cluster().result(10)
    assert [n.id for n in cluster.nodes] == [0] and cluster.controller.id == 0

    admin.delete_topics(["ck"])["ck"].result(10)
    assert _partition_dirs(log_dir, "ck") == []
    assert not [p for p in log_dir.iterdir() if p.name.endswith("-delete")]
    assert "ck" not in admin.list_topics(timeout=10).topics
    with pytest.raises(Exception, match="UNKNOWN_TOPIC_OR_PART"):
        admin.delete_topics(["ck"])["ck"].result(10)


def test_kafka_python_admin_create_alter_describe_delete(broker: Broker, log_dir: Path) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([KpNewTopic("kp", 1, 1)])
        admin.create_partitions({"kp": KpNewPartitions(2)})
        assert _partition_dirs(log_dir, "kp") == ["kp-0", "kp-1"]
        # AlterConfigs replaces the whole set: max.message.bytes set, nothing else kept.
        admin.alter_configs(
            [KpConfigResource(ConfigResourceType.TOPIC, "kp", {"retention.ms": "5000"})], incremental=False
        )
        admin.alter_configs(
            [KpConfigResource(ConfigResourceType.TOPIC, "kp", {"max.message.bytes": "2000"})],
            incremental=False,
        )
        described = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, "kp")])
        topic_configs = described["topic"]["kp"]
        assert {k: (v["value"], v["config_source"]) for k, v in topic_configs.items()} == {
            "retention.ms": ("5000", "DYNAMIC_TOPIC_CONFIG"),
            "max.message.bytes": ("2000", "DYNAMIC_TOPIC_CONFIG"),
        }
        # A record batch bigger than the new max.message.bytes is refused at once (no restart).
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, linger_ms=0)
        try:
            producer.send("kp", b"small", partition=0).get(10)
            with pytest.raises(Exception, match="MessageSizeTooLarge|MESSAGE_TOO_LARGE|TooLarge"):
                producer.send("kp", b"x" * 3000, partition=0).get(10)
        finally:
            producer.close(5)

        producers = admin.describe_producers([KpTopicPartition("kp", 0)])
        (state,) = producers.values()
        assert [p.last_sequence for p in state.active_producers] == [0]

        dirs = admin.describe_log_dirs()
        (entry,) = dirs
        sizes = {
            (t["name"], p["partition_index"]): p["partition_size"]
            for d in entry["log_dirs"]
            for t in d["topics"]
            for p in t["partitions"]
        }
        log = broker.ctx.topics.get_log("kp", 0)
        assert log is not None and sizes[("kp", 0)] == log.size_bytes > 0 and sizes[("kp", 1)] == 0

        assert admin.describe_cluster()["brokers"][0]["port"] == broker.port
        admin.delete_topics(["kp"])
        assert _partition_dirs(log_dir, "kp") == []
    finally:
        admin.close()


def _produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(count):
        producer.produce(topic, b"value-%d" % i, partition=partition)
        producer.flush(10)
    assert producer.flush(10) == 0


def test_delete_records_moves_log_start_deletes_segments_and_survives_restart(log_dir: Path) -> None:
    broker = _start(log_dir)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        # Small segments: one or two batches each, so a delete spans whole segments.
        admin.create_topics([CkNewTopic("dr", 1, 1, config={"segment.bytes": "200"})])["dr"].result(10)
        _produce(broker.bootstrap, "dr", 10)
        log = broker.ctx.topics.get_log("dr", 0)
        assert log is not None and len(log.segments) > 3
        tp = CkTopicPartition("dr", 0, 6)
        deleted = admin.delete_records([tp])[tp].result(10)
        assert deleted.low_watermark == 6
        assert log.log_start_offset == 6
        # Segments wholly below the new start are gone from disk; the one holding offset 6 stays.
        assert all(seg.base_offset <= 6 for seg in log.segments[:1])
        assert min(int(p.stem) for p in (log_dir / "dr-0").glob("*.log")) == log.segments[0].base_offset
        assert log.segments[0].base_offset > 0

        with KafkaClient(broker.bootstrap) as client:
            below = client.fetch({("dr", 0): 2})
            assert below[("dr", 0)].error == ErrorCode.OFFSET_OUT_OF_RANGE
            at = client.fetch({("dr", 0): 6})
            assert at[("dr", 0)].error == ErrorCode.NONE
            # An offset above the high watermark is refused per partition.
            beyond = client.admin.delete_records({("dr", 0): 50})
            assert getattr(beyond[("dr", 0)], "code", None) == ErrorCode.OFFSET_OUT_OF_RANGE
    finally:
        broker.stop()
    # The log start offset survives a restart (log-start-offset-checkpoint).
    restarted = _start(log_dir)
    try:
        with KafkaClient(restarted.bootstrap) as client:
            assert client.list_offsets({("dr", 0): EARLIEST_TIMESTAMP})[("dr", 0)][0] == 6
            assert client.fetch({("dr", 0): 0})[("dr", 0)].error == ErrorCode.OFFSET_OUT_OF_RANGE
    finally:
        restarted.stop()


def test_dynamic_retention_takes_effect_without_restart(broker: Broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for name in ("ret-topic", "ret-broker"):
        admin.create_topics([CkNewTopic(name, 1, 1, config={"segment.bytes": "200"})])[name].result(10)
        _produce(broker.bootstrap, name, 6)
    topic_log = broker.ctx.topics.get_log("ret-topic", 0)
    broker_log = broker.ctx.topics.get_log("ret-broker", 0)
    assert topic_log is not None and broker_log is not None
    time.sleep(0.5)  # several retention passes with the default retention (7 days): nothing goes
    assert topic_log.log_start_offset == 0 and broker_log.log_start_offset == 0

    res = ConfigResource(
        "topic",
        "ret-topic",
        incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([res])[res].result(10)
    wait_for(lambda: topic_log.log_start_offset > 0, what="retention of ret-topic after its retention.ms=1")
    assert broker_log.log_start_offset == 0

    # The cluster-wide broker default (log.retention.ms on broker "") reaches the topic without an override.
    with KafkaClient(broker.bootstrap) as client:
        client.admin.alter_configs(4, "", {"log.retention.ms": "1"})
    wait_for(lambda: broker_log.log_start_offset > 0, what="retention of ret-broker after log.retention.ms=1")
    configs = next(iter(admin.describe_configs([ConfigResource("topic", "ret-broker")]).values())).result(10)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "1",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
    )
    # A broker key that is not dynamic here is refused by name.
    static = ConfigResource(
        "broker",
        "0",
        incremental_configs=[ConfigEntry("num.partitions", "4", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(Exception, match="num.partitions"):
        admin.incremental_alter_configs([static])[static].result(10)


def test_dynamic_broker_configs_persist_across_restart(log_dir: Path) -> None:
    broker = _start(log_dir)
    try:
        with KafkaClient(broker.bootstrap) as client:
            client.admin.alter_configs(4, "", {"log.segment.bytes": "4096"})
    finally:
        broker.stop()
    restarted = _start(log_dir)
    try:
        assert restarted.ctx.topics.base.segment_bytes == 4096
        with KafkaClient(restarted.bootstrap) as client:
            entries = {e.name: e for e in client.admin.describe_config_entries(4, "0")}
            assert (entries["log.segment.bytes"].value, entries["log.segment.bytes"].source) == ("4096", 3)
    finally:
        restarted.stop()


def test_describe_configs_answers_every_declared_broker_config(broker: Broker) -> None:
    """DescribeConfigs of broker "0" lists every declared broker config, as Kafka's ``ConfigHelper`` lists
    ``KafkaConfig``: a key set in the properties at STATIC_BROKER_CONFIG with its declared default as the last
    synonym, a key left alone at DEFAULT_CONFIG, a key without a default with no value and no synonym, a password
    with no value; ReadOnly unless dynamic; ConfigType the declared type. A topic config's synonyms end at its
    broker key's default (Kafka's ``DEFAULT_CONFIG:log.roll.hours=168`` for ``segment.ms``)."""
    with KafkaClient(broker.bootstrap) as client:
        client.admin.create_topics([NewTopic("dc", 1, 1)])
    body = {
        "Resources": [
            {"ResourceType": 4, "ResourceName": "0", "ConfigurationKeys": None},
            {"ResourceType": 2, "ResourceName": "dc", "ConfigurationKeys": ["segment.ms"]},
        ],
        "IncludeSynonyms": True,
        "IncludeDocumentation": False,
    }
    answer = request(broker.bootstrap, ApiKey.DESCRIBE_CONFIGS, 4, body)["Results"]
    assert [r["ErrorCode"] for r in answer] == [0, 0]
    entries = {c["Name"]: c for c in answer[0]["Configs"]}
    assert {key.name for key in BROKER_CONFIGS} <= set(entries)

    def shown(name: str) -> tuple[object, ...]:
        c = entries[name]
        synonyms = [(s["Name"], s["Value"], s["Source"]) for s in c["Synonyms"]]
        return c["Value"], c["ConfigSource"], synonyms, c["ReadOnly"], c["IsSensitive"], c["ConfigType"]

    name = "log.retention.check.interval.ms"  # the fixture sets it to 100
    assert shown(name) == ("100", 4, [(name, "100", 4), (name, "300000", 5)], True, False, 5)
    assert shown("num.partitions") == ("1", 5, [("num.partitions", "1", 5)], True, False, 3)
    assert shown("log.roll.ms") == (None, 5, [], False, False, 5)  # dynamic, no default
    assert shown("log.segment.bytes")[3] is False
    assert shown("ssl.key.password") == (None, 5, [], False, True, 9)  # dynamic per listener
    (segment_ms,) = answer[1]["Configs"]
    assert [(s["Name"], s["Value"], s["Source"]) for s in segment_ms["Synonyms"]] == [
        ("log.roll.hours", "168", 5)
    ]
    assert (segment_ms["Value"], segment_ms["ConfigSource"], segment_ms["ReadOnly"]) == (
        "604800000",
        5,
        False,
    )


def test_describe_topic_partitions_pages_with_a_cursor(broker: Broker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([KpNewTopic("dtp-a", 3, 1), KpNewTopic("dtp-b", 2, 1)])
        seen: list[tuple[str, int]] = []
        cursor = None
        pages = 0
        while True:
            page = admin.describe_topic_partitions(
                ["dtp-b", "dtp-a"], response_partition_limit=2, cursor=cursor
            )
            pages += 1
            for topic in page["topics"]:
                assert topic["error_code"] == 0
                seen += [(topic["name"], p["partition_index"]) for p in topic["partitions"]]
                assert all(p["leader_id"] == 0 and p["isr_nodes"] == [0] for p in topic["partitions"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert pages == 3
        assert seen == [("dtp-a", 0), ("dtp-a", 1), ("dtp-a", 2), ("dtp-b", 0), ("dtp-b", 1)]
        unknown = admin.describe_topic_partitions(["dtp-missing"])["topics"][0]
        assert (unknown["error_code"], unknown["partitions"]) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    finally:
        admin.close()


def test_describe_topic_partitions_sends_empty_elr_lists(broker: Broker) -> None:
    """Both ELR fields are empty lists on the wire, never null, as Kafka's broker sends them: Kafka's admin client
    (``kafka-topics --describe``) reads them without a null check and fails with a NullPointerException."""
    with KafkaClient(broker.bootstrap) as client:
        client.admin.create_topics([NewTopic("dtp-elr", 2, 1)])
        answer = client.request_any(
            ApiKey.DESCRIBE_TOPIC_PARTITIONS,
            lambda version: {"Topics": [{"Name": "dtp-elr"}], "ResponsePartitionLimit": 100, "Cursor": None},
        )
    partitions = answer["Topics"][0]["Partitions"]
    assert [(p["EligibleLeaderReplicas"], p["LastKnownElr"]) for p in partitions] == [([], [])] * 2
    # Kafka's checks of the cursor (the fuzzer found a negative partition index answered with a traceback)
    with KafkaClient(broker.bootstrap) as client:
        for topics, cursor in (
            ([{"Name": "dtp-elr"}], {"TopicName": "dtp-elr", "PartitionIndex": -5}),
            ([{"Name": "dtp-elr"}], {"TopicName": "other", "PartitionIndex": 0}),
            ([], {"TopicName": "dtp-elr", "PartitionIndex": -1}),
        ):
            answer = client.request_any(
                ApiKey.DESCRIBE_TOPIC_PARTITIONS,
                lambda version, t=topics, c=cursor: {"Topics": t, "ResponsePartitionLimit": 100, "Cursor": c},
            )
            assert [(t["Name"], t["ErrorCode"]) for t in answer["Topics"]] == [
                (t["Name"], ErrorCode.INVALID_REQUEST) for t in topics
            ], (topics, cursor, answer)


def test_delete_records_survives_sigkill(tmp_path: Path) -> None:
    """The new log start is checkpointed before DeleteRecords answers: a broker SIGKILLed right after it (no clean
    shutdown, long before the periodic checkpoint) still starts at it, not at its first segment's base."""
    with broker_process(tmp_path) as bootstrap:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([CkNewTopic("drk", 1, 1, config={"segment.bytes": "200"})])["drk"].result(10)
        _produce(bootstrap, "drk", 10)
        with KafkaClient(bootstrap) as client:
            assert client.admin.delete_records({("drk", 0): 5}) == {("drk", 0): 5}
        kill_broker(tmp_path)
    with broker_process(tmp_path) as bootstrap, KafkaClient(bootstrap) as client:
        assert client.list_offsets({("drk", 0): EARLIEST_TIMESTAMP})[("drk", 0)][0] == 5
        assert client.fetch({("drk", 0): 4})[("drk", 0)].error == ErrorCode.OFFSET_OUT_OF_RANGE
