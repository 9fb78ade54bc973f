"""A transaction coordinator whose ``__transaction_state`` writes fail (the ISR under its minimum in a cluster, a
disk error) answers COORDINATOR_NOT_AVAILABLE and its clients retry every few hundred milliseconds (librdkafka's
AddPartitionsToTxn: every 500 ms). Kafka logs such a failed append at DEBUG only; pylog logged an ERROR line per
retry (issue 36). Now: one WARNING per transactional id and failing write, its repeats at DEBUG, one INFO line once
a write of the id succeeds again, and every failure counted in ``pylog_transaction_state_write_failures_total``.

The failure is injected into the coordinator's one append path (a single node in this process), as the replicated
append raises it: ``KafkaError(NOT_ENOUGH_REPLICAS)``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection, create_topic_body
from tests.server.test_metrics import scrape
from tests.support.brokers import start_broker

TXN_ID = "flood"
LOGGER = "broker_runtime.coordinator.transaction.coordinator"
METRIC = ("pylog_transaction_state_write_failures_total", (("error", "NOT_ENOUGH_REPLICAS"),))


def _add_partitions(conn: RawConnection, pid: int, epoch: int) -> int:
    body = {
        "V3AndBelowTransactionalId": TXN_ID,
        "V3AndBelowProducerId": pid,
        "V3AndBelowProducerEpoch": epoch,
        "V3AndBelowTopics": [{"Name": "flood", "Partitions": [0]}],
    }
    answer = conn.call(ApiKey.ADD_PARTITIONS_TO_TXN, 1, body)
    code: int = answer["ResultsByTopicV3AndBelow"][0]["ResultsByPartition"][0]["PartitionErrorCode"]
    return code


def _end_txn(conn: RawConnection, pid: int, epoch: int) -> int:
    body = {"TransactionalId": TXN_ID, "ProducerId": pid, "ProducerEpoch": epoch, "Committed": True}
    code: int = conn.call(ApiKey.END_TXN, 1, body)["ErrorCode"]
    return code


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER
        and r.levelno >= logging.WARNING
        and "not written to the transaction log" in r.getMessage()
    ]


def test_failing_state_writes_are_logged_once_per_failing_write_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    broker = start_broker(tmp_path, {"pylog.metrics.listener": "127.0.0.1:0"})
    try:
        with RawConnection(broker.bootstrap) as conn:
            created = conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body("flood", 1))
            assert created["Topics"][0]["ErrorCode"] == ErrorCode.NONE
            init = conn.call(
                ApiKey.INIT_PRODUCER_ID, 1, {"TransactionalId": TXN_ID, "TransactionTimeoutMs": 60000}
            )
            assert init["ErrorCode"] == ErrorCode.NONE, init
            pid, epoch = init["ProducerId"], init["ProducerEpoch"]
            coordinator = broker.ctx.txn_coordinator
            append = coordinator._append

            def refused(*args: Any) -> None:
                raise KafkaError(
                    ErrorCode.NOT_ENOUGH_REPLICAS, "__transaction_state-0: ISR [1] below 2 (injected)"
                )

            monkeypatch.setattr(coordinator, "_append", refused)
            for _ in range(6):  # a client retrying while the ISR is short
                assert _add_partitions(conn, pid, epoch) == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert len(_warnings(caplog)) == 1, _warnings(caplog)
            assert scrape(broker).get(METRIC) == 6.0

            monkeypatch.setattr(coordinator, "_append", append)
            assert _add_partitions(conn, pid, epoch) == ErrorCode.NONE
            recovered = [
                r.getMessage()
                for r in caplog.records
                if "transaction log writes succeed again" in r.getMessage()
            ]
            assert len(recovered) == 1, recovered

            monkeypatch.setattr(coordinator, "_append", refused)
            for _ in range(3):  # another write fails: its own line, once
                assert _end_txn(conn, pid, epoch) == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert len(_warnings(caplog)) == 2, _warnings(caplog)
            assert "PrepareCommit" in _warnings(caplog)[1]
            assert scrape(broker).get(METRIC) == 9.0
            monkeypatch.setattr(coordinator, "_append", append)
            assert _end_txn(conn, pid, epoch) == ErrorCode.NONE
    finally:
        broker.stop()
