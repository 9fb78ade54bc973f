"""Transactional write tasks and the driver's EndTxn, at the task level (``write_task`` + ``end_transactions``)
against a real broker process, judged by confluent-kafka read_committed consumers.

Attempts are driven with the identities Spark would give them (as tests/connector/test_writer_reruns.py does):
a retry of the same Spark partition uses the same transactional id and fences the earlier attempt.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.errors import (
    ConfigError,
    ErrorCode,
    InjectedFailure,
    ProduceFailedError,
    TransactionCommitError,
)
from broker_runtime.launch import broker_process
from broker_runtime.protocol.records import RecordBatchBuilder
from spark_kafka_log.common.writer_options import (
    WriterOptions,
    parse_writer_options,
    stream_options,
    task_transactional_id,
)
from spark_kafka_log.exactly_once.task_transactions import (
    STREAM_MICRO_BATCH,
    end_transactions,
    transactions_of,
)
from spark_kafka_log.transactions import main as transactions_main
from spark_kafka_log.write.producer import TaskProducer
from spark_kafka_log.write.task_state import TaskIdentity
from spark_kafka_log.write.writer import write_task
from tests.connector.kafka_peer import consume_to_end
from tests.connector.test_writer_reruns import LAYOUT, _batches, _failing, _setup

pytestmark = pytest.mark.timeout(120)


def _committed(broker: str, topic: str) -> list[bytes]:
    return [m.value or b"" for m in consume_to_end(broker, topic, 3, "read_committed")]


def _txn_setup(broker: str, tmp_path: Path, **extra: str) -> tuple[WriterOptions, str, str]:
    return _setup(broker, tmp_path, **{"kafka.transactional.id": "pfx", **extra})


def test_tasks_flush_without_committing_and_the_driver_commits_them(broker: str, tmp_path: Path) -> None:
    options, topic, write_id = _txn_setup(broker, tmp_path)
    messages = []
    for task in range(2):
        rows = _batches(2, 300)[task : task + 1]
        tid = task_transactional_id("pfx", write_id, task)
        messages.append(write_task(options, LAYOUT, broker, TaskIdentity(write_id, task, 0), iter(rows), tid))
    assert [m.transactional_id for m in messages] == [
        task_transactional_id("pfx", write_id, 0),
        task_transactional_id("pfx", write_id, 1),
    ]
    assert _committed(broker, topic) == []  # flushed, acknowledged, not visible
    txns = transactions_of(messages, options.transaction_timeout_ms)
    end_transactions(broker, txns, commit=True, check_first=True)
    end_transactions(broker, txns, commit=True)  # finishing an interrupted commit again succeeds
    values = _committed(broker, topic)
    assert len(values) == 600 and len(set(values)) == 600


def test_a_retried_task_fences_and_aborts_its_first_attempt(broker: str, tmp_path: Path) -> None:
    options, topic, write_id = _txn_setup(broker, tmp_path)
    batches = _batches(4, 500)
    tid = task_transactional_id("pfx", write_id, 0)
    with pytest.raises(InjectedFailure):
        write_task(_failing(options, 3), LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(batches), tid)
    message = write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 1), iter(batches), tid)
    end_transactions(broker, transactions_of([message]), commit=True)
    values = _committed(broker, topic)
    assert len(values) == 2000 and len(set(values)) == 2000


def test_a_fenced_attempt_cannot_be_committed_and_nothing_is(broker: str, tmp_path: Path) -> None:
    """Speculation: the copy Spark counts as the winner was fenced by the other copy -> a loud failure."""
    options, topic, write_id = _txn_setup(broker, tmp_path)
    tid0 = task_transactional_id("pfx", write_id, 0)
    tid1 = task_transactional_id("pfx", write_id, 1)
    winner = write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(_batches(1, 100)), tid0)
    other = write_task(options, LAYOUT, broker, TaskIdentity(write_id, 1, 0), iter(_batches(1, 50)), tid1)
    write_task(
        options, LAYOUT, broker, TaskIdentity(write_id, 0, 1), iter(_batches(1, 100)), tid0
    )  # the copy
    txns = transactions_of([winner, other], options.transaction_timeout_ms)
    with pytest.raises(TransactionCommitError) as raised:
        end_transactions(broker, txns, commit=True, check_first=True)
    text = str(raised.value)
    assert "nothing was committed" in text and tid0 in text and "fenced" in text and "\n" not in text
    assert set(raised.value.failed) == {tid0}
    end_transactions(broker, txns[1:], commit=False)
    assert _committed(broker, topic) == []


def test_commit_after_the_transaction_timed_out_names_the_timeout(tmp_path: Path) -> None:
    with broker_process(
        tmp_path / "b",
        overrides={
            "num.partitions": "3",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
        },
    ) as broker:
        options, topic, write_id = _txn_setup(broker, tmp_path, **{"kafka.transaction.timeout.ms": "500"})
        tid = task_transactional_id("pfx", write_id, 0)
        message = write_task(
            options, LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(_batches(1, 10)), tid
        )
        time.sleep(1.5)
        with pytest.raises(TransactionCommitError) as raised:
            end_transactions(broker, transactions_of([message], 500), commit=True)
        text = str(raised.value)
        assert tid in text and "kafka.transaction.timeout.ms=500" in text and "broker aborted it" in text
        assert raised.value.failed[tid].code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
        assert "write's duration" in text
        # The streaming sink's commit words it for a micro-batch (its caller), not for a batch write.
        with pytest.raises(TransactionCommitError) as raised:
            end_transactions(broker, transactions_of([message], 500), commit=True, wording=STREAM_MICRO_BATCH)
        text = str(raised.value)
        assert "micro-batch's duration" in text and "write's duration" not in text, text
        assert _committed(broker, topic) == []


def test_a_transaction_timeout_above_the_broker_maximum_fails_the_task_naming_both(
    broker: str, tmp_path: Path
) -> None:
    options, _, write_id = _txn_setup(broker, tmp_path, **{"kafka.transaction.timeout.ms": "999999999"})
    tid = f"pfx-{uuid.uuid4().hex}"
    with pytest.raises(ProduceFailedError, match="transaction.max.timeout.ms"):
        write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(_batches(1, 10)), tid)


def test_the_streaming_sink_never_writes_outside_the_transactions_asked_for() -> None:
    """Never a silent non-transactional write when transactions were asked for: the streaming sink takes
    kafka.transactional.id as the prefix of its ids, and refuses it together with at-least-once."""
    options = parse_writer_options(
        {"kafka.bootstrap.servers": "x:1", "topic": "t", "kafka.transactional.id": "p"}
    )
    assert stream_options(options).transactional_id_prefix == "p"
    with pytest.raises(ConfigError, match="contradict each other"):
        stream_options(
            parse_writer_options(
                {
                    "kafka.bootstrap.servers": "x:1",
                    "topic": "t",
                    "kafka.transactional.id": "p",
                    "pylog.deliveryGuarantee": "at-least-once",
                }
            )
        )


@pytest.mark.parametrize(
    "extra, fragment",
    [
        ({"kafka.enable.idempotence": "false"}, "kafka.enable.idempotence=false"),
        ({"kafka.acks": "1"}, "kafka.acks=1"),
        ({"kafka.transactional.id": " "}, "is empty"),
    ],
)
def test_the_transactional_option_needs_idempotence(extra: dict[str, str], fragment: str) -> None:
    opts = {"kafka.bootstrap.servers": "x:1", "topic": "t", "kafka.transactional.id": "p", **extra}
    with pytest.raises(ConfigError, match=fragment):
        parse_writer_options(opts)


def test_resolve_names_a_missing_intent_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert transactions_main(["resolve", "--commit", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no such commit intent" in err and err.count("\n") == 1
    assert transactions_main(["list", str(tmp_path)]) == 0


def test_an_empty_task_ends_the_transaction_an_earlier_attempt_left_open(broker: str, tmp_path: Path) -> None:
    """An attempt wrote inside its transaction and died (no abort). The next attempt of its Spark partition has
    no rows, yet it re-initializes the transactional id: the open transaction is aborted at once, so rows
    committed after it are visible to read_committed readers without waiting for kafka.transaction.timeout.ms
    (60 s here; the reader gives up after 30 s)."""
    options, topic, write_id = _txn_setup(broker, tmp_path)
    tid0 = task_transactional_id("pfx", write_id, 0)
    crashed = TaskProducer(
        options, broker, LAYOUT, identity=TaskIdentity(write_id, 0, 0), transactional_id=tid0
    )
    for batch in _batches(2, 200):
        crashed.write(batch)
    crashed.flush()
    crashed.close()  # no abort: the attempt's process died with its transaction open
    empty = write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 1), iter([]), tid0)
    assert empty.transactional_id is None and empty.records == 0  # nothing for the driver to end
    tid1 = task_transactional_id("pfx", write_id, 1)
    other = write_task(options, LAYOUT, broker, TaskIdentity(write_id, 1, 0), iter(_batches(1, 300)), tid1)
    end_transactions(broker, transactions_of([empty, other]), commit=True, check_first=True)
    started = time.monotonic()
    values = _committed(broker, topic)
    assert len(values) == 300 and len(set(values)) == 300, f"{len(values)} of 300 rows visible"
    assert time.monotonic() - started < 20


def test_a_failed_task_aborts_with_an_epoch_bump_so_a_late_request_cannot_hang_a_transaction(
    broker: str, tmp_path: Path
) -> None:
    """KIP-890's hanging transaction: a request of the failed attempt that the broker appends only after the
    attempt's abort. The abort bumps the epoch, so the late batch is refused (an abort at the same epoch
    would let it open a transaction no coordinator knows of, holding the partition's LSO for good)."""
    options, topic, write_id = _txn_setup(broker, tmp_path)
    tid = task_transactional_id("pfx", write_id, 0)
    attempt = TaskProducer(
        options, broker, LAYOUT, identity=TaskIdentity(write_id, 0, 0), transactional_id=tid
    )
    try:
        for batch in _batches(2, 100, key="one"):
            attempt.write(batch)
        attempt.flush()
        (tp,) = [tp for tp, s in attempt.stats.items() if s.records]
        pid, epoch = attempt.producer_id, attempt.producer_epoch
        attempt.abort_transaction()
    finally:
        attempt.close()
    late = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=200, is_transactional=True)
    late.append(int(time.time() * 1000), b"one", b"late")
    with KafkaClient(broker) as client:
        leader = client.leader_for(*tp)
        answer = client.produce(leader, {tp: bytes(late.build())}, acks=-1, timeout_ms=10000)
    assert answer is not None and answer[tp].error in (
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.PRODUCER_FENCED,
    ), answer
    # Nothing hangs: rows committed later on that partition are visible to read_committed readers.
    tid1 = task_transactional_id("pfx", write_id, 1)
    later = write_task(
        options, LAYOUT, broker, TaskIdentity(write_id, 1, 0), iter(_batches(1, 50, key="one")), tid1
    )
    end_transactions(broker, transactions_of([later]), commit=True)
    assert len(_committed(broker, topic)) == 50


def test_an_attempt_fenced_after_its_last_acknowledgement_fails_instead_of_succeeding(
    broker: str, tmp_path: Path
) -> None:
    """A zombie of an old stage attempt whose copy in the new stage attempt already took the transactional id:
    everything it sent was acknowledged before the fence, but it must not succeed (Spark's commit coordinator
    would keep the first result to finish, a fenced transaction the driver could only fail on)."""
    options, topic, write_id = _txn_setup(broker, tmp_path)
    tid = task_transactional_id("pfx", write_id, 0)
    zombie = TaskProducer(
        options, broker, LAYOUT, identity=TaskIdentity(write_id, 0, 0), transactional_id=tid
    )
    try:
        zombie.write(_batches(1, 100)[0])
        zombie.flush()  # every batch acknowledged, still the owner
        copy = write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(_batches(1, 100)), tid)
        with pytest.raises(ProduceFailedError, match=rf"{tid}.*fenced after it wrote everything"):
            zombie.flush()
    finally:
        zombie.close()
    end_transactions(broker, transactions_of([copy]), commit=True, check_first=True)
    assert len(set(_committed(broker, topic))) == 100
