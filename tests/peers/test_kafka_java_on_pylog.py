"""Apache Kafka's Java client (producer, consumer, AdminClient) against pylog's broker (a child process on loopback).

The clients run in small Java programs kept beside the launcher (``tests/support/apache_kafka/java/*.java``, one
self-contained source each; their docstrings give the scenarios, arguments and output lines). They are compiled
ONCE per source digest with the release's ``javac -cp libs/*`` into ``<release cache>/java-programs/<digest>/``
(``classes/``, and ``programs.jar`` of them: a jar so that the JVM's class-data sharing archive covers them too),
under a file lock so that two test processes compile once. Each program runs one JVM per scenario group and prints
JSON lines; the tests compare what they print with what pylog holds, read back with pylog's own client.

Shared: ONE pylog broker per module (an authorizer whose only super user is the PLAINTEXT listener's ANONYMOUS,
so that the ACL calls are answered and nothing else is refused), and one JVM run per module fixture (producer,
consumer, admin); the tests of a fixture check its run's lines.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from broker_runtime.client import KafkaClient, NewTopic
from broker_runtime.coordinator.transaction import TRANSACTION_STATE_TOPIC, TxnState
from broker_runtime.coordinator.transaction.log_format import decode_key, decode_value
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.launch import broker_log_dir, broker_process
from broker_runtime.protocol.compression import CODEC_NAMES
from broker_runtime.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from broker_runtime.protocol.messages.common import IsolationLevel
from broker_runtime.protocol.records import RecordBatch, RecordBatchBuilder, read_batches
from broker_runtime.protocol.topic_id import ZERO_TOPIC_ID, format_topic_id
from broker_runtime.protocol.topic_partition import TopicPartition
from broker_runtime.tools.configs import SOURCE_NAMES  # the Java ConfigEntry.ConfigSource names too
from tests.support.apache_kafka import (
    TOOL_HEAP,
    JavaCommand,
    PeerUnavailable,
    _tool_log4j,
    cache_dir,
    ensure_fetched,
    find_java,
)

pytestmark = [pytest.mark.timeout(180)]

JAVA_SOURCES = Path(__file__).resolve().parents[1] / "support" / "apache_kafka" / "java"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: Record timestamps of the records the tests write themselves (ms).
BASE_TS = 1_700_000_000_000


# ------------------------------------------------------------------------------------- the Java programs


def _first_javac_error(output: str) -> str:
    for line in output.splitlines():
        found = re.match(r"^(.*?\.java):(\d+): error: (.*)$", line)
        if found:
            return f"{Path(found.group(1)).name}:{found.group(2)}: {found.group(3)}"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[0] if lines else "no output"


def compiled_programs() -> Path:
    """``programs.jar`` of the Java programs, compiled first when this digest of their sources is not cached;
    raises :class:`PeerUnavailable` with one line (javac's first error) when compiling fails."""
    libs = ensure_fetched()
    sources = sorted(JAVA_SOURCES.glob("*.java"))
    digest = hashlib.sha256((libs.parent / "fetched").read_bytes())
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    home = cache_dir() / "java-programs"
    target = home / digest.hexdigest()[:16]
    jar = target / "programs.jar"
    if jar.is_file():
        return jar
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "compile.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be compiling the same sources
        if jar.is_file():
            return jar
        java = Path(find_java()).resolve()
        javac = java.parent / "javac"
        if not os.access(javac, os.X_OK):
            raise PeerUnavailable(
                f"the Java peer programs need javac and {java.parent} has none (a JRE, not a JDK): install a JDK "
                "17+ (Debian/Ubuntu: apt-get install openjdk-17-jdk-headless) or set JAVA_HOME to one"
            )
        building = home / f"{target.name}.{os.getpid()}.tmp"
        shutil.rmtree(building, ignore_errors=True)
        (building / "classes").mkdir(parents=True)
        done = subprocess.run(
            [str(javac), "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "-encoding", "UTF-8", "-nowarn"]
            + ["-d", str(building / "classes"), "-cp", str(libs / "*"), *map(str, sources)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            shutil.rmtree(building, ignore_errors=True)
            raise PeerUnavailable(
                f"compiling the Java peer programs ({JAVA_SOURCES}) failed: "
                f"{_first_javac_error(done.stderr + done.stdout)}"
            )
        with zipfile.ZipFile(building / "programs.jar", "w") as out:
            for path in sorted((building / "classes").rglob("*.class")):
                out.write(path, path.relative_to(building / "classes").as_posix())
        shutil.rmtree(target, ignore_errors=True)
        os.replace(building, target)
    return jar


@pytest.fixture(scope="session")
def java_programs() -> Path:
    try:
        return compiled_programs()
    except PeerUnavailable as e:
        problem = str(e)
    pytest.fail(problem, pytrace=False)


def run_java(jar: Path, main_class: str, *args: str, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Run one program (``java -cp libs/*:programs.jar MAIN ARGS``); its JSON lines. A non-zero exit raises
    AssertionError with the end of its output."""
    command = JavaCommand(main_class, args, heap=TOOL_HEAP, log4j=_tool_log4j(), classpath=[jar])
    done = subprocess.run(
        command.argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    command.publish_archive()
    if done.returncode != 0:
        raise AssertionError(
            f"{main_class} {' '.join(args)} exited {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
            f"\n--- stderr\n{done.stderr[-5000:]}"
        )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


# ----------------------------------------------------------------------------------------------- pylog


@pytest.fixture(scope="module")
def pylog_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pylog-for-kafka-java")


@pytest.fixture(scope="module")
def pylog(pylog_dir: Path) -> Iterator[str]:
    overrides = {
        # No 3 s wait for more members before a first group's rebalance (as on the Apache Kafka fixtures' nodes).
        "group.initial.rebalance.delay.ms": "0",
        # ACL calls need an authorizer; the PLAINTEXT listener's principal may do everything.
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        # One partition for each internal topic: the first InitProducerId and group commit create it faster.
        "transaction.state.log.num.partitions": "1",
        "offsets.topic.num.partitions": "1",
        # A topic created after a regex subscription is picked up by the next heartbeat (Kafka: 10 s at least).
        "pylog.group.consumer.regex.refresh.min.interval.ms": "0",
    }
    with broker_process(pylog_dir, overrides=overrides) as address:
        yield address


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(client: KafkaClient, *topics: str, partitions: int = 3) -> None:
    client.admin.create_topics([NewTopic(t, partitions, 1) for t in topics])


def _write(client: KafkaClient, topic: str, per_partition: int, partitions: int = 3) -> None:
    """``per_partition`` records into each partition: key ``k<p>-<i>``, value ``v<p>-<i>``, timestamp
    ``BASE_TS + p * 1000 + i * 10``."""
    for p in range(partitions):
        builder = RecordBatchBuilder()
        for i in range(per_partition):
            builder.append(BASE_TS + p * 1000 + i * 10, f"k{p}-{i}".encode(), f"v{p}-{i}".encode())
        answer = client.produce(
            client.leader_for(topic, p), {(topic, p): builder.build()}, acks=-1, timeout_ms=10000
        )
        assert answer is not None and answer[(topic, p)].error == 0, answer


def _batches(
    client: KafkaClient, tps: list[TopicPartition], isolation: int = IsolationLevel.READ_UNCOMMITTED
) -> tuple[dict[TopicPartition, list[RecordBatch]], dict[TopicPartition, Any]]:
    """Every batch of each partition (from offset 0, one fetch) and the fetch results."""
    results = client.fetch(dict.fromkeys(tps, 0), isolation_level=isolation)
    batches = {tp: list(read_batches(results[tp].records or b"", allow_partial_tail=True)) for tp in tps}
    return batches, results


def _ends(
    client: KafkaClient, tps: list[TopicPartition], when: int = LATEST_TIMESTAMP
) -> dict[TopicPartition, int]:
    return {tp: off for tp, (off, _) in client.list_offsets(dict.fromkeys(tps, when)).items()}


# ------------------------------------------------------------------------------------------- producer


@pytest.fixture(scope="module")
def producer_run(pylog: str, java_programs: Path) -> dict[str, Any]:
    """One JVM: the idempotent producer with every codec, then the transactional scenario."""
    prefix, txn_topic = _name("jp"), _name("jt")
    with KafkaClient(pylog) as client:
        _create(client, *(f"{prefix}-{codec}" for codec in CODECS), txn_topic)
    group, txn_id = _name("jtg"), _name("jtx")
    lines = run_java(
        java_programs,
        "ProducerScenarios",
        pylog,
        *("idempotent", prefix, "40", "--", "transactional", txn_topic, txn_id, group),
    )
    return {"prefix": prefix, "topic": txn_topic, "group": group, "txn_id": txn_id, "lines": lines}


@pytest.mark.compat("kafka-java", "producer: idempotent, every codec (none, gzip, snappy, lz4, zstd)")
def test_java_idempotent_producer_every_codec(pylog: str, producer_run: dict[str, Any]) -> None:
    """Each codec's records are in pylog at the offsets the Java producer was told, in batches of that codec
    from one idempotent producer with gap-free sequences, keys, values, headers and timestamps as sent."""
    lines = [line for line in producer_run["lines"] if line["scenario"] == "idempotent"]
    assert sorted({line["codec"] for line in lines}) == sorted(CODECS)
    with KafkaClient(pylog) as client:
        for codec in CODECS:
            topic = f"{producer_run['prefix']}-{codec}"
            sent = [line for line in lines if line["codec"] == codec]
            tps = [(topic, p) for p in range(3)]
            batches, _ = _batches(client, tps)
            held = {
                (topic, p): {r.offset: r for b in bs for r in b.records()} for (_, p), bs in batches.items()
            }
            assert sum(map(len, held.values())) == len(sent) == 40, codec
            for line in sent:
                record = held[(topic, line["partition"])][line["offset"]]
                i = int(line["key"][1:])
                assert (record.key, record.value, record.timestamp, record.headers) == (
                    line["key"].encode(),
                    line["value"].encode(),
                    BASE_TS + i,
                    [("i", str(i).encode())],
                ), (codec, line)
            every = [b for bs in batches.values() for b in bs]
            assert {b.compression for b in every} == {CODEC_NAMES[codec]}, codec
            assert len({b.producer_id for b in every}) == 1 and every[0].producer_id >= 0
            assert not any(b.is_transactional for b in every)
            for bs in batches.values():  # sequences start at 0 and have no gaps, per partition
                expected = 0
                for b in bs:
                    assert (b.base_sequence, b.last_sequence) == (expected, expected + b.records_count - 1)
                    expected += b.records_count


@pytest.mark.compat("kafka-java", "producer: transactions (commit, abort, sendOffsetsToTransaction)")
@pytest.mark.compat("kafka-java", "consumer: isolation.level read_committed and read_uncommitted")
def test_java_transactions_read_by_java_and_pylog(pylog: str, producer_run: dict[str, Any]) -> None:
    """Two committed transactions and an aborted one: the Java consumer with read_committed returns exactly the
    committed records, with read_uncommitted every record; pylog holds them with a commit or abort marker
    after each transaction on every partition, lists the aborted one in Fetch's AbortedTransactions, and keeps
    the offset the transaction committed for the group."""
    topic = producer_run["topic"]
    lines = [line for line in producer_run["lines"] if line["scenario"] == "transactional"]
    sent = [line for line in lines if line["step"] == "sent"]
    assert [line["outcome"] for line in sent] == ["commit", "abort", "commit"]
    committed = sorted(tuple(r) for line in sent if line["outcome"] == "commit" for r in line["records"])
    everything = sorted(tuple(r) for line in sent for r in line["records"])
    consumed = {line["isolation"]: line for line in lines if line["step"] == "consumed"}
    assert sorted((p, o, v) for p, o, _, v in consumed["read_committed"]["records"]) == committed
    assert sorted((p, o, v) for p, o, _, v in consumed["read_uncommitted"]["records"]) == everything
    tps = [(topic, p) for p in range(3)]
    with KafkaClient(pylog) as client:
        ends = _ends(client, tps)
        assert (
            consumed["read_committed"]["ends"]
            == consumed["read_uncommitted"]["ends"]
            == {str(p): end for (_, p), end in ends.items()}
        )
        batches, results = _batches(client, tps, IsolationLevel.READ_COMMITTED)
        assert client.groups.committed_offsets(producer_run["group"]) == {(topic, 0): 42}
    aborted_values = {v for line in sent if line["outcome"] == "abort" for _, _, v in line["records"]}
    for tp in tps:
        data = [b for b in batches[tp] if not b.is_control]
        markers = [b.control_record()[0] for b in batches[tp] if b.is_control]
        assert markers == [1, 0, 1], (tp, markers)  # COMMIT, ABORT, COMMIT: one per transaction
        assert all(b.is_transactional for b in batches[tp]) and len({b.producer_id for b in data}) == 1
        assert results[tp].last_stable_offset == results[tp].high_watermark == ends[tp]
        first_aborted = min(
            r.offset for b in data for r in b.records() if (r.value or b"").decode() in aborted_values
        )
        assert results[tp].aborted_transactions == [(data[0].producer_id, first_aborted)]


@pytest.mark.compat(
    "kafka-java",
    "producer: transactions v2 (transaction.version 2: an epoch per transaction, partitions added by the broker), "
    "fencing by a second instance",
)
def test_java_transactions_run_v2_and_fence_the_older_producer(
    pylog: str, producer_run: dict[str, Any]
) -> None:
    """pylog finalizes transaction.version 2, so the Java producer runs transactions v2: broker-side, every
    partition joined its transaction through the partition's leader (the coordinator's Ongoing records carry
    ClientTransactionVersion 2; a client's own AddPartitionsToTxn would record 0), and each EndTxn bumped the
    epoch: the batches of the k-th transaction carry epoch e0 + k and its markers e0 + k + 1. A second producer
    with the same transactional id fences the first (its next transaction fails, nothing of it is written);
    librdkafka's transactional producer (transactions v1) still works on the same broker."""
    topic = producer_run["topic"]
    (fenced,) = [line for line in producer_run["lines"] if line.get("step") == "fenced"]
    # as on Kafka: the leader answers the fenced epoch's batch INVALID_PRODUCER_EPOCH (the coordinator's
    # PRODUCER_FENCED mapped, AddPartitionsToTxnManager), and the abort that follows learns it is fenced
    assert (fenced["error"], fenced["abort_error"]) == (
        "InvalidProducerEpochException",
        "ProducerFencedException",
    )
    tps = [(topic, p) for p in range(3)]
    with KafkaClient(pylog) as client:
        batches, _ = _batches(client, tps)
        state = client.fetch({(TRANSACTION_STATE_TOPIC, 0): 0})[(TRANSACTION_STATE_TOPIC, 0)]
    for tp in tps:
        epochs = [(b.is_control, b.producer_epoch) for b in batches[tp]]
        e0 = epochs[0][1]
        data_epochs = sorted({e for control, e in epochs if not control})
        marker_epochs = [e for control, e in epochs if control]
        assert data_epochs == [e0, e0 + 1, e0 + 2] and marker_epochs == [e0 + 1, e0 + 2, e0 + 3], (tp, epochs)
        assert not any(r.key == b"zombie" for b in batches[tp] if not b.is_control for r in b.records())
    records = [r for b in read_batches(state.records or b"", allow_partial_tail=True) for r in b.records()]
    mine = [
        decode_value(r.value)
        for r in records
        if r.key and decode_key(r.key) == producer_run["txn_id"] and r.value
    ]
    ongoing = [v for v in mine if v.status == TxnState.ONGOING]
    assert ongoing and {v.client_version for v in ongoing} == {2}, mine
    prepared = [
        v.producer_epoch for v in mine if v.status in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
    ]
    assert prepared == [e0 + 1, e0 + 2, e0 + 3], mine

    rd = Producer(  # librdkafka: transactions v1 on the same broker
        {"bootstrap.servers": pylog, "transactional.id": _name("rdtx"), "linger.ms": 0}
    )
    rd.init_transactions(20)
    rd.begin_transaction()
    rd.produce(topic, value=b"from-librdkafka", partition=1)
    rd.commit_transaction(20)
    with KafkaClient(pylog) as client:
        batches, results = _batches(client, [(topic, 1)], IsolationLevel.READ_COMMITTED)
    values = [r.value for b in batches[(topic, 1)] if not b.is_control for r in b.records()]
    assert values[-1] == b"from-librdkafka"
    assert results[(topic, 1)].last_stable_offset == results[(topic, 1)].high_watermark


# ------------------------------------------------------------------------------------------- consumer


@pytest.fixture(scope="module")
def consumer_run(pylog: str, java_programs: Path) -> dict[str, Any]:
    """One JVM: a classic group of two consumers, then a consumer with group.protocol=consumer, then one with a
    SubscriptionPattern."""
    topic, group, group848 = _name("jc"), _name("jcg"), _name("jcg848")
    prefix, group_pattern = _name("jrx"), _name("jcgrx")
    with KafkaClient(pylog) as client:
        _create(client, topic, f"{prefix}-a", f"other-{prefix}-a")
        _write(client, topic, 20)
    # Between records, before all, after all (null), and the first of partition 2.
    stamps = [str(BASE_TS + 55), str(BASE_TS - 1), str(BASE_TS + 10_000), str(BASE_TS + 2000)]
    lines = run_java(
        java_programs,
        "ConsumerScenarios",
        pylog,
        *("classic", topic, group, *stamps, "--", "consumer", topic, group848),
        *("--", "pattern", prefix, group_pattern),
    )
    by_step = {
        line["step"] + (f":{line['timestamp']}" if line["step"] == "offsets_for_times" else ""): line
        for line in lines
    }
    return {"topic": topic, "group": group, "lines": by_step, "stamps": stamps, "prefix": prefix}


@pytest.mark.compat("kafka-java", "consumer: classic group (subscribe, commit, rebalance of two members)")
def test_java_consumer_classic_group(pylog: str, consumer_run: dict[str, Any]) -> None:
    """The first member reads every record as pylog holds it and commits the ends; a second member's join
    rebalances the group into two disjoint non-empty shares of one generation, the newcomer starting at the
    committed offsets; a commit with metadata reads back through pylog."""
    topic, group, lines = consumer_run["topic"], consumer_run["group"], consumer_run["lines"]
    tps = [(topic, p) for p in range(3)]
    with KafkaClient(pylog) as client:
        batches, _ = _batches(client, tps)
        ends = _ends(client, tps)
        committed = client.groups.committed_offsets(group)
    held = sorted(
        [p, r.offset, r.timestamp, (r.key or b"").decode(), (r.value or b"").decode()]
        for (_, p), bs in batches.items()
        for b in bs
        for r in b.records()
    )
    assert sorted(lines["consumed"]["records"]) == held and len(held) == 60
    assert lines["consumed"]["committed"] == {str(p): end for (_, p), end in ends.items()}

    rebalanced = lines["rebalanced"]
    a, b = set(rebalanced["a"]), set(rebalanced["b"])
    assert a and b and not a & b and a | b == {0, 1, 2}
    assert rebalanced["generation_a"] == rebalanced["generation_b"] >= 2
    assert rebalanced["member_a"] != rebalanced["member_b"]
    assert rebalanced["b_positions"] == {str(p): ends[(topic, p)] for p in b}
    # Eager (range): "a" gave everything back before the new assignment.
    assert rebalanced["events"][:2] == ["a:assigned:[0, 1, 2]", "a:revoked:[0, 1, 2]"]

    last = lines["committed"]
    assert (last["offset"], last["metadata"]) == (7, "seven")
    assert committed == {**{tp: end for tp, end in ends.items()}, (topic, last["partition"]): 7}


@pytest.mark.compat("kafka-java", "consumer: seek, offsetsForTimes, beginningOffsets, endOffsets")
def test_java_consumer_seek_and_offsets_for_times(pylog: str, consumer_run: dict[str, Any]) -> None:
    topic, lines = consumer_run["topic"], consumer_run["lines"]
    assert lines["seek"]["first_offset"] == 5
    tps = [(topic, p) for p in range(3)]
    with KafkaClient(pylog) as client:
        assert lines["ends"]["end"] == {str(p): off for (_, p), off in _ends(client, tps).items()}
        assert lines["ends"]["beginning"] == {
            str(p): off for (_, p), off in _ends(client, tps, EARLIEST_TIMESTAMP).items()
        }
        for stamp in consumer_run["stamps"]:
            pylog_says = client.list_offsets(dict.fromkeys(tps, int(stamp)))
            expected = {str(p): None if off < 0 else [off, ts] for (_, p), (off, ts) in pylog_says.items()}
            java_says = lines[f"offsets_for_times:{stamp}"]["offsets"]
            assert java_says == expected, stamp
    # And what Kafka answers for these timestamps (records of partition p at BASE_TS + p*1000 + i*10):
    first = lines[f"offsets_for_times:{BASE_TS + 55}"]["offsets"]
    assert first == {"0": [6, BASE_TS + 60], "1": [0, BASE_TS + 1000], "2": [0, BASE_TS + 2000]}
    assert set(map(str, range(3))) == set(lines[f"offsets_for_times:{BASE_TS + 10_000}"]["offsets"])
    assert all(v is None for v in lines[f"offsets_for_times:{BASE_TS + 10_000}"]["offsets"].values())


@pytest.mark.compat(
    "kafka-java",
    "consumer: group.protocol=consumer (KIP-848)",
)
def test_java_consumer_group_protocol_consumer_joins(consumer_run: dict[str, Any]) -> None:
    """Kafka's 4.x consumer with group.protocol=consumer is assigned every partition by pylog's coordinator (the
    assignment names topics by id), reads every record and commits. Subscribed with a ``SubscriptionPattern``
    (resolved by pylog's coordinator), it is assigned the matching topic and not the one that only contains the
    prefix, then a topic it created after subscribing."""
    line = consumer_run["lines"]["kip848"]
    assert line["error"] is None, line
    assert (line["records"], line["partitions"]) == (3 * 20, 3), line
    pattern, prefix = consumer_run["lines"]["pattern"], consumer_run["prefix"]
    assert pattern["error"] is None, pattern
    assert (pattern["before"], pattern["after"]) == ([f"{prefix}-a"], [f"{prefix}-a", f"{prefix}-b"]), pattern


# ---------------------------------------------------------------------------------------------- admin


@pytest.fixture(scope="module")
def admin_run(pylog: str, java_programs: Path) -> dict[str, Any]:
    """One JVM: every AdminClient call of ``AdminScenarios`` against a data topic (3 x 10 records) and a group
    with committed offsets; the lines by call name."""
    prefix, data, group = _name("ja"), _name("jad"), _name("jag")
    with KafkaClient(pylog) as client:
        _create(client, data)
        _write(client, data, 10)
        client.groups.commit_offsets(group, {(data, 0): 4, (data, 1): 6})
    stamp = BASE_TS + 1025
    lines = run_java(java_programs, "AdminScenarios", pylog, "admin", prefix, data, group, str(stamp))
    calls = {line["call"]: line for line in lines}
    assert len(calls) == len(lines), [line["call"] for line in lines]
    return {"prefix": prefix, "data": data, "group": group, "stamp": stamp, "calls": calls}


def _result(admin_run: dict[str, Any], call: str) -> Any:
    line = admin_run["calls"][call]
    assert "error" not in line, line
    return line["result"]


@pytest.mark.compat(
    "kafka-java",
    "AdminClient: describeCluster, createTopics, createPartitions, listTopics, describeTopics, deleteTopics",
)
def test_java_admin_topics(pylog: str, admin_run: dict[str, Any]) -> None:
    prefix, data = admin_run["prefix"], admin_run["data"]
    a, b = f"{prefix}-a", f"{prefix}-b"
    with KafkaClient(pylog) as client:
        cluster = client.admin.describe_cluster()
        meta = client.metadata([a, data])
        listed = sorted(name for name in client.metadata().topics)
        configs = client.admin.describe_configs([a])[a]
    described = _result(admin_run, "describeCluster")
    assert described["cluster_id"] == cluster["ClusterId"]
    assert described["controller"]["id"] == cluster["ControllerId"]
    assert sorted((n["id"], n["host"], n["port"]) for n in described["nodes"]) == sorted(
        (n["BrokerId"], n["Host"], n["Port"]) for n in cluster["Brokers"]
    )
    created = _result(admin_run, "createTopics")
    assert {t: (c["partitions"], c["replication_factor"]) for t, c in created.items()} == {
        a: (3, 1),
        b: (1, 1),
    }
    # Every config of the new topic, as DescribeConfigs then answers it (Kafka's KIP-525 answer).
    described_a = _result(admin_run, "describeConfigs")[f"TOPIC:{a}"]
    assert created[a]["configs"] == {name: c["value"] for name, c in described_a.items()}
    assert created[a]["configs"]["retention.ms"] == "3600000"
    assert created[a]["configs"]["cleanup.policy"] == "compact"
    assert created[b]["configs"] == {
        **created[a]["configs"],
        "retention.ms": "604800000",
        "cleanup.policy": "delete",
    }
    # KIP-516: the ids Kafka's admin client got from CreateTopics are the ones pylog answers (b deleted since)
    assert (
        created[a]["topic_id"] == format_topic_id(meta.topics[a].topic_id) != format_topic_id(ZERO_TOPIC_ID)
    )
    assert created[b]["topic_id"] not in (created[a]["topic_id"], format_topic_id(ZERO_TOPIC_ID))
    exists = admin_run["calls"]["createTopics.exists"]
    assert exists["error"] == "TopicExistsException" and a in exists["message"]
    assert {a, b, data} <= set(_result(admin_run, "listTopics"))
    topics = _result(admin_run, "describeTopics")
    assert len(topics[b]["partitions"]) == 3  # createPartitions took b from 1 to 3
    assert topics[a]["topic_id"] == created[a]["topic_id"]  # describeTopics shows the id pylog stores
    for name in (a, data):
        assert topics[name]["partitions"] == [
            {"partition": p, "leader": m.leader, "replicas": list(m.replicas), "isr": list(m.isr)}
            for p, m in sorted(meta.topics[name].partitions.items())
        ]
        assert not topics[name]["internal"]
    # deleteTopics(b) was the last call: pylog no longer has it, and listTopics says so too.
    assert b not in listed and b not in _result(admin_run, "listTopics.after")
    assert a in listed and a in _result(admin_run, "listTopics.after")
    assert configs["retention.ms"] == "7200000"  # (incrementalAlterConfigs, checked in the next test)


@pytest.mark.compat(
    "kafka-java",
    "AdminClient: describeConfigs, incrementalAlterConfigs (SET, DELETE)",
    differs="a topic lists the configs pylog implements (22) and its overrides, where Kafka 4.4 lists 37 (also "
    "remote storage, compression levels, replication throttles, unclean.leader.election.enable); a broker lists "
    "the broker configs pylog declares, where Kafka lists every Kafka broker config",
)
def test_java_admin_configs(pylog: str, admin_run: dict[str, Any]) -> None:
    a = f"{admin_run['prefix']}-a"
    before = _result(admin_run, "describeConfigs")[f"TOPIC:{a}"]
    assert before["retention.ms"]["value"] == "3600000"
    assert before["retention.ms"]["source"] == before["cleanup.policy"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert _result(admin_run, "incrementalAlterConfigs") is None
    after = _result(admin_run, "describeConfigs.altered")[f"TOPIC:{a}"]
    with KafkaClient(pylog) as client:
        entries = {e.name: e for e in client.admin.describe_config_entries(2, a)}
        node = next(iter(client.metadata([]).brokers))
        broker = {e.name: e for e in client.admin.describe_config_entries(4, str(node))}
    assert after == {
        name: {
            "value": e.value,
            "source": SOURCE_NAMES[e.source],
            "sensitive": e.sensitive,
            "read_only": e.read_only,
        }
        for name, e in entries.items()
    }
    assert (after["retention.ms"]["value"], after["retention.ms"]["source"]) == (
        "7200000",
        "DYNAMIC_TOPIC_CONFIG",
    )
    assert (after["cleanup.policy"]["value"], after["cleanup.policy"]["source"]) == (
        "delete",
        "DEFAULT_CONFIG",
    )
    assert after["min.insync.replicas"]["value"] == "1"
    described_broker = _result(admin_run, "describeConfigs.broker")[f"BROKER:{node}"]
    assert {n: (c["value"], c["source"]) for n, c in described_broker.items()} == {
        n: (e.value, SOURCE_NAMES[e.source]) for n, e in broker.items()
    }
    assert described_broker["super.users"] == {
        "value": "User:ANONYMOUS",
        "source": "STATIC_BROKER_CONFIG",
        "sensitive": False,
        "read_only": True,  # not dynamic (Kafka's ReadOnly: not one of DynamicBrokerConfig's)
    }


@pytest.mark.compat(
    "kafka-java", "AdminClient: listOffsets (earliest, latest, maxTimestamp, timestamp), deleteRecords"
)
def test_java_admin_offsets_and_delete_records(pylog: str, admin_run: dict[str, Any]) -> None:
    data = admin_run["data"]
    tps = [(data, p) for p in range(3)]
    # Records of partition p at BASE_TS + p * 1000 + i * 10, i < 10; the timestamp asked is BASE_TS + 1025.
    assert _result(admin_run, "listOffsets.earliest") == {f"{data}-{p}": [0, -1] for p in range(3)}
    assert _result(admin_run, "listOffsets.latest") == {f"{data}-{p}": [10, -1] for p in range(3)}
    assert _result(admin_run, "listOffsets.maxTimestamp") == {
        f"{data}-{p}": [9, BASE_TS + p * 1000 + 90] for p in range(3)
    }
    by_time = _result(admin_run, "listOffsets.forTimestamp")
    assert by_time == {
        f"{data}-0": [-1, -1],
        f"{data}-1": [3, BASE_TS + 1030],
        f"{data}-2": [0, BASE_TS + 2000],
    }
    assert _result(admin_run, "deleteRecords") == 5
    assert _result(admin_run, "listOffsets.earliest.after") == {f"{data}-0": [5, -1]}
    with KafkaClient(pylog) as client:
        assert _ends(client, tps, EARLIEST_TIMESTAMP) == {tps[0]: 5, tps[1]: 0, tps[2]: 0}
        pylog_by_time = client.list_offsets(dict.fromkeys(tps, admin_run["stamp"]))
    assert {f"{t}-{p}": list(v) for (t, p), v in pylog_by_time.items()} == by_time


@pytest.mark.compat(
    "kafka-java",
    "AdminClient: listConsumerGroups, listGroups, describeConsumerGroups, listConsumerGroupOffsets, "
    "alterConsumerGroupOffsets, deleteConsumerGroups",
)
def test_java_admin_groups(pylog: str, admin_run: dict[str, Any]) -> None:
    prefix, data, group = admin_run["prefix"], admin_run["data"], admin_run["group"]
    active = f"{prefix}-active"
    listed = _result(admin_run, "listConsumerGroups")
    assert listed[group] == {"state": "Empty", "simple": True}
    assert listed[active] == {"state": "Stable", "simple": False}
    listed = _result(admin_run, "listGroups")
    assert listed[active] == {"state": "Stable", "type": "Classic", "protocol": "consumer", "simple": False}
    described = _result(admin_run, "describeConsumerGroups")
    assert described[group]["state"] == "Empty" and described[group]["members"] == []
    live = described[active]
    assert (live["state"], live["type"], live["simple"], live["assignor"]) == (
        "Stable",
        "Classic",
        False,
        "range",
    )
    [member] = live["members"]
    assert member["client_id"] == f"{prefix}-member" and member["member_id"].startswith(f"{prefix}-member-")
    assert member["assignment"] == [f"{data}-{p}" for p in range(3)]
    assert _result(admin_run, "listConsumerGroupOffsets") == {f"{data}-0": [4, ""], f"{data}-1": [6, ""]}
    assert _result(admin_run, "listConsumerGroupOffsets.altered") == {
        f"{data}-0": [3, "altered"],
        f"{data}-1": [6, ""],
    }
    refused = admin_run["calls"]["deleteConsumerGroups.active"]
    assert refused["error"] == "GroupNotEmptyException", refused
    assert _result(admin_run, "deleteConsumerGroups") is None
    with KafkaClient(pylog) as client:
        groups = {g["GroupId"] for g in client.groups.list_groups()}
        assert group not in groups and active in groups
        assert client.groups.committed_offsets(group) == {}


@pytest.mark.compat(
    "kafka-java",
    "AdminClient: describeProducers, listTransactions, describeTransactions, abortTransaction",
)
def test_java_admin_transactions(pylog: str, admin_run: dict[str, Any]) -> None:
    """A transaction left open by a Java producer on partition 1 of the data topic (after its 10 records) is
    seen by every call, and abortTransaction's marker ends it: pylog's last stable offset reaches the end."""
    prefix, data = admin_run["prefix"], admin_run["data"]
    [state] = _result(admin_run, "describeProducers")
    assert state["txn_start_offset"] == 10 and state["producer_id"] >= 0 and state["epoch"] == 0
    assert state["last_sequence"] == 0
    listed = _result(admin_run, "listTransactions")
    assert listed[f"{prefix}-txn"] == {"producer_id": state["producer_id"], "state": "Ongoing"}
    described = _result(admin_run, "describeTransactions")
    assert (described["state"], described["producer_id"], described["epoch"]) == (
        "Ongoing",
        state["producer_id"],
        0,
    )
    assert described["partitions"] == [f"{data}-1"] and described["timeout_ms"] == 60000
    assert _result(admin_run, "abortTransaction") is None
    assert _result(admin_run, "describeProducers.aborted") == [
        {"producer_id": state["producer_id"], "txn_start_offset": -1}
    ]
    tp = (data, 1)
    with KafkaClient(pylog) as client:
        # From offset 10: the open transaction's record and the abort marker (a segment of their own: the
        # records before were written with 2023's timestamps, so the segment rolled on segment.ms, as Kafka's).
        fetched = client.fetch({tp: 10}, isolation_level=IsolationLevel.READ_COMMITTED)[tp]
        [producer] = client.admin.describe_producers([tp])[tp]
    batches = list(read_batches(fetched.records or b"", allow_partial_tail=True))
    assert [(b.base_offset, b.is_control, b.producer_id) for b in batches] == [
        (10, False, state["producer_id"]),
        (11, True, state["producer_id"]),
    ]
    assert batches[1].control_record()[0] == 0  # ABORT
    assert fetched.last_stable_offset == fetched.high_watermark == 12
    assert fetched.aborted_transactions == [(state["producer_id"], 10)]
    assert producer["ProducerId"] == state["producer_id"] and producer["CurrentTxnStartOffset"] == -1


@pytest.mark.compat("kafka-java", "AdminClient: describeLogDirs, electLeaders")
def test_java_admin_log_dirs_and_elect_leaders(
    pylog: str, pylog_dir: Path, admin_run: dict[str, Any]
) -> None:
    data = admin_run["data"]
    with KafkaClient(pylog) as client:
        node = next(iter(client.metadata([]).brokers))
        dirs = client.admin.describe_log_dirs(node)
    [(broker, by_dir)] = _result(admin_run, "describeLogDirs").items()
    assert broker == str(node)
    assert {path for path in by_dir} == {d["LogDir"] for d in dirs}
    expected = {
        d["LogDir"]: {
            f"{t['Name']}-{p['PartitionIndex']}": {"size": p["PartitionSize"], "lag": 0, "future": False}
            for t in d["Topics"]
            if t["Name"] == data
            for p in t["Partitions"]
        }
        for d in dirs
    }
    assert {path: entry["replicas"] for path, entry in by_dir.items()} == expected
    # Each size is what the partition's segment files hold on disk.
    on_disk = {
        f"{data}-{p}": sum(f.stat().st_size for f in (Path(path) / f"{data}-{p}").glob("*.log"))
        for path in by_dir
        for p in range(3)
    }
    [only] = by_dir.values()
    assert {tp: replica["size"] for tp, replica in only["replicas"].items()} == on_disk
    assert all(Path(path).resolve().is_relative_to(broker_log_dir(pylog_dir).resolve()) for path in by_dir)
    assert all(entry["error"] is None for entry in by_dir.values())
    # The single broker already leads every partition: Kafka answers ELECTION_NOT_NEEDED.
    assert _result(admin_run, "electLeaders") == {f"{admin_run['prefix']}-a-0": "ElectionNotNeededException"}


@pytest.mark.compat("kafka-java", "AdminClient: createAcls, describeAcls, deleteAcls")
def test_java_admin_acls(pylog: str, admin_run: dict[str, Any]) -> None:
    prefix = admin_run["prefix"]
    resource = f"TOPIC:LITERAL:{prefix}-a"
    alice = {"resource": resource, "principal": f"User:{prefix}-alice", "host": "*", "operation": "READ"}
    bob = {"resource": resource, "principal": f"User:{prefix}-bob", "host": "*", "operation": "WRITE"}
    alice["permission"], bob["permission"] = "ALLOW", "DENY"
    assert _result(admin_run, "createAcls") is None
    assert _result(admin_run, "describeAcls") == [alice, bob]
    assert _result(admin_run, "deleteAcls") == [alice]
    assert _result(admin_run, "describeAcls.after") == [bob]
    with KafkaClient(pylog) as client:
        answer = client.admin.acl_request(
            29,  # DescribeAcls: what pylog holds after the Java client's calls
            {
                "ResourceTypeFilter": 2,  # TOPIC
                "ResourceNameFilter": f"{prefix}-a",
                "PatternTypeFilter": 3,  # LITERAL
                "PrincipalFilter": None,
                "HostFilter": None,
                "Operation": 1,  # ANY
                "PermissionType": 1,  # ANY
            },
        )
    assert answer["ErrorCode"] == 0, answer
    held = [
        (r["ResourceName"], a["Principal"], a["Operation"], a["PermissionType"])
        for r in answer["Resources"]
        for a in r["Acls"]
    ]
    assert held == [(f"{prefix}-a", f"User:{prefix}-bob", 4, 2)]  # WRITE, DENY


@pytest.mark.compat(
    "kafka-java",
    "AdminClient: alterUserScramCredentials (upsert, delete), describeUserScramCredentials",
)
def test_java_admin_scram_users(pylog: str, admin_run: dict[str, Any]) -> None:
    """The Java client salts the password and sends the upsertion; pylog stores the credential (read back with
    pylog's client: mechanism and iterations), refuses 20000 iterations as Kafka does (Kafka's maximum is 16384)
    and deletes the credential."""
    carol = f"{admin_run['prefix']}-carol"
    assert _result(admin_run, "alterUserScramCredentials") is None
    assert _result(admin_run, "describeUserScramCredentials") == {carol: {"SCRAM-SHA-256": 4096}}
    assert carol in _result(admin_run, "describeUserScramCredentials.all")
    refused = admin_run["calls"]["alterUserScramCredentials.iterations"]
    assert (refused.get("error"), refused.get("message")) == (
        "UnacceptableCredentialException",
        "Too many iterations: 20000 > 16384",
    ), refused
    assert _result(admin_run, "alterUserScramCredentials.delete") is None
    assert _result(admin_run, "describeUserScramCredentials.after") == []
    with KafkaClient(pylog) as client:
        gone = client.admin.describe_user_scram_credentials([carol])[carol]
    assert isinstance(gone, KafkaError) and gone.code == ErrorCode.RESOURCE_NOT_FOUND


@pytest.mark.compat(
    "kafka-java",
    "AdminClient: describeMetadataQuorum",
    differs="not answered (UnsupportedVersionException): pylog has no KRaft quorum to describe",
)
@pytest.mark.compat(
    "kafka-java",
    "AdminClient: describeFeatures",
    differs="group.version and transaction.version (supported 0-1 and 0-2, finalized 1 and 2, as Kafka 4.4): "
    "pylog has no metadata.version or kraft.version feature levels",
)
def test_java_admin_calls_pylog_does_not_answer(admin_run: dict[str, Any]) -> None:
    line = admin_run["calls"]["describeMetadataQuorum"]
    assert (line.get("error"), line.get("message")) == (
        "UnsupportedVersionException",
        "The node does not support DESCRIBE_QUORUM",
    ), line
    # epoch 3: pylog's FinalizedFeaturesEpoch is the sum of its finalized levels (server/features.py)
    assert _result(admin_run, "describeFeatures") == {
        "finalized": {"group.version": [1, 1], "transaction.version": [2, 2]},
        "supported": {"group.version": [0, 1], "transaction.version": [0, 2]},
        "epoch": 3,
    }
