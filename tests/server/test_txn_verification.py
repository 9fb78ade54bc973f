"""Transaction verification on produce (KIP-890 part 1, ``broker_runtime/server/txn_verification.py``), over real
sockets with raw requests (so a test can send what a delayed or retried request looks like): a transactional
produce arriving after its transaction was aborted is refused and appends nothing, so no hanging transaction holds
the last stable offset; the producer's next transaction works; the coordinator's AddPartitionsToTxn v4 answers
``VerifyOnly``; the same refusal when the partition's leader is not the coordinator (a question over the wire, in
a cluster of two in-process nodes, where a transactions v2 produce is added the same way, ``test_txn_v2.py``);
``transaction.partition.verification.enable=false`` appends as before."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker_runtime.errors import ErrorCode
from broker_runtime.launch import create_topic
from broker_runtime.protocol.messages import CONSUMER_REPLICA_ID, LATEST_TIMESTAMP, ApiKey, IsolationLevel
from broker_runtime.protocol.records import CONTROL_ABORT
from broker_runtime.server import txn_verification
from broker_runtime.server.replica_manager import ReplicaManager
from broker_runtime.server.topics import TopicManager
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager
from tests.server.rawclient import RawConnection, create_topic_body
from tests.support.brokers import start_broker, start_node_brokers
from tests.support.cluster import FAST, metadata, wait_for

pytestmark = pytest.mark.timeout(60)


def _batch(producer_id: int, epoch: int, sequence: int, count: int = 2) -> bytearray:
    """A transactional batch of ``count`` records (kafka-python's builder: bytes pylog did not make)."""
    builder = DefaultRecordBatchBuilder(2, 0, True, producer_id, epoch, sequence, 1 << 20)
    for i in range(count):
        builder.append(i, 1_700_000_000_000, b"k", f"v{sequence + i}".encode(), [])
    return bytearray(builder.build())


class Txn:
    """One transactional id's raw requests: to its coordinator (``coord``) and a partition's leader (``leader``)."""

    def __init__(
        self, coord: RawConnection, leader: RawConnection, txn_id: str, topic: str, partition: int
    ) -> None:
        self.coord, self.leader, self.txn_id, self.topic, self.partition = (
            coord,
            leader,
            txn_id,
            topic,
            partition,
        )
        answer = coord.call(
            ApiKey.INIT_PRODUCER_ID,
            3,
            {"TransactionalId": txn_id, "TransactionTimeoutMs": 60000, "ProducerId": -1, "ProducerEpoch": -1},
        )
        assert answer["ErrorCode"] == 0, answer
        self.pid, self.epoch = answer["ProducerId"], answer["ProducerEpoch"]
        self.sequence = 0

    def add(self) -> None:
        body = {
            "V3AndBelowTransactionalId": self.txn_id,
            "V3AndBelowProducerId": self.pid,
            "V3AndBelowProducerEpoch": self.epoch,
            "V3AndBelowTopics": [{"Name": self.topic, "Partitions": [self.partition]}],
        }
        answer = self.coord.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, body)
        assert answer["ResultsByTopicV3AndBelow"][0]["ResultsByPartition"][0]["PartitionErrorCode"] == 0

    def produce(self, version: int = 9, sequence: int | None = None) -> dict[str, Any]:
        """A transactional produce of 2 records (at the next sequence, or ``sequence``): the partition's answer."""
        seq = self.sequence if sequence is None else sequence
        body = {
            "TransactionalId": self.txn_id,
            "Acks": -1,
            "TimeoutMs": 5000,
            "TopicData": [
                {
                    "Name": self.topic,
                    "PartitionData": [
                        {"Index": self.partition, "Records": _batch(self.pid, self.epoch, seq)}
                    ],
                }
            ],
        }
        answer: dict[str, Any] = self.leader.call(ApiKey.PRODUCE, version, body)["Responses"][0][
            "PartitionResponses"
        ][0]
        if answer["ErrorCode"] == 0 and sequence is None:
            self.sequence += 2
        return answer

    def end(self, commit: bool) -> None:
        body = {
            "TransactionalId": self.txn_id,
            "ProducerId": self.pid,
            "ProducerEpoch": self.epoch,
            "Committed": commit,
        }
        assert self.coord.call(ApiKey.END_TXN, 3, body)["ErrorCode"] == 0

    def completed(self, state: str) -> None:
        """Wait until the coordinator logged ``state`` (``CompleteAbort``, ``CompleteCommit``) for the id. In a
        cluster a partition shows its marker before the coordinator learns it was written (the WriteTxnMarkers
        answer crosses the wire, then the Complete record is logged): a request meanwhile finds the Prepare state
        (CONCURRENT_TRANSACTIONS, which a verification answers the produce as NOT_ENOUGH_REPLICAS)."""

        def found() -> str:
            body = {"TransactionalIds": [self.txn_id]}
            answer = self.coord.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, body)["TransactionStates"][0]
            assert answer["ErrorCode"] == 0, answer
            return str(answer["TransactionState"])

        wait_for(lambda: found() == state, what=f"the coordinator's {state} of {self.txn_id!r}")

    def offsets(self) -> tuple[int, int]:
        """(high watermark, last stable offset) of the partition, from its leader."""
        return self._latest(IsolationLevel.READ_UNCOMMITTED), self._latest(IsolationLevel.READ_COMMITTED)

    def _latest(self, isolation: int) -> int:
        body = {
            "ReplicaId": CONSUMER_REPLICA_ID,
            "IsolationLevel": isolation,
            "Topics": [
                {
                    "Name": self.topic,
                    "Partitions": [
                        {
                            "PartitionIndex": self.partition,
                            "CurrentLeaderEpoch": -1,
                            "Timestamp": LATEST_TIMESTAMP,
                        }
                    ],
                }
            ],
        }
        part = self.leader.call(ApiKey.LIST_OFFSETS, 5, body)["Topics"][0]["Partitions"][0]
        assert part["ErrorCode"] == 0, part
        offset: int = part["Offset"]
        return offset


def _abort_then_late_produce(txn: Txn) -> None:
    """A transaction aborted, then a late produce of it: refused, nothing appended, the LSO not held; then the
    producer's next transaction is verified and committed."""
    txn.add()
    assert txn.produce()["ErrorCode"] == 0
    txn.end(commit=False)
    # 2 records and the ABORT marker (in a cluster the marker follows the answer, written in the background)
    after_abort = wait_for(lambda: txn.offsets() == (3, 3) and txn.offsets(), what="the ABORT marker")
    txn.completed("CompleteAbort")  # a "late" produce must not meet the coordinator still in PrepareAbort
    late = txn.produce(version=9)  # the same producer and epoch, as a request delayed past the abort
    assert late["ErrorCode"] == ErrorCode.INVALID_TXN_STATE, late
    assert "not added to the transaction" in (late["ErrorMessage"] or "")
    late = txn.produce(version=11)  # a KIP-890 client learns it must abort
    assert late["ErrorCode"] == ErrorCode.TRANSACTION_ABORTABLE, late
    assert txn.offsets() == after_abort, "a late produce was appended: its transaction would hang, LSO held"
    txn.add()
    assert txn.produce()["ErrorCode"] == 0
    txn.end(commit=True)
    wait_for(lambda: txn.offsets() == (6, 6), what="the COMMIT marker")


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = start_broker(tmp_path_factory.mktemp("verify"))
    try:
        with RawConnection(broker.bootstrap) as conn:
            for name in ("late", "ask"):
                assert (
                    conn.call(ApiKey.CREATE_TOPICS, 7, create_topic_body(name))["Topics"][0]["ErrorCode"] == 0
                )
        yield broker.bootstrap
    finally:
        broker.stop()


def test_a_produce_after_its_transaction_was_aborted_is_refused_and_appends_nothing(single: str) -> None:
    with RawConnection(single) as conn:
        _abort_then_late_produce(Txn(conn, conn, "late-single", "late", 0))


def test_the_coordinator_answers_verify_only_without_adding(single: str) -> None:
    with RawConnection(single) as conn:
        txn = Txn(conn, conn, "ask-single", "ask", 0)
        txn.add()

        def verify(epoch: int, partitions: list[int]) -> dict[int, int]:
            body = {
                "Transactions": [
                    {
                        "TransactionalId": txn.txn_id,
                        "ProducerId": txn.pid,
                        "ProducerEpoch": epoch,
                        "VerifyOnly": True,
                        "Topics": [{"Name": "ask", "Partitions": partitions}],
                    }
                ]
            }
            answer = conn.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, body)
            assert answer["ErrorCode"] == 0
            (result,) = answer["ResultsByTransaction"]
            return {
                p["PartitionIndex"]: p["PartitionErrorCode"]
                for p in result["TopicResults"][0]["ResultsByPartition"]
            }

        assert verify(txn.epoch, [0, 7]) == {0: ErrorCode.NONE, 7: ErrorCode.TRANSACTION_ABORTABLE}
        assert verify(txn.epoch + 1, [0]) == {0: ErrorCode.PRODUCER_FENCED}
        assert verify(txn.epoch, [7]) == {7: ErrorCode.TRANSACTION_ABORTABLE}  # asking added nothing
        txn.end(commit=False)
        assert verify(txn.epoch, [0]) == {0: ErrorCode.TRANSACTION_ABORTABLE}


def test_without_verification_a_late_produce_opens_a_hanging_transaction(tmp_path: Path) -> None:
    """``transaction.partition.verification.enable=false``: what Kafka before KIP-890 did (and pylog before it)."""
    broker = start_broker(tmp_path, {"transaction.partition.verification.enable": "false"})
    try:
        with RawConnection(broker.bootstrap) as conn:
            conn.call(ApiKey.CREATE_TOPICS, 7, create_topic_body("off"))
            txn = Txn(conn, conn, "late-off", "off", 0)
            txn.add()
            assert txn.produce()["ErrorCode"] == 0
            txn.end(commit=False)
            assert txn.produce()["ErrorCode"] == 0
            assert txn.offsets() == (5, 3)  # the LSO held at the hanging batch
            # transactions v2 still add their partitions through the coordinator (nothing else would)
            conn.call(ApiKey.CREATE_TOPICS, 7, create_topic_body("off-v2"))
            v2 = Txn(conn, conn, "v2-off", "off-v2", 0)
            assert v2.produce(version=12)["ErrorCode"] == 0
            body = {
                "TransactionalId": v2.txn_id,
                "ProducerId": v2.pid,
                "ProducerEpoch": v2.epoch,
                "Committed": True,
            }
            assert conn.call(ApiKey.END_TXN, 5, body)["ErrorCode"] == 0
            assert v2.offsets() == (3, 3)  # its COMMIT marker written: the partition was in the transaction
    finally:
        broker.stop()


def test_a_leader_that_is_not_the_coordinator_asks_it_over_the_wire(tmp_path: Path) -> None:
    (tmp_path / "cluster").mkdir()
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "pylog.cluster.dir": str(tmp_path / "cluster"),
        **FAST,
        "transaction.state.log.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "auto.leader.rebalance.enable": "false",
    }
    brokers = start_node_brokers(tmp_path, props, nodes=2)
    try:
        by_node = {b.config.node_id: b.bootstrap for b in brokers}
        bootstrap = ",".join(by_node.values())
        with RawConnection(brokers[0].bootstrap) as conn:
            found = wait_for(
                lambda: (
                    (a := conn.call(ApiKey.FIND_COORDINATOR, 3, {"Key": "late-cluster", "KeyType": 1}))[
                        "ErrorCode"
                    ]
                    == 0
                    and a
                ),
                what="a transaction coordinator",
            )
        coordinator = found["NodeId"]
        create_topic(bootstrap, "spread", 2, replication_factor=1)
        parts = wait_for(
            lambda: [
                p
                for p in metadata(brokers[0].bootstrap, ["spread"])["Topics"][0]["Partitions"]
                if p["LeaderId"] >= 0
            ],
            what="partition leaders",
        )
        other = next(p for p in parts if p["LeaderId"] != coordinator)
        leader_id = other["LeaderId"]
        wait_for(  # the leader itself knows it leads
            lambda: any(
                p["PartitionIndex"] == other["PartitionIndex"] and p["LeaderId"] == leader_id
                for p in metadata(by_node[leader_id], ["spread"])["Topics"][0]["Partitions"]
            ),
            what="the leader's own metadata",
        )
        with (
            RawConnection(by_node[coordinator]) as coord,
            RawConnection(by_node[other["LeaderId"]]) as leader,
        ):
            _abort_then_late_produce(Txn(coord, leader, "late-cluster", "spread", other["PartitionIndex"]))
            # transactions v2: the leader adds the partition with AddPartitionsToTxn v5 over the wire
            from tests.server.test_txn_v2 import v2_commit_then_late_produce

            v2_commit_then_late_produce(
                Txn(coord, leader, "late-cluster-v2", "spread", other["PartitionIndex"])
            )
    finally:
        for b in brokers:
            b.stop()


def test_a_marker_written_while_a_partition_is_verified_kills_the_verification(tmp_path: Path) -> None:
    """The guard of a remote verification (``ReplicaManager.begin_verification``): requests of one producer
    verifying at once share it, a marker of the producer on the partition kills it (the append that follows is
    then refused unless the producer opened a transaction there meanwhile), the last user removes it."""
    logs = LogManager([tmp_path], LogConfig())
    logs.startup()
    topics = TopicManager(logs, LogConfig())
    topics.load()
    topics.create("data", 1)
    replicas = ReplicaManager(topics, wall_ms=lambda: 1_700_000_000_000)
    pid = 4242
    first = replicas.begin_verification("data", 0, pid)
    assert replicas.begin_verification("data", 0, pid) is first and first.alive  # shared while in flight
    other = replicas.begin_verification("data", 0, pid + 1)
    assert replicas.append("data", 0, _batch(pid, 0, 0), 9, acks=-1).error == ErrorCode.NONE
    assert replicas.has_ongoing_transaction("data", 0, pid, 0) is True
    assert replicas.has_ongoing_transaction("data", 0, pid, 1) is False  # open, but not at the asker's epoch
    assert replicas.write_txn_marker("data", 0, pid, 0, 0, CONTROL_ABORT).error == ErrorCode.NONE
    assert not first.alive and other.alive  # only the producer's own marker counts
    assert replicas.has_ongoing_transaction("data", 0, pid, 0) is False
    fresh = replicas.begin_verification("data", 0, pid)
    assert fresh is not first and fresh.alive  # a verification begun after the marker is a new one
    for guard, producer in ((first, pid), (first, pid), (fresh, pid), (other, pid + 1)):
        replicas.end_verification("data", 0, producer, guard)
    assert replicas.begin_verification("data", 0, pid + 1) is not other  # the last user removed it
    assert replicas.has_ongoing_transaction("data", 7, pid, 0) is None  # not led here
    logs.shutdown()


def test_a_txn_offset_commit_after_its_transaction_was_aborted_leaves_nothing_pending(single: str) -> None:
    """The group's ``__consumer_offsets`` partition is verified as a produced partition is: a late TxnOffsetCommit
    is refused, so no pending offsets wait for a marker that will never come (read_committed consumers would get
    UNSTABLE_OFFSET_COMMIT from OffsetFetch until then)."""
    group = "late-offsets-group"
    with RawConnection(single) as conn:
        txn = Txn(conn, conn, "late-offsets", "late", 0)
        add = {
            "TransactionalId": txn.txn_id,
            "ProducerId": txn.pid,
            "ProducerEpoch": txn.epoch,
            "GroupId": group,
        }

        def commit(version: int) -> int:
            body = {
                "TransactionalId": txn.txn_id,
                "GroupId": group,
                "ProducerId": txn.pid,
                "ProducerEpoch": txn.epoch,
                "GenerationId": -1,
                "MemberId": "",
                "GroupInstanceId": None,
                "Topics": [
                    {
                        "Name": "late",
                        "Partitions": [
                            {
                                "PartitionIndex": 0,
                                "CommittedOffset": 42,
                                "CommittedLeaderEpoch": -1,
                                "CommittedMetadata": "",
                            }
                        ],
                    }
                ],
            }
            code: int = conn.call(ApiKey.TXN_OFFSET_COMMIT, version, body)["Topics"][0]["Partitions"][0][
                "ErrorCode"
            ]
            return code

        def stable_offset() -> tuple[int, int]:
            body = {
                "GroupId": group,
                "Topics": [{"Name": "late", "PartitionIndexes": [0]}],
                "RequireStable": True,
            }
            part = conn.call(ApiKey.OFFSET_FETCH, 7, body)["Topics"][0]["Partitions"][0]
            return part["ErrorCode"], part["CommittedOffset"]

        assert conn.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, add)["ErrorCode"] == 0
        assert commit(3) == ErrorCode.NONE
        txn.end(commit=False)
        assert stable_offset() == (ErrorCode.NONE, -1)
        assert commit(3) == ErrorCode.INVALID_TXN_STATE
        assert commit(4) == ErrorCode.TRANSACTION_ABORTABLE
        assert stable_offset() == (ErrorCode.NONE, -1), (
            "a late commit left offsets pending: a hanging transaction"
        )


def test_pipelined_produces_of_one_producer_append_in_request_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two produces of one producer to a partition with no open transaction, dispatched at once (a pipelining
    connection) while its coordinator is remote: the first one's answer is held back and the second one's comes
    at once, yet the first batch is appended first (the chain per (partition, producer id)), and the second,
    finding the transaction open by then, asks nothing. The coordinator's answer is a stand-in here: what is
    judged is the order of the real appends."""
    logs = LogManager([tmp_path], LogConfig())
    logs.startup()
    topics = TopicManager(logs, LogConfig())
    topics.load()
    topics.create("data", 1)
    replicas = ReplicaManager(topics, wall_ms=lambda: 1_700_000_000_000)
    pid, release, asked = 77, asyncio.Event(), []

    async def ask(
        ctx: Any, txn_id: str, producer_id: int, epoch: int, partitions: list[Any], add: bool = False
    ) -> Any:
        asked.append(partitions)
        if len(asked) == 1:
            await release.wait()
        return dict.fromkeys(partitions, ErrorCode.NONE)

    monkeypatch.setattr(txn_verification, "_ask_coordinator", ask)

    async def scenario() -> list[tuple[int, int]]:
        coordinator = SimpleNamespace(owner_error=lambda _id: ErrorCode.NOT_COORDINATOR)
        ctx: Any = SimpleNamespace(
            config=SimpleNamespace(transaction_partition_verification_enable=True),
            replicas=replicas,
            txn_coordinator=coordinator,
            loop=asyncio.get_running_loop(),
        )
        appended: list[tuple[int, int]] = []

        def produce(sequence: int) -> Any:
            batch = _batch(pid, 0, sequence)

            def append(refused: dict[Any, Any]) -> None:
                assert not refused
                appended.append((sequence, replicas.append("data", 0, batch, 9, acks=1).error))

            return txn_verification.verify_then(ctx, 9, "ordered", [("data", 0, batch)], append)

        first, second = produce(0), produce(2)
        for _ in range(5):  # let the second one run ahead as far as it can
            await asyncio.sleep(0)
        release.set()
        await asyncio.wait_for(asyncio.gather(first, second), 5)
        return appended

    try:
        assert asyncio.run(scenario()) == [(0, ErrorCode.NONE), (2, ErrorCode.NONE)]
        assert asked == [[("data", 0)]]  # the second found the transaction open: no question
    finally:
        logs.shutdown()
