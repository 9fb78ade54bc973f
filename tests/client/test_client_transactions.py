"""The client's transaction primitives (AddPartitionsToTxn, EndTxn) against the real broker over sockets,
judged by confluent-kafka read_committed consumers: commit, abort, the retry of a completed EndTxn, fencing by a
newer InitProducerId, and the coordinator's timeout abort seen by a late EndTxn."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.protocol.arrow_records import build_batches
from broker_runtime.protocol.messages import ApiKey
from tests.connector.kafka_peer import consume_to_end

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    # Abort timed-out transactions quickly (Kafka's default check is every 10 s).
    return {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"}


@pytest.fixture
def client(bootstrap: str) -> Iterator[KafkaClient]:
    with KafkaClient(bootstrap, client_id="txn-test") as c:
        c.admin.create_topics({"tx": (2, 1)})
        c.partitions_for("tx")
        yield c


def _write(client: KafkaClient, txn_id: str, pid: int, epoch: int, values: list[bytes], seq: int = 0) -> None:
    """Transactional batches of ``values`` to both partitions of ``tx`` (added to the transaction first)."""
    client.transactions.add_partitions_to_txn(txn_id, pid, epoch, [("tx", 0), ("tx", 1)])
    for partition in (0, 1):
        (built,) = build_batches(
            pa.array(values, pa.binary()),
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        node = client.leader_for("tx", partition)
        result = client.produce(node, {("tx", partition): built.data}, acks=-1, timeout_ms=10000)
        assert result is not None and result[("tx", partition)].error == ErrorCode.NONE


def _committed(bootstrap: str) -> list[bytes]:
    """Every value a read_committed confluent-kafka consumer returns from ``tx`` up to its last stable offsets."""
    return sorted(m.value or b"" for m in consume_to_end(bootstrap, "tx", 2, "read_committed"))


def test_commit_is_visible_and_a_resent_commit_succeeds(client: KafkaClient, bootstrap: str) -> None:
    pid, epoch = client.transactions.init_producer_id("t-commit", 60000)
    _write(client, "t-commit", pid, epoch, [b"a", b"b"])
    assert _committed(bootstrap) == []  # open: nothing visible yet
    client.transactions.end_txn("t-commit", pid, epoch, commit=True)
    client.transactions.end_txn(
        "t-commit", pid, epoch, commit=True
    )  # a driver finishing a prepared commit again
    assert sorted(_committed(bootstrap)) == [b"a", b"a", b"b", b"b"]
    with pytest.raises(KafkaError) as raised:
        client.transactions.end_txn("t-commit", pid, epoch, commit=False)  # the other end of a committed one
    assert raised.value.code == ErrorCode.INVALID_TXN_STATE
    assert "'t-commit'" in str(raised.value)


def test_abort_leaves_nothing_visible(client: KafkaClient, bootstrap: str) -> None:
    pid, epoch = client.transactions.init_producer_id("t-abort", 60000)
    _write(client, "t-abort", pid, epoch, [b"gone"])
    client.transactions.end_txn("t-abort", pid, epoch, commit=False)
    client.transactions.end_txn("t-abort", pid, epoch, commit=False)
    assert _committed(bootstrap) == []


def test_newer_init_fences_and_aborts_the_open_transaction(client: KafkaClient, bootstrap: str) -> None:
    pid, epoch = client.transactions.init_producer_id("t-fence", 60000)
    _write(client, "t-fence", pid, epoch, [b"zombie"])
    pid2, epoch2 = client.transactions.init_producer_id(
        "t-fence", 60000
    )  # a later attempt of the same Spark partition
    assert pid2 == pid and epoch2 > epoch
    with pytest.raises(KafkaError) as raised:
        client.transactions.end_txn("t-fence", pid, epoch, commit=True)
    assert raised.value.code == ErrorCode.PRODUCER_FENCED
    with pytest.raises(KafkaError) as raised:
        client.transactions.add_partitions_to_txn("t-fence", pid, epoch, [("tx", 0)])
    assert raised.value.code == ErrorCode.PRODUCER_FENCED
    _write(client, "t-fence", pid2, epoch2, [b"alive"])
    client.transactions.end_txn("t-fence", pid2, epoch2, commit=True)
    assert sorted(_committed(bootstrap)) == [b"alive", b"alive"]


def test_commit_after_the_transaction_timed_out_is_fenced(client: KafkaClient, bootstrap: str) -> None:
    pid, epoch = client.transactions.init_producer_id("t-late", 300)
    _write(client, "t-late", pid, epoch, [b"late"])
    time.sleep(1.0)  # the coordinator aborts it and bumps the epoch
    with pytest.raises(KafkaError) as raised:
        client.transactions.end_txn("t-late", pid, epoch, commit=True)
    assert raised.value.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
    assert _committed(bootstrap) == []


def test_unknown_topic_fails_after_the_retry_budget(bootstrap: str) -> None:
    with KafkaClient(bootstrap, retries=1, retry_backoff_ms=10) as client:
        pid, epoch = client.transactions.init_producer_id("t-unknown", 60000)
        with pytest.raises(KafkaError) as raised:
            client.transactions.add_partitions_to_txn("t-unknown", pid, epoch, [("no-such-topic", 0)])
        assert raised.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "no-such-topic-0" in str(raised.value) and "2 attempt(s)" in str(raised.value)


def test_client_speaks_the_client_versions_of_the_transaction_apis(client: KafkaClient) -> None:
    node = client.leader_for("tx", 0)
    assert client.negotiated_version(ApiKey.ADD_PARTITIONS_TO_TXN, node) <= 3
    assert client.negotiated_version(ApiKey.END_TXN, node) <= 4
