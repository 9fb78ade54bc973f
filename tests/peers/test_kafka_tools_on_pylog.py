"""Apache Kafka's Java client and command-line tools against pylog's broker (a child process on loopback).

Each tool runs as its main class with the pinned release's classpath (``tests/support/apache_kafka``); what it
prints is checked against what pylog's broker holds, read back through pylog's own client.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker_runtime.client import KafkaClient, NewTopic
from broker_runtime.launch import broker_process
from broker_runtime.protocol.compression import CODEC_NAMES
from broker_runtime.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from broker_runtime.protocol.records import RecordBatchBuilder, read_batches
from tests.support.apache_kafka import run_tool
from tests.support.apache_kafka.tool_runner import ToolRunner
from tests.support.cluster import wait_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("apache_kafka_tools")]


@pytest.fixture(scope="module")
def pylog_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pylog-for-kafka-tools")


@pytest.fixture(scope="module")
def pylog(pylog_dir: Path) -> Iterator[str]:
    # No 3 s wait for more members before a first consumer group's rebalance (Kafka's default), as on the
    # Apache Kafka fixtures' nodes.
    overrides = {"group.initial.rebalance.delay.ms": "0"}
    with broker_process(pylog_dir, overrides=overrides) as address:
        yield address


@pytest.fixture
def tools(apache_kafka_tool_runner: ToolRunner) -> ToolRunner:
    return apache_kafka_tool_runner


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _fields(line: str) -> dict[str, str]:
    """``Key: value`` pairs of a kafka-topics --describe line."""
    return dict(re.findall(r"(\w+): (\S*)", line))


def _table(text: str) -> list[list[str]]:
    """The rows of a kafka-transactions table (tab-separated, padded cells), header first."""
    return [[cell.strip() for cell in line.rstrip("\t").split("\t")] for line in text.strip().splitlines()]


@pytest.mark.compat(
    "kafka-tools", "kafka-topics: create with configs, describe, alter partitions, list, delete"
)
def test_kafka_topics_create_describe_alter_list_delete(pylog: str, tools: ToolRunner) -> None:
    topic = _name("kt")
    server = ("--bootstrap-server", pylog)
    created = tools.run(
        "kafka-topics",
        *(*server, "--create", "--topic", topic, "--partitions", "3", "--replication-factor", "1"),
        *("--config", "retention.ms=3600000", "--config", "cleanup.policy=compact"),
    )
    assert created.stdout.strip() == f"Created topic {topic}."
    altered = tools.run("kafka-topics", *server, "--alter", "--topic", topic, "--partitions", "5")
    assert altered.stdout.strip() == ""
    described = tools.run("kafka-topics", *server, "--describe", "--topic", topic)
    header, *partitions = [line.strip() for line in described.stdout.strip().splitlines()]
    fields = _fields(header)
    assert (fields["Topic"], fields["PartitionCount"], fields["ReplicationFactor"]) == (topic, "5", "1")
    configs = dict(kv.split("=", 1) for kv in fields["Configs"].split(","))
    assert configs["retention.ms"] == "3600000" and configs["cleanup.policy"] == "compact"
    with KafkaClient(pylog) as client:
        meta = client.metadata([topic]).topics[topic]
        everything = sorted(client.metadata().topics)
    expected = [
        {
            "Topic": topic,
            "Partition": str(p),
            "Leader": str(m.leader),
            "Replicas": ",".join(map(str, m.replicas)),
            "Isr": ",".join(map(str, m.isr)),
        }
        for p, m in sorted(meta.partitions.items())
    ]
    assert len(expected) == 5
    assert [{k: v for k, v in _fields(line).items() if k in expected[0]} for line in partitions] == expected
    listed = tools.run("kafka-topics", *server, "--list")
    assert listed.stdout.split() == everything and topic in everything

    deleted = tools.run("kafka-topics", *server, "--delete", "--topic", topic)
    assert deleted.stdout.strip() == ""
    with KafkaClient(pylog) as client:
        wait_for(lambda: topic not in client.metadata().topics, what=f"{topic} deleted")
    assert topic not in tools.run("kafka-topics", *server, "--list").stdout.split()


def test_the_tool_runner_answers_as_a_jvm_of_its_own(pylog: str, tools: ToolRunner) -> None:
    """The shared-JVM runner gives what the same main class gives in a JVM of its own: the exit code of the
    tool's first ``Exit.exit`` (kafka-topics exits 0 from inside a try whose catch would print the exception and
    exit 1), the same stdout, and nothing the runner's own exit exception made the tool print."""
    server = ("--bootstrap-server", pylog)
    for args in ((*server, "--list"), (*server, "--describe", "--topic", _name("missing"))):
        alone = run_tool("kafka-topics", *args, check=False)
        shared = tools.run("kafka-topics", *args, check=False)
        assert (shared.returncode, shared.stdout) == (alone.returncode, alone.stdout), args
        assert "ExitCalled" not in shared.stdout + shared.stderr
    assert (alone.returncode, shared.stdout.strip()) == (
        1,
        f"Error while executing topic command : Topic '{args[-1]}' does not exist as expected",
    )


def _configs(text: str) -> dict[str, tuple[str, str, str]]:
    """kafka-configs --describe: name -> (value, sensitive, synonyms) of its ``  name=value sensitive=...
    synonyms={...}`` lines."""
    found = re.findall(r"^  (\S+?)=(.*) sensitive=(true|false) synonyms=\{(.*)\}$", text, flags=re.M)
    return {name: (value, sensitive, synonyms) for name, value, sensitive, synonyms in found}


@pytest.mark.compat(
    "kafka-tools",
    "kafka-configs: describe and alter topic configs and broker defaults",
    differs=(
        "--describe --all of a broker lists the broker configs pylog declares (with pylog's defaults and its "
        "pylog.* keys), not every Kafka broker config"
    ),
)
def test_kafka_configs_describes_and_alters_topic_and_broker_configs(pylog: str, tools: ToolRunner) -> None:
    """kafka-configs (DescribeConfigs with synonyms, IncrementalAlterConfigs) on a topic and on the brokers'
    cluster-wide default: what it prints is what pylog holds, and a dynamic broker default reaches the topic's
    effective value with its source, as Kafka's synonyms show it, down to the broker property's DEFAULT_CONFIG;
    a broker's --all lists every declared config, those left alone at their DEFAULT_CONFIG."""
    topic = _name("kc")
    server = ("--bootstrap-server", pylog)
    as_topic = (*server, "--entity-type", "topics", "--entity-name", topic)
    as_default = (*server, "--entity-type", "brokers", "--entity-default")
    with KafkaClient(pylog) as client:
        client.admin.create_topics([NewTopic(topic, 1, 1, configs={"retention.ms": "3600000"})])
    described = tools.run("kafka-configs", *as_topic, "--describe")
    assert described.stdout.splitlines()[0] == f"Dynamic configs for topic {topic} are:"
    assert _configs(described.stdout) == {
        "retention.ms": (
            "3600000",
            "false",
            "DYNAMIC_TOPIC_CONFIG:retention.ms=3600000, DEFAULT_CONFIG:log.retention.hours=168",
        )
    }
    changed = tools.run(
        "kafka-configs",
        *as_topic,
        "--alter",
        "--add-config",
        "segment.bytes=1048576,max.message.bytes=2000000",
    )
    assert changed.stdout.strip() == f"Completed updating config for topic {topic}."
    tools.run("kafka-configs", *as_topic, "--alter", "--delete-config", "retention.ms")
    tools.run("kafka-configs", *as_default, "--alter", "--add-config", "log.retention.ms=86400000")
    try:
        with KafkaClient(pylog) as client:
            held = {e.name: e for e in client.admin.describe_config_entries(2, topic)}
        assert (held["segment.bytes"].value, held["max.message.bytes"].value) == ("1048576", "2000000")
        assert held["retention.ms"].value == "86400000"  # the topic override went, the broker default applies
        everything = _configs(tools.run("kafka-configs", *as_topic, "--describe", "--all").stdout)
        assert everything["retention.ms"] == (
            "86400000",
            "false",
            "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=86400000, DEFAULT_CONFIG:log.retention.hours=168",
        )
        assert {name: value for name, (value, _, _) in everything.items()} == {
            name: entry.value for name, entry in held.items()
        }
        assert everything["segment.ms"] == ("604800000", "false", "DEFAULT_CONFIG:log.roll.hours=168")
        dynamic = _configs(tools.run("kafka-configs", *as_topic, "--describe").stdout)
        assert set(dynamic) == {"segment.bytes", "max.message.bytes"}
        defaults = tools.run("kafka-configs", *as_default, "--describe").stdout
        assert defaults.splitlines()[0] == "Default configs for brokers in the cluster are:"
        assert _configs(defaults) == {
            "log.retention.ms": (
                "86400000",
                "false",
                "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=86400000",
            )
        }
        broker = _configs(
            tools.run(
                "kafka-configs",
                *server,
                "--describe",
                "--entity-type",
                "brokers",
                "--entity-name",
                "0",
                "--all",
            ).stdout
        )
        assert broker["group.initial.rebalance.delay.ms"] == (
            "0",
            "false",
            "STATIC_BROKER_CONFIG:group.initial.rebalance.delay.ms=0, "
            "DEFAULT_CONFIG:group.initial.rebalance.delay.ms=3000",
        )
        assert broker["log.retention.ms"][0] == "86400000"
        assert broker["log.roll.hours"] == ("168", "false", "DEFAULT_CONFIG:log.roll.hours=168")
        assert broker["log.roll.ms"] == ("null", "false", "")  # no default: Kafka's null, no synonym
    finally:
        tools.run("kafka-configs", *as_default, "--alter", "--delete-config", "log.retention.ms")
    assert _configs(tools.run("kafka-configs", *as_default, "--describe").stdout) == {}


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
@pytest.mark.compat("kafka-tools", "kafka-console-producer: keys, headers, codecs, idempotent")
@pytest.mark.compat(
    "kafka-tools", "kafka-console-consumer: from-beginning in a group, keys and headers printed"
)
def test_java_idempotent_producer_and_console_consumer_group(
    pylog: str, tools: ToolRunner, codec: str
) -> None:
    """kafka-console-producer (the Java producer: idempotent, the codec) writes lines with headers and keys;
    pylog keeps them in batches of that codec from one idempotent producer, headers as written;
    kafka-console-consumer in a classic group reads them all back and commits the group's offsets at the end of
    every partition; kafka-consumer-groups then shows those commits with no lag."""
    topic, group = _name(f"kp-{codec}"), _name("kg")
    with KafkaClient(pylog) as client:
        client.admin.create_topics([NewTopic(topic, 3, 1)])
    written = [(f"h{i % 3}:x{i},trace:t{i}", f"k{i}", f"v{i}-" + "x" * (i % 7)) for i in range(60)]
    tools.run(
        "kafka-console-producer",
        *("--bootstrap-server", pylog, "--topic", topic, "--compression-codec", codec),
        *("--command-property", "enable.idempotence=true", "--command-property", "acks=all"),
        *("--command-property", "linger.ms=50", "--reader-property", "parse.key=true"),
        *("--reader-property", "parse.headers=true"),
        input="".join(f"{headers}\t{key}\t{value}\n" for headers, key, value in written),
    )
    with KafkaClient(pylog) as client:
        tps = [(topic, p) for p in range(3)]
        ends = {tp: off for tp, (off, _) in client.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP)).items()}
        starts = {
            tp: off for tp, (off, _) in client.list_offsets(dict.fromkeys(tps, EARLIEST_TIMESTAMP)).items()
        }
        assert sum(ends.values()) == 60 and set(starts.values()) == {0}
        batches = []
        for result in client.fetch(dict.fromkeys(tps, 0)).values():
            batches += list(read_batches(result.records or b"", allow_partial_tail=True))
        producers = client.admin.describe_producers([tp for tp in tps if ends[tp] > 0])
    assert {b.compression for b in batches} == {CODEC_NAMES[codec]}
    assert sum(b.records_count for b in batches) == 60
    stored = sorted(
        (
            ",".join(f"{k}:{(v or b'').decode()}" for k, v in r.headers),
            (r.key or b"").decode(),
            (r.value or b"").decode(),
        )
        for b in batches
        for r in b.records()
    )
    assert stored == sorted(written)
    # Idempotent: every batch carries one producer id and sequences; DescribeProducers shows it on each partition.
    assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
    assert all(b.base_sequence >= 0 and not b.is_transactional for b in batches)
    assert all([s["ProducerId"] for s in states] == [batches[0].producer_id] for states in producers.values())

    consumed = tools.run(
        "kafka-console-consumer",
        *("--bootstrap-server", pylog, "--topic", topic, "--group", group, "--from-beginning"),
        *("--max-messages", "60", "--timeout-ms", "30000"),
        *("--formatter-property", "print.key=true", "--formatter-property", "print.partition=true"),
        *("--formatter-property", "print.offset=true", "--formatter-property", "print.headers=true"),
    )
    rows = [line.split("\t") for line in consumed.stdout.strip().splitlines()]
    assert sorted((headers, key, value) for _, _, headers, key, value in rows) == sorted(written)
    by_partition: dict[int, list[int]] = {}
    for partition, offset, _, _, _ in rows:
        by_partition.setdefault(int(partition.removeprefix("Partition:")), []).append(
            int(offset.removeprefix("Offset:"))
        )
    assert {(topic, p): offsets for p, offsets in by_partition.items()} == {
        tp: list(range(end)) for tp, end in ends.items() if end
    }
    assert "Processed a total of 60 messages" in consumed.stderr
    with KafkaClient(pylog) as client:
        assert client.groups.committed_offsets(group) == {tp: end for tp, end in ends.items() if end}
    # kafka-consumer-groups reads the same commits (OffsetFetch) and ends (ListOffsets) through its admin client.
    described = tools.run(
        "kafka-consumer-groups", "--bootstrap-server", pylog, "--describe", "--group", group
    )
    header, *table = [line.split() for line in described.stdout.strip().splitlines() if line.strip()]
    assert header[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert sorted((r[0], r[1], int(r[2]), r[3], r[4], r[5]) for r in table) == [
        (group, topic, p, str(end), str(end), "0") if end else (group, topic, p, "-", "0", "-")
        for (_, p), end in sorted(ends.items())
    ]


def _group_rows(text: str) -> list[tuple[str, ...]]:
    """The rows under a kafka-consumer-groups table's header (whitespace-separated), sorted."""
    lines = [line.split() for line in text.strip().splitlines() if line.strip()]
    return sorted(tuple(row) for row in lines[1:])


@pytest.mark.compat(
    "kafka-tools", "kafka-consumer-groups: list, describe with lag, reset offsets (earliest, offset), delete"
)
def test_kafka_consumer_groups_lag_reset_and_delete(pylog: str, tools: ToolRunner) -> None:
    """A group's commits (made through pylog's client) as kafka-consumer-groups lists and describes them, with
    the lag against each partition's end; --reset-offsets --execute moves the commits pylog holds; --delete
    removes the group from pylog."""
    topic, group = _name("cg"), _name("cgg")
    server = ("--bootstrap-server", pylog)
    with KafkaClient(pylog) as client:
        client.admin.create_topics([NewTopic(topic, 2, 1)])
    producer = Producer({"bootstrap.servers": pylog, "linger.ms": 5})
    for i in range(10):
        producer.produce(topic, value=f"v{i}".encode(), partition=0 if i < 7 else 1)
    assert producer.flush(10) == 0
    with KafkaClient(pylog) as client:
        client.groups.commit_offsets(group, {(topic, 0): 3, (topic, 1): 3})
        groups = {g["GroupId"] for g in client.groups.list_groups()}
    assert group in groups
    assert sorted(tools.run("kafka-consumer-groups", *server, "--list").stdout.split()) == sorted(groups)
    described = tools.run("kafka-consumer-groups", *server, "--describe", "--group", group)
    assert _group_rows(described.stdout) == [
        (group, topic, "0", "3", "7", "4", "-", "-", "-"),
        (group, topic, "1", "3", "3", "0", "-", "-", "-"),
    ]
    state = tools.run("kafka-consumer-groups", *server, "--describe", "--group", group, "--state")
    assert [(row[0], row[-2], row[-1]) for row in _group_rows(state.stdout)] == [(group, "Empty", "0")]

    reset = (*server, "--group", group, "--reset-offsets", "--execute")
    earliest = tools.run("kafka-consumer-groups", *reset, "--topic", topic, "--to-earliest")
    assert _group_rows(earliest.stdout) == [(group, topic, "0", "0"), (group, topic, "1", "0")]
    with KafkaClient(pylog) as client:
        assert client.groups.committed_offsets(group) == {(topic, 0): 0, (topic, 1): 0}
    one = tools.run("kafka-consumer-groups", *reset, "--topic", f"{topic}:0", "--to-offset", "5")
    assert _group_rows(one.stdout) == [(group, topic, "0", "5")]
    with KafkaClient(pylog) as client:
        assert client.groups.committed_offsets(group) == {(topic, 0): 5, (topic, 1): 0}

    deleted = tools.run("kafka-consumer-groups", *server, "--delete", "--group", group)
    assert deleted.stdout.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    with KafkaClient(pylog) as client:
        assert group not in {g["GroupId"] for g in client.groups.list_groups()}
    assert group not in tools.run("kafka-consumer-groups", *server, "--list").stdout.split()


@pytest.mark.compat(
    "kafka-tools",
    "kafka-transactions: list, describe, describe-producers, find-hanging, abort a hanging transaction",
)
def test_kafka_transactions_finds_and_aborts_a_hanging_transaction(pylog: str, tools: ToolRunner) -> None:
    """An open transaction (a transactional producer that wrote and has not committed) as kafka-transactions
    lists and describes it from the coordinator and from the partition's producer state; a hanging one (a
    transactional batch no coordinator knows of, KIP-664's case) found by find-hanging and aborted by abort
    (WriteTxnMarkers from the admin client), after which pylog's partition holds an ABORT marker, has no open
    transaction and a last stable offset at its end."""
    topic, tid = _name("tx"), _name("tid")
    server = ("--bootstrap-server", pylog)
    with KafkaClient(pylog) as client:
        client.admin.create_topics([NewTopic(topic, 2, 1)])
    producer = Producer(
        {"bootstrap.servers": pylog, "transactional.id": tid, "transaction.timeout.ms": 45000, "linger.ms": 5}
    )
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, key=b"k", value=f"v{i}".encode(), partition=0)
    assert producer.flush(10) == 0
    hanging = (topic, 1)
    with KafkaClient(pylog) as client:
        pid, epoch = (
            client.transactions.init_producer_id()
        )  # a producer id the coordinator has no transaction for
        batch = RecordBatchBuilder(
            producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True
        )
        batch.append(int(time.time() * 1000), b"h", b"hanging")
        answer = client.produce(
            client.leader_for(*hanging), {hanging: batch.build()}, acks=-1, timeout_ms=10000
        )
        assert answer is not None and answer[hanging].error == 0
        (open_txn,) = client.admin.describe_producers([(topic, 0)])[(topic, 0)]
    txn_pid = open_txn["ProducerId"]

    listed = _table(tools.run("kafka-transactions", *server, "list").stdout)
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [row for row in listed[1:] if row[0] == tid] == [[tid, "0", str(txn_pid), "Ongoing"]]
    header, row = _table(
        tools.run("kafka-transactions", *server, "describe", "--transactional-id", tid).stdout
    )
    described = dict(zip(header, row, strict=True))
    assert {k: described[k] for k in ("TransactionalId", "ProducerId", "TransactionState")} == {
        "TransactionalId": tid,
        "ProducerId": str(txn_pid),
        "TransactionState": "Ongoing",
    }
    assert (described["TransactionTimeoutMs"], described["TopicPartitions"]) == ("45000", f"{topic}-0")
    producers = tools.run(
        "kafka-transactions", *server, "describe-producers", "--topic", topic, "--partition", "0"
    )
    header, row = _table(producers.stdout)
    assert dict(zip(header, row, strict=True)) == {
        "ProducerId": str(txn_pid),
        "ProducerEpoch": str(open_txn["ProducerEpoch"]),
        "LatestCoordinatorEpoch": str(open_txn["CoordinatorEpoch"]),
        "LastSequence": "4",
        "LastTimestamp": str(open_txn["LastTimestamp"]),
        "CurrentTransactionStartOffset": "0",
    }

    find = (*server, "find-hanging", "--broker-id", "0", "--max-transaction-timeout", "0")
    header, *found = _table(tools.run("kafka-transactions", *find).stdout)
    assert [dict(zip(header, r, strict=True)) for r in found] == [
        {
            **dict(zip(header, found[0], strict=True)),
            "Topic": topic,
            "Partition": "1",
            "ProducerId": str(pid),
            "ProducerEpoch": str(epoch),
            "StartOffset": "0",
        }
    ]
    aborted = tools.run(
        "kafka-transactions", *server, "abort", "--topic", topic, "--partition", "1", "--start-offset", "0"
    )
    assert aborted.returncode == 0
    with KafkaClient(pylog) as client:
        (state,) = client.admin.describe_producers([hanging])[hanging]
        result = client.fetch({hanging: 0})[hanging]
    assert state["ProducerId"] == pid and state["CurrentTxnStartOffset"] == -1
    (data, marker) = read_batches(result.records or b"", allow_partial_tail=True)
    assert data.is_transactional and marker.is_control and marker.producer_id == pid
    assert marker.control_record()[0] == 0  # ABORT
    assert result.last_stable_offset == result.high_watermark == 2
    assert _table(tools.run("kafka-transactions", *find).stdout)[1:] == []

    producer.commit_transaction(10)
    listed = _table(tools.run("kafka-transactions", *server, "list").stdout)
    assert [row for row in listed[1:] if row[0] == tid] == [[tid, "0", str(txn_pid), "CompleteCommit"]]


@pytest.mark.compat(
    "kafka-tools", "kafka-delete-records and kafka-get-offsets (earliest, latest, max timestamp, by time)"
)
def test_kafka_delete_records_and_get_offsets(pylog: str, tools: ToolRunner, tmp_path: Path) -> None:
    """kafka-delete-records moves a partition's log start as pylog then answers it; kafka-get-offsets prints,
    for each spec, the offsets pylog's ListOffsets gives (partitions without an answer left out, as Kafka)."""
    topic = _name("go")
    server = ("--bootstrap-server", pylog)
    with KafkaClient(pylog) as client:
        client.admin.create_topics([NewTopic(topic, 2, 1)])
    base = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": pylog, "linger.ms": 0})
    for i in range(6):
        producer.produce(topic, value=f"a{i}".encode(), partition=0, timestamp=base + i * 1000)
        producer.flush(10)
    for i, delta in enumerate((10_000, 30_000, 20_000)):
        producer.produce(topic, value=f"b{i}".encode(), partition=1, timestamp=base + delta)
    assert producer.flush(10) == 0
    offsets = tmp_path / "delete.json"
    offsets.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 2}]})
    )
    deleted = tools.run("kafka-delete-records", *server, "--offset-json-file", str(offsets))
    assert deleted.stdout.strip().splitlines()[-1] == f"partition: {topic}-0\tlow_watermark: 2"

    tps = [(topic, 0), (topic, 1)]
    specs = {
        "-1": LATEST_TIMESTAMP,
        "-2": EARLIEST_TIMESTAMP,
        "-3": MAX_TIMESTAMP,
        str(base + 2500): base + 2500,
        str(base + 15_000): base + 15_000,
        str(base + 90_000): base + 90_000,
    }
    with KafkaClient(pylog) as client:
        held = {spec: client.list_offsets(dict.fromkeys(tps, ts)) for spec, ts in specs.items()}
    assert held["-2"][(topic, 0)][0] == 2 and held["-1"][(topic, 0)][0] == 6
    assert [held["-3"][tp][0] for tp in tps] == [5, 1] and held[str(base + 15_000)][(topic, 0)][0] == -1
    for spec in specs:
        printed = tools.run("kafka-get-offsets", *server, "--topic", topic, "--time", spec).stdout
        assert printed.split() == [
            f"{t}:{p}:{held[spec][(t, p)][0]}" for t, p in tps if held[spec][(t, p)][0] >= 0
        ], spec


@pytest.mark.compat("kafka-tools", "kafka-producer-perf-test and kafka-consumer-perf-test")
def test_kafka_perf_tests_write_and_count_records(pylog: str, tools: ToolRunner) -> None:
    """kafka-producer-perf-test's records land in pylog (count and size as asked); kafka-consumer-perf-test
    counts exactly them."""
    topic, count, size = _name("perf"), 300, 64
    with KafkaClient(pylog) as client:
        client.admin.create_topics([NewTopic(topic, 2, 1)])
    produced = tools.run(
        "kafka-producer-perf-test",
        *("--topic", topic, "--num-records", str(count), "--record-size", str(size), "--throughput", "-1"),
        *("--command-property", f"bootstrap.servers={pylog}", "acks=all"),  # one option, several values
    )
    assert re.match(rf"{count} records sent, ", produced.stdout.strip().splitlines()[-1]), produced.stdout
    with KafkaClient(pylog) as client:
        tps = [(topic, 0), (topic, 1)]
        ends = {tp: off for tp, (off, _) in client.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP)).items()}
        records = [
            r
            for result in client.fetch(dict.fromkeys(tps, 0)).values()
            for b in read_batches(result.records or b"", allow_partial_tail=True)
            for r in b.records()
        ]
    assert sum(ends.values()) == count == len(records)
    assert {len(r.value or b"") for r in records} == {size}
    consumed = tools.run(
        "kafka-consumer-perf-test",
        *("--bootstrap-server", pylog, "--topic", topic, "--num-records", str(count), "--timeout", "20000"),
    )
    header, values = consumed.stdout.strip().splitlines()[-2:]
    stats = dict(
        zip((h.strip() for h in header.split(",")), (v.strip() for v in values.split(",")), strict=True)
    )
    assert int(stats["data.consumed.in.nMsg"]) == count
    assert float(stats["data.consumed.in.MB"]) == round(count * size / 2**20, 4)


def _produce_error(bootstrap: str, topic: str, size: int) -> str | None:
    """The delivery error of one record of ``size`` bytes (None when written)."""
    errors: list[str | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.max.bytes": 10_000_000})
    producer.produce(topic, b"x" * size, on_delivery=lambda err, _msg: errors.append(err and err.name()))
    producer.flush(10)
    assert len(errors) == 1
    return errors[0]


@pytest.mark.compat(
    "kafka-tools",
    "kafka-configs: dynamic broker configs applied at once (message.max.bytes) and Kafka's per-broker keys",
)
def test_kafka_configs_alters_live_broker_configs(pylog: str, tools: ToolRunner) -> None:
    """kafka-configs lowers ``message.max.bytes`` for every broker (``--entity-default``): the next produce over
    it is refused, without a restart; deleted, the record goes through. On broker 0 it sets
    ``sasl.kerberos.min.time.before.relogin`` (accepted without effect, as Kafka accepts it), which the
    cluster-wide default refuses as Kafka does ("broker id must be specified")."""
    topic = _name("kmax")
    server = ("--bootstrap-server", pylog, "--entity-type", "brokers")
    with KafkaClient(pylog) as client:
        client.admin.create_topics([NewTopic(topic, 1, 1)])
    assert _produce_error(pylog, topic, 4000) is None
    tools.run(
        "kafka-configs", *server, "--entity-default", "--alter", "--add-config", "message.max.bytes=2048"
    )
    try:
        assert _produce_error(pylog, topic, 4000) == "MSG_SIZE_TOO_LARGE"
    finally:
        tools.run(
            "kafka-configs", *server, "--entity-default", "--alter", "--delete-config", "message.max.bytes"
        )
    assert _produce_error(pylog, topic, 4000) is None
    relogin = "sasl.kerberos.min.time.before.relogin"
    as_node = (*server, "--entity-name", "0")
    done = tools.run("kafka-configs", *as_node, "--alter", "--add-config", f"{relogin}=58000")
    assert done.stdout.strip() == "Completed updating config for broker 0."
    try:
        described = _configs(tools.run("kafka-configs", *as_node, "--describe").stdout)
        assert described[relogin] == (
            "58000",
            "false",
            f"DYNAMIC_BROKER_CONFIG:{relogin}=58000, DEFAULT_CONFIG:{relogin}=60000",
        )
        refused = tools.run(
            "kafka-configs",
            *server,
            "--entity-default",
            "--alter",
            "--add-config",
            f"{relogin}=58000",
            check=False,
        )
        assert refused.returncode != 0
        assert "broker id must be specified" in refused.stdout + refused.stderr
    finally:
        tools.run("kafka-configs", *as_node, "--alter", "--delete-config", relogin)


@pytest.mark.compat(
    "kafka-tools",
    "kafka-configs: client quotas of users, clients, user+client and defaults added, described and removed",
)
def test_kafka_configs_manages_client_quotas(pylog: str, tools: ToolRunner) -> None:
    """kafka-configs --entity-type users|clients (AlterClientQuotas, DescribeClientQuotas): what it sets is what
    pylog holds, it describes each entity as Kafka's broker answers it, and removes them again."""
    server = ("--bootstrap-server", pylog)
    user = ("--entity-type", "users", "--entity-name", "alice")
    client = ("--entity-type", "clients", "--entity-name", "etl")
    default_client = ("--entity-type", "clients", "--entity-default")
    both = (*user, *client)
    for entity, config in (
        (user, "producer_byte_rate=204800,request_percentage=50"),
        (client, "consumer_byte_rate=1048576"),
        (default_client, "producer_byte_rate=1000000"),
        (both, "producer_byte_rate=1024"),
    ):
        done = tools.run("kafka-configs", *server, *entity, "--alter", "--add-config", config)
        assert done.stdout.strip().startswith("Completed updating"), done.stdout
    try:
        with KafkaClient(pylog) as c:
            held = {tuple(sorted(e.items())): v for e, v in c.admin.describe_client_quotas()}
        assert held == {
            (("user", "alice"),): {"producer_byte_rate": 204800.0, "request_percentage": 50.0},
            (("client-id", "etl"),): {"consumer_byte_rate": 1048576.0},
            (("client-id", None),): {"producer_byte_rate": 1000000.0},
            (("client-id", "etl"), ("user", "alice")): {"producer_byte_rate": 1024.0},
        }
        shown = tools.run("kafka-configs", *server, *user, "--describe").stdout
        assert "Quota configs for user-principal 'alice' are " in shown
        assert "producer_byte_rate=204800.0" in shown and "request_percentage=50.0" in shown
        shown = tools.run("kafka-configs", *server, *both, "--describe").stdout
        assert (
            "Quota configs for user-principal 'alice', client-id 'etl' are producer_byte_rate=1024.0" in shown
        )
        shown = tools.run("kafka-configs", *server, "--entity-type", "clients", "--describe").stdout
        assert "Quota configs for client-id 'etl' are consumer_byte_rate=1048576.0" in shown
        assert "Quota configs for the default client-id are producer_byte_rate=1000000.0" in shown
    finally:
        for entity, keys in (
            (user, "producer_byte_rate,request_percentage"),
            (client, "consumer_byte_rate"),
            (default_client, "producer_byte_rate"),
            (both, "producer_byte_rate"),
        ):
            tools.run("kafka-configs", *server, *entity, "--alter", "--delete-config", keys)
    with KafkaClient(pylog) as c:
        assert c.admin.describe_client_quotas() == []
