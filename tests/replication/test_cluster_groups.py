"""Consumer groups in a 3-node cluster of real broker processes, with confluent-kafka (librdkafka): the
coordinator of a group is the leader of its ``__consumer_offsets`` partition (RF 3); when that broker is
SIGKILLed mid-consumption the group carries on with its committed offsets intact (the new leader loads the
partition; nothing committed is consumed again), and so does a consumer group (KIP-848) caught mid-revocation by
the same kill, its epochs, members and assignments as before; offsets committed inside a transaction
(``send_offsets_to_transaction``) become visible once the marker lands on the group's partition, also when
another node coordinates the transaction; a commit is answered only once replicated to the ISR (followers
SIGSTOPped: not before they are fenced); too few brokers for ``offsets.topic.replication.factor`` leave the
topic uncreated and FindCoordinator answers COORDINATOR_NOT_AVAILABLE, as Kafka.

The cluster tests share one 3-node cluster (started once per module, made whole again by
:func:`~tests.support.cluster.heal` before each test), each with topics and groups of its own; the one-node
case runs in this process."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from broker_runtime.coordinator.group import CONSUMER_OFFSETS_TOPIC, partition_for
from broker_runtime.coordinator.transaction import partition_for as txn_partition_for
from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import request
from tests.support.brokers import start_node_brokers
from tests.support.cluster import FAST as CLUSTER_FAST
from tests.support.cluster import create_replicated, heal, metadata, partition_state, wait_for

pytestmark = pytest.mark.timeout(240)

OFFSETS_PARTITIONS = 3
FAST = {
    **CLUSTER_FAST,
    "auto.leader.rebalance.enable": "false",
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "group.min.session.timeout.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with cluster_process(tmp_path_factory.mktemp("shared") / "cluster", nodes=3, overrides=FAST) as running:
        yield running


@pytest.fixture
def cluster(shared_cluster: BrokerCluster) -> BrokerCluster:
    """The module's cluster, made whole for the test (every node running, unfenced, every partition with its
    full ISR): what the previous test killed or stopped is restored."""
    heal(shared_cluster)
    return shared_cluster


def _find_group_coordinator(bootstrap: str, group: str) -> dict[str, Any]:
    return request(bootstrap, ApiKey.FIND_COORDINATOR, 3, {"Key": group, "KeyType": 0})


def _coordinator(bootstrap: str, group: str) -> int:
    answer = wait_for(
        lambda: (a := _find_group_coordinator(bootstrap, group))["ErrorCode"] == 0 and a,
        20,
        f"a coordinator for {group}",
    )
    node: int = answer["NodeId"]
    return node


def _live(cluster: BrokerCluster, *gone: int) -> str:
    return ",".join(n.bootstrap for n in cluster.nodes if n.node_id not in gone)


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % partitions)
    assert producer.flush(60) == 0


def _member(bootstrap: str, group: str, **conf: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
            **conf,
        }
    )


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets, read by a client that does not join it (OffsetFetch only, without
    RequireStable: an offset pending in a transaction shows as the previous one)."""
    probe = _member(bootstrap, group, **{"isolation.level": "read_uncommitted"})
    try:
        found = probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
        return {tp.partition: tp.offset for tp in found}
    finally:
        probe.close()


def _ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    probe = _member(bootstrap, "probe-ends")
    try:
        return {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)
        }
    finally:
        probe.close()


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    leader: int = partition_state(bootstrap, topic, partition)["LeaderId"]
    return leader


def test_send_offsets_to_transaction_in_a_cluster_commits_the_offsets_with_the_outputs(
    cluster: BrokerCluster,
) -> None:
    txn_id = "etl-tx"
    create_replicated(cluster, "in", 1, 3)
    create_replicated(cluster, "out", 1, 3)
    _produce(cluster.bootstrap, "in", [b"x%d" % i for i in range(20)], 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(60)
    _coordinator(cluster.bootstrap, "probe")  # creates __consumer_offsets
    wait_for(
        lambda: len(metadata(cluster.bootstrap, [CONSUMER_OFFSETS_TOPIC])["Topics"][0]["Partitions"]) == 3
    )
    txn_node = _leader(cluster.bootstrap, "__transaction_state", txn_partition_for(txn_id, 3))
    # a group coordinated by another node than the transaction: its marker travels by WriteTxnMarkers
    group = next(
        g
        for g in (f"etl-{i}" for i in range(100))
        if _leader(cluster.bootstrap, CONSUMER_OFFSETS_TOPIC, partition_for(g, OFFSETS_PARTITIONS))
        != txn_node
    )
    consumer = _member(cluster.bootstrap, group, **{"isolation.level": "read_committed"})
    consumer.subscribe(["in"])
    try:
        msgs: list[Any] = []
        deadline = time.monotonic() + 60
        while len(msgs) < 20 and time.monotonic() < deadline:
            msgs += [m for m in consumer.consume(20, 0.2) if m.error() is None]
        assert len(msgs) == 20
        producer.begin_transaction()
        for m in msgs:
            producer.produce("out", value=bytes(m.value()).upper())
        producer.send_offsets_to_transaction(
            [TopicPartition("in", 0, msgs[-1].offset() + 1)], consumer.consumer_group_metadata(), 60
        )
        assert _committed(cluster.bootstrap, group, "in", 1) == {0: -1001}, "pending until the commit"
        producer.commit_transaction(60)
        wait_for(
            lambda: _committed(cluster.bootstrap, group, "in", 1) == {0: 20},
            20,
            "the transactional offset committed by the COMMIT marker",
        )
    finally:
        consumer.close()


def test_too_few_brokers_for_the_offsets_replication_factor_no_coordinator(tmp_path: Path) -> None:
    """A one-node cluster in this process (nothing dies here)."""
    cluster_dir = tmp_path / "cluster"
    cluster_dir.mkdir()
    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "pylog.cluster.dir": str(cluster_dir), **FAST}
    (node,) = start_node_brokers(tmp_path, props, nodes=1)
    try:
        answer = _find_group_coordinator(node.bootstrap, "lonely")
        assert answer["ErrorCode"] == 15, answer  # COORDINATOR_NOT_AVAILABLE
        assert "offsets.topic.replication.factor=3" in answer["ErrorMessage"], answer
        assert metadata(node.bootstrap, [CONSUMER_OFFSETS_TOPIC])["Topics"][0]["ErrorCode"] == 3
    finally:
        node.stop()


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> int:
    """A simple OffsetCommit (no member: the group has none) of ``topic``-0; its error code."""
    body = {
        "GroupId": group,
        "GenerationIdOrMemberEpoch": -1,
        "MemberId": "",
        "GroupInstanceId": None,
        "Topics": [{"Name": topic, "Partitions": [{"PartitionIndex": 0, "CommittedOffset": offset}]}],
    }
    answer = request(bootstrap, ApiKey.OFFSET_COMMIT, 8, body)
    code: int = answer["Topics"][0]["Partitions"][0]["ErrorCode"]
    return code


def test_a_commit_is_answered_only_once_replicated_to_the_isr(cluster: BrokerCluster) -> None:
    from tests.support.cluster import paused

    group = "acks"
    create_replicated(cluster, "t", 1, 3)
    coordinator = _coordinator(cluster.bootstrap, group)
    index = partition_for(group, OFFSETS_PARTITIONS)
    leader = next(n.bootstrap for n in cluster.nodes if n.node_id == coordinator)
    wait_for(
        lambda: len(partition_state(leader, CONSUMER_OFFSETS_TOPIC, index)["IsrNodes"]) == 3, 15, "ISR 3"
    )
    assert _commit(leader, group, "t", 1) == 0
    followers = [n for n in cluster.nodes if n.node_id != coordinator]
    with paused(followers[0].pid), paused(followers[1].pid):
        started = time.monotonic()
        assert _commit(leader, group, "t", 2) == 0
        took = time.monotonic() - started
    # the followers cannot fetch: the answer waits until they leave the ISR (fenced after
    # broker.session.timeout.ms=1.5 s), never before
    assert took >= 1.0, f"a commit was answered in {took:.3f} s while no follower could replicate it"
    fetched = request(
        leader,
        ApiKey.OFFSET_FETCH,
        1,
        {"GroupId": group, "Topics": [{"Name": "t", "PartitionIndexes": [0]}]},
    )
    assert fetched["Topics"][0]["Partitions"][0]["CommittedOffset"] == 2, fetched


# Last in the module: no heal has to restart the node it kills (a process start) for a next test.
# ----------------------------------------------------------------- a consumer group (KIP-848) across a failover

HB, DESCRIBE, COMMIT, FETCH = (
    ApiKey.CONSUMER_GROUP_HEARTBEAT,
    ApiKey.CONSUMER_GROUP_DESCRIBE,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
)


#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
_NOT_READY = (14, 15, 16)


def _heartbeat(address: str, group: str, member: str, epoch: int, **kw: Any) -> dict[str, Any]:
    answer = request(address, HB, 1, {"GroupId": group, "MemberId": member, "MemberEpoch": epoch, **kw})
    assert answer["ErrorCode"] == 0, answer
    return answer


def _owned(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"TopicId": t["TopicId"], "Partitions": t["Partitions"]}
        for t in answer["Assignment"]["TopicPartitions"]
    ]


def _partitions(assignment: list[dict[str, Any]]) -> set[int]:
    return {p for t in assignment for p in t["Partitions"]}


def _commit_at_epoch(
    address: str, group: str, member: str, epoch: int, topic: str, offsets: dict[int, int]
) -> None:
    parts = [{"PartitionIndex": p, "CommittedOffset": o, "CommittedMetadata": ""} for p, o in offsets.items()]
    body = {"GroupId": group, "GenerationIdOrMemberEpoch": epoch, "MemberId": member, "GroupInstanceId": None}
    answer = request(address, COMMIT, 9, {**body, "Topics": [{"Name": topic, "Partitions": parts}]})
    assert [p["ErrorCode"] for t in answer["Topics"] for p in t["Partitions"]] == [0] * len(parts), answer


def _fetched(address: str, group: str, topic: str, parts: int) -> dict[int, int]:
    body = {
        "GroupId": group,
        "Topics": [{"Name": topic, "PartitionIndexes": list(range(parts))}],
        "RequireStable": False,
    }
    answer = request(address, FETCH, 7, body)
    return {p["PartitionIndex"]: p["CommittedOffset"] for p in answer["Topics"][0]["Partitions"]}


def _described(address: str, group: str) -> dict[str, Any] | None:
    [g] = request(address, DESCRIBE, 1, {"GroupIds": [group], "IncludeAuthorizedOperations": False})["Groups"]
    if g["ErrorCode"] in _NOT_READY:
        return None
    assert g["ErrorCode"] == 0, g
    members = {
        m["MemberId"]: (
            m["MemberEpoch"],
            _partitions(m["Assignment"]["TopicPartitions"]),
            _partitions(m["TargetAssignment"]["TopicPartitions"]),
        )
        for m in g["Members"]
    }
    return {"state": g["GroupState"], "epochs": (g["GroupEpoch"], g["AssignmentEpoch"]), "members": members}


class ConsumerGroupMidRevocation:
    """A KIP-848 group (raw ConsumerGroupHeartbeat) on the same ``__consumer_offsets`` partition as a classic group,
    so one SIGKILL of their coordinator tests both: :meth:`start` leaves it mid-revocation (member a must give up
    partitions for member b, which joined after a committed), :meth:`check_after_failover` checks it on the new
    coordinator and finishes the revocation."""

    A, B = "member-a-0000000000000000", "member-b-0000000000000000"

    def __init__(self, cluster: BrokerCluster, beside: str) -> None:
        # a group id on the same __consumer_offsets partition as ``beside``
        index = partition_for(beside, OFFSETS_PARTITIONS)
        self.group = next(
            g for i in range(100) if partition_for(g := f"kip848-{i}", OFFSETS_PARTITIONS) == index
        )
        self.topic, self.parts = "kip848-failover", 3
        self.join = {
            "RebalanceTimeoutMs": 60_000,
            "SubscribedTopicNames": [self.topic],
            "TopicPartitions": [],
        }
        create_replicated(cluster, self.topic, self.parts, 3)
        _produce(cluster.bootstrap, self.topic, [f"r{i}".encode() for i in range(30)], self.parts)  # 10 each

    def start(self, address: str) -> None:
        group, topic, a, b = self.group, self.topic, self.A, self.B
        first = wait_for(
            # the coordinator may not have loaded its __consumer_offsets partition yet
            lambda: (
                (
                    r := request(
                        address, HB, 1, {"GroupId": group, "MemberId": a, "MemberEpoch": 0, **self.join}
                    )
                )["ErrorCode"]
                not in _NOT_READY
                and r
            ),
            20,
            "the coordinator answering the consumer group",
        )
        assert (first["ErrorCode"], first["MemberEpoch"], _partitions(_owned(first))) == (0, 1, {0, 1, 2}), (
            first
        )
        _commit_at_epoch(address, group, a, 1, topic, dict.fromkeys(range(self.parts), 5))
        joined = _heartbeat(address, group, b, 0, **self.join)
        assert (joined["MemberEpoch"], _partitions(_owned(joined))) == (2, set())  # a still holds everything
        self.revoking = _heartbeat(address, group, a, 1, TopicPartitions=_owned(first))
        self.moving = {0, 1, 2} - _partitions(_owned(self.revoking))
        # a must give some up before b gets them; it read up to 7 of those
        assert self.revoking["MemberEpoch"] == 1 and self.moving and self.moving != {0, 1, 2}
        _commit_at_epoch(address, group, a, 1, topic, dict.fromkeys(self.moving, 7))
        self.before = _described(address, group)
        assert self.before is not None and self.before["state"] == "Reconciling", self.before

    def check_after_failover(self, address: str) -> None:
        group, topic, a, b = self.group, self.topic, self.A, self.B
        after = wait_for(lambda: _described(address, group), 20, "the consumer group on the new coordinator")
        assert after == self.before, (
            "the consumer group's epochs, members and assignments survive the failover"
        )
        committed = _fetched(address, group, topic, self.parts)
        assert committed == {p: 7 if p in self.moving else 5 for p in range(self.parts)}
        lag = {p: 10 - o for p, o in committed.items()}
        assert lag == {p: 3 if p in self.moving else 5 for p in range(self.parts)}
        # b gets nothing while a has not acked; once a acked, b gets the moved partitions (one owner at a time)
        waiting = _heartbeat(address, group, b, 2, TopicPartitions=[])
        assert waiting["Assignment"] is None, waiting  # unchanged: still nothing
        assert _heartbeat(address, group, a, 1, TopicPartitions=_owned(self.revoking))["MemberEpoch"] == 2
        got = _heartbeat(address, group, b, 2, TopicPartitions=[])
        assert (got["MemberEpoch"], _partitions(_owned(got))) == (2, self.moving)
        final = _described(address, group)
        assert final is not None and final["state"] == "Stable", final


def test_sigkill_of_the_group_coordinator_the_group_continues_with_its_committed_offsets(
    cluster: BrokerCluster,
) -> None:
    """One SIGKILL of the coordinator of a classic group (librdkafka member) and of a consumer group (KIP-848) on
    the same ``__consumer_offsets`` partition: both go on with their state and committed offsets on the new
    coordinator, nothing committed consumed again (see :class:`ConsumerGroupMidRevocation`)."""
    topic, group, parts = "clicks", "dashboards", 3
    kip848 = ConsumerGroupMidRevocation(cluster, group)
    create_replicated(cluster, topic, parts, 3, {"min.insync.replicas": "2"})
    values = [f"v{i}".encode() for i in range(150)]
    _produce(cluster.bootstrap, topic, values, parts)
    coordinator = _coordinator(cluster.bootstrap, group)
    state = partition_state(
        cluster.bootstrap, CONSUMER_OFFSETS_TOPIC, partition_for(group, OFFSETS_PARTITIONS)
    )
    assert state["LeaderId"] == coordinator and sorted(state["ReplicaNodes"]) == [0, 1, 2], state

    member = _member(cluster.bootstrap, group)
    member.subscribe([topic])
    consumed: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
    marks: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 60
        while len(consumed) < 75 and time.monotonic() < deadline:
            got = [m for m in member.consume(20, 0.2) if m.error() is None]
            for msg in got:
                consumed.append((msg.partition(), msg.offset(), bytes(msg.value())))
                marks[msg.partition()] = msg.offset() + 1
            if got:
                member.commit(asynchronous=False)  # the positions: every record consumed so far
        assert len(consumed) >= 75, f"consumed only {len(consumed)} before the kill"
        before = len(consumed)

        kip848.start(next(n.bootstrap for n in cluster.nodes if n.node_id == coordinator))
        cluster.kill(coordinator)
        live = _live(cluster, coordinator)
        successor = (
            int(
                wait_for(
                    lambda: (n := _coordinator(live, group)) != coordinator and n + 1,
                    30,
                    "a new group coordinator",
                )
            )
            - 1
        )
        assert successor != coordinator
        kip848.check_after_failover(next(n.bootstrap for n in cluster.nodes if n.node_id == successor))
        assert {p: o for p, o in _committed(live, group, topic, parts).items() if p in marks} == marks, (
            "the offsets committed before the kill must be on the new coordinator"
        )

        deadline = time.monotonic() + 90
        while len({v for _, _, v in consumed}) < len(values) and time.monotonic() < deadline:
            got = [m for m in member.consume(50, 0.2) if m.error() is None]
            consumed += [(m.partition(), m.offset(), bytes(m.value())) for m in got]
            if got:
                # while the coordinator moves a commit may fail: these positions are committed on a later round
                with contextlib.suppress(KafkaException):
                    member.commit(asynchronous=False)
        assert {v for _, _, v in consumed} == set(values), "every record consumed after the failover"
        again = [(p, o) for p, o, _ in consumed[before:] if o < marks.get(p, 0)]
        assert not again, f"records below the committed offsets were consumed again: {again[:5]}"
        wait_for(
            lambda: _committed(live, group, topic, parts) == _ends(live, topic, parts),
            30,
            "the group's offsets committed to the end of every partition",
        )
    finally:
        member.close()
