"""Consumer groups with real clients against the real broker: confluent-kafka (librdkafka) members joining and
leaving with manual commits (every record committed exactly once per group), kafka-python's group consumer,
committed offsets surviving a restart and a SIGKILL of the broker, and a member that stops heartbeating
(SIGSTOP) removed after session.timeout.ms."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker_runtime.launch.process import broker_process
from tests.support.brokers import start_broker
from tests.support.processes import kill_broker

pytestmark = pytest.mark.timeout(180)

#: Short timeouts keep rebalances and session expiry fast (the broker's minimum session timeout lowered too).
GROUP_CONF = {
    "group.min.session.timeout.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    # the consumer group protocol (KIP-848): the coordinator sets the heartbeat interval and session timeout
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.session.timeout.ms": str(2000),
    # a topic created after a regex subscription is picked up at the next heartbeat (Kafka: 10 s at the least)
    "pylog.group.consumer.regex.refresh.min.interval.ms": "0",
}
SESSION_MS = 2000


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    return dict(GROUP_CONF)


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for v in values:
        producer.produce(topic, value=v, key=v)
    assert producer.flush(30) == 0


def _consumer(bootstrap: str, group: str, **conf: Any) -> Consumer:
    # under group.protocol=consumer the coordinator sets both timings (librdkafka refuses them client-side)
    timings = {} if conf.get("group.protocol") == "consumer" else {"session.timeout.ms": SESSION_MS}
    if timings:
        timings["heartbeat.interval.ms"] = 200
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **timings,
            **conf,
        }
    )


def _take_and_commit(consumer: Consumer, committed: Counter[bytes]) -> None:
    """Poll once; a record counts as consumed only if the synchronous commit after it succeeded."""
    msg = consumer.poll(0.1)
    if msg is None or msg.error():
        return
    deadline = time.monotonic() + 5
    while True:
        try:
            consumer.commit(message=msg, asynchronous=False)
            break
        except KafkaException as exc:
            code = exc.args[0].code()
            # Under the consumer group protocol (KIP-848) a commit at an epoch the coordinator has moved past is
            # refused STALE_MEMBER_EPOCH (Kafka's ConsumerGroup.validateOffsetCommit) although the member may
            # still own the partition; no rebalance follows, so the record is not delivered again: the
            # application retries at its new epoch while it still owns the partition (as Kafka's Java consumer
            # does inside commitSync).
            owned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
            if (
                code == KafkaError.STALE_MEMBER_EPOCH
                and (msg.topic(), msg.partition()) in owned
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
                continue
            # the partition moved to another member (generation fenced): that member gets the record again
            assert code in (
                KafkaError.REBALANCE_IN_PROGRESS,
                KafkaError.ILLEGAL_GENERATION,
                KafkaError.UNKNOWN_MEMBER_ID,
                KafkaError._ASSIGNMENT_LOST,
                KafkaError.STALE_MEMBER_EPOCH,
                KafkaError.FENCED_MEMBER_EPOCH,
            ), exc
            return
    committed[bytes(msg.value())] += 1


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_three_members_join_and_leave_every_record_committed_once(bootstrap: str, protocol: str) -> None:
    """Under both group protocols: ``classic`` (JoinGroup/SyncGroup, client-side assignment) and ``consumer``
    (KIP-848: ConsumerGroupHeartbeat, server-side assignment, revocation before assignment)."""
    topic, group = f"orders-{protocol}", f"billing-{protocol}"
    _create(bootstrap, topic, 6)
    committed: Counter[bytes] = Counter()
    produced: list[bytes] = []
    members: list[Consumer] = []
    # phases: (action before producing, records produced): join, join, join, leave, leave
    phases = ["join", "join", "join", "leave", "leave"]
    try:
        for phase, action in enumerate(phases):
            if action == "join":
                member = _consumer(bootstrap, group, **{"group.protocol": protocol})
                member.subscribe([topic])
                members.append(member)
            else:
                members.pop(0).close()  # LeaveGroup: the others rebalance
            batch = [f"p{phase}-{i}".encode() for i in range(120)]
            _produce(bootstrap, topic, batch)
            produced += batch
            deadline = time.monotonic() + 60
            while sum(committed.values()) < len(produced) and time.monotonic() < deadline:
                for m in members:
                    _take_and_commit(m, committed)
            assert set(committed) == set(produced), (
                f"phase {phase}: {len(set(produced) - set(committed))} missing"
            )
        duplicates = {v: n for v, n in committed.items() if n > 1}
        assert not duplicates, f"committed more than once: {list(duplicates.items())[:5]}"
        # the group's committed offsets are the end of every partition
        last = members[0]
        positions = last.committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
        ends = [last.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(6)]
        assert [tp.offset for tp in positions] == ends
    finally:
        for m in members:
            m.close()


def test_a_regex_subscription_under_the_consumer_protocol_picks_up_a_topic_created_later(
    bootstrap: str,
) -> None:
    """librdkafka passes a subscription starting with ``^`` as ``SubscribedTopicRegex``; the coordinator resolves
    it (KIP-848), so a topic created after the subscription is assigned without the client asking."""
    _create(bootstrap, "rx-one", 2)
    _produce(bootstrap, "rx-one", [b"one-0", b"one-1"])
    _create(bootstrap, "not-rx", 1)
    _produce(bootstrap, "not-rx", [b"other"])
    consumer = _consumer(bootstrap, "rx-group", **{"group.protocol": "consumer"})
    consumer.subscribe(["^rx-.*"])
    got: set[bytes] = set()

    def take_until(wanted: set[bytes]) -> None:
        deadline = time.monotonic() + 30
        while not wanted <= got and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                got.add(bytes(msg.value()))
        assert wanted <= got, f"missing {wanted - got}"

    try:
        take_until({b"one-0", b"one-1"})
        _create(bootstrap, "rx-two", 1)
        _produce(bootstrap, "rx-two", [b"two-0"])
        take_until({b"two-0"})
        assert b"other" not in got
        assert {tp.topic for tp in consumer.assignment()} == {"rx-one", "rx-two"}
    finally:
        consumer.close()


def test_kafka_python_group_consumer_commits_and_a_new_member_resumes(bootstrap: str) -> None:
    """What Kafka promises a group consumer (at least once): every record read, none of a committed offset read
    again by the next member. A record read twice is legal only across a rebalance (with a 2 s session under
    heavy load kafka-python's heartbeat thread can be late, the member's session expires, it rejoins and re-reads
    what it had not committed): so duplicates are allowed exactly when the member was assigned more than once."""
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    class Assignments(ConsumerRebalanceListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.count = 0

        def on_partitions_revoked(self, revoked: Any) -> None:
            pass

        def on_partitions_assigned(self, assigned: Any) -> None:
            self.count += 1

    def read_all() -> tuple[list[bytes], int]:
        consumer = KafkaConsumer(**conf)
        assignments = Assignments()
        consumer.subscribe([topic], listener=assignments)
        got = [m.value for m in consumer]
        consumer.commit()
        consumer.close()
        return got, assignments.count

    def check(got: list[bytes], expected: list[bytes], assignments: int) -> None:
        assert set(got) == set(
            expected
        )  # every record at least once, nothing else (not one committed before)
        if assignments == 1:  # no rebalance: each record exactly once
            assert sorted(got) == sorted(expected)

    topic, group = "events", "kp-group"
    _create(bootstrap, topic, 3)
    first = [f"a{i}".encode() for i in range(50)]
    _produce(bootstrap, topic, first)
    conf: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "session_timeout_ms": SESSION_MS,
        "heartbeat_interval_ms": 200,
        "consumer_timeout_ms": 3000,
    }
    got, assignments = read_all()
    check(got, first, assignments)
    second = [f"b{i}".encode() for i in range(20)]
    _produce(bootstrap, topic, second)
    got, assignments = read_all()
    check(got, second, assignments)  # resumed at the committed offsets: nothing of the first batch again


def _consume_all(consumer: Consumer, n: int, timeout_s: float = 30) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            out.append(msg)
    return out


def _commit_half(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    """Consume everything, commit the middle of each partition; returns partition -> committed offset."""
    consumer = _consumer(bootstrap, group)
    consumer.subscribe([topic])
    msgs = _consume_all(consumer, 60)
    assert len(msgs) == 60
    by_partition: dict[int, list[int]] = {}
    for m in msgs:
        by_partition.setdefault(m.partition(), []).append(m.offset())
    marks = {p: offsets[len(offsets) // 2] for p, offsets in by_partition.items()}
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in marks.items()], asynchronous=False)
    consumer.close()
    return marks


def _assert_resumes(bootstrap: str, topic: str, group: str, marks: dict[int, int]) -> None:
    consumer = _consumer(bootstrap, group)
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in marks], timeout=20)
        assert {tp.partition: tp.offset for tp in got} == marks
        consumer.subscribe([topic])
        msgs = _consume_all(consumer, 60 - sum(marks.values()), timeout_s=30)
        first: dict[int, int] = {}
        for m in msgs:
            first.setdefault(m.partition(), m.offset())
        assert first == marks, f"the group resumed at {first}, committed {marks}"
    finally:
        consumer.close()


def test_committed_offsets_survive_a_broker_restart(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, GROUP_CONF)
    try:
        _create(broker.bootstrap, "logs", 3)
        _produce(broker.bootstrap, "logs", [f"v{i}".encode() for i in range(60)])
        marks = _commit_half(broker.bootstrap, "logs", "restart-group")
    finally:
        broker.stop()
    broker = start_broker(tmp_path, GROUP_CONF)  # same log dirs, a new port
    try:
        _assert_resumes(broker.bootstrap, "logs", "restart-group", marks)
    finally:
        broker.stop()


def test_committed_offsets_survive_sigkill_of_the_broker(tmp_path: Path) -> None:
    with broker_process(tmp_path, GROUP_CONF) as bootstrap:
        _create(bootstrap, "logs", 3)
        _produce(bootstrap, "logs", [f"v{i}".encode() for i in range(60)])
        marks = _commit_half(bootstrap, "logs", "kill-group")
        kill_broker(tmp_path)
    with broker_process(tmp_path, GROUP_CONF) as bootstrap:
        _assert_resumes(bootstrap, "logs", "kill-group", marks)


@pytest.fixture
def stopped_member(bootstrap: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.interop.group_member", bootstrap, "watch", "ticks", str(SESSION_MS)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        yield proc
    finally:
        with_signal = proc.poll() is None
        if with_signal:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


def test_member_that_stops_heartbeating_is_removed_after_session_timeout(
    bootstrap: str, broker: Any, stopped_member: subprocess.Popen[str]
) -> None:
    _create(bootstrap, "ticks", 4)
    assert stopped_member.stdout is not None
    assert stopped_member.stdout.readline().strip() == "assigned 4"  # alone in the group: every partition
    other = _consumer(bootstrap, "watch")
    counts: list[int] = []
    other.subscribe(["ticks"], on_assign=lambda c, parts: counts.append(len(parts)))
    try:
        deadline = time.monotonic() + 30
        while not (counts and 0 < counts[-1] < 4) and time.monotonic() < deadline:
            other.poll(0.1)
        assert counts and counts[-1] == 2, f"the two members did not share the partitions: {counts}"
        group = broker.ctx.group_coordinator.group("watch")
        assert len(group.members) == 2
        os.kill(stopped_member.pid, signal.SIGSTOP)  # no more heartbeats; its TCP connection stays open
        stopped_at = time.monotonic()
        while counts[-1] != 4 and time.monotonic() < stopped_at + 30:
            other.poll(0.1)
        took = time.monotonic() - stopped_at
        assert counts[-1] == 4, f"the stopped member kept its partitions: {counts}"
        assert len(group.members) == 1
        # removed by the session timeout, not before it (and not much after: a rebalance round on top)
        assert SESSION_MS / 1000 * 0.9 <= took <= SESSION_MS / 1000 + 10, took
    finally:
        other.close()


def test_admin_client_lists_describes_and_deletes_groups(bootstrap: str) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KpTopicPartition

    _create(bootstrap, "audit", 2)
    _produce(bootstrap, "audit", [f"x{i}".encode() for i in range(10)])
    member = _consumer(bootstrap, "auditors", **{"client.id": "auditor-1"})
    member.subscribe(["audit"])
    assert len(_consume_all(member, 10)) == 10
    member.commit(asynchronous=False)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        listed = admin.list_consumer_groups().result(10)
        assert [(g.group_id, g.state.name) for g in listed.valid] == [("auditors", "STABLE")]
        described = admin.describe_consumer_groups(["auditors"])["auditors"].result(10)
        assert described.state.name == "STABLE" and described.partition_assignor == "range"
        assert [
            (m.client_id, m.host, sorted(tp.partition for tp in m.assignment.topic_partitions))
            for m in described.members
        ] == [("auditor-1", "/127.0.0.1", [0, 1])]
        # a group with members cannot be deleted, nor the offsets of a topic it consumes
        with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
            admin.delete_consumer_groups(["auditors"])["auditors"].result(10)
        kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            answer = kp_admin.delete_group_offsets("auditors", [KpTopicPartition("audit", 0)])
            assert {tp.partition: err.__name__ for tp, err in answer.items()} == {
                0: "GroupSubscribedToTopicError"
            }
        finally:
            kp_admin.close()
    finally:
        member.close()
    # once empty: the committed offsets are listed (lag = end - committed = 0) and the group can be deleted
    from confluent_kafka import ConsumerGroupTopicPartitions

    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("auditors")])[
        "auditors"
    ].result(10)
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [
        (p, member_end) for p, member_end in _ends(bootstrap, "audit", 2)
    ]
    admin.delete_consumer_groups(["auditors"])["auditors"].result(10)
    assert admin.list_consumer_groups().result(10).valid == []
    with pytest.raises(KafkaException, match="GROUP_ID_NOT_FOUND"):
        admin.delete_consumer_groups(["auditors"])["auditors"].result(10)


def _ends(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    probe = _consumer(bootstrap, "probe")
    try:
        return [
            (p, probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1])
            for p in range(partitions)
        ]
    finally:
        probe.close()
