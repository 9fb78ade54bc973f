"""Apache Kafka's Java consumer uses pylog's incremental fetch sessions (KIP-227) and survives their eviction.

One broker in this process with ``max.incremental.fetch.session.cache.slots=1`` and a metrics registry; the
Java consumer (``ConsumerScenarios assigned``, the same compiled programs as test_kafka_java_on_pylog.py) reads a
4-partition topic. Once it has fetched incrementally, a follower-style fetch (privileged) evicts its session, and
the second half of the records is written: the consumer is answered FETCH_SESSION_ID_NOT_FOUND, falls back to
full fetches (sessionless: the one slot holds the young follower session) and reads every record exactly once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from tests.peers.test_kafka_java_on_pylog import java_programs, run_java
from tests.server.rawclient import RawConnection, build_batch, create_topic_body, produce_body
from tests.support.cluster import wait_for

__all__ = ["java_programs"]  # the compiled programs' fixture, shared with test_kafka_java_on_pylog.py

pytestmark = [pytest.mark.timeout(120)]

TOPIC, PARTITIONS, PER_BATCH = "sessions", 4, 5


@pytest.fixture(scope="module")
def one_slot_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(Path(tmp_path_factory.mktemp("fetchsess-java")) / "logs"),
        "max.incremental.fetch.session.cache.slots": "1",
        "pylog.metrics.listener": "127.0.0.1:0",
    }
    broker = Broker(BrokerConfig.from_properties(props)).start()
    try:
        yield broker
    finally:
        broker.stop()


def _write_round(conn: RawConnection) -> None:
    for p in range(PARTITIONS):
        answer = conn.call(ApiKey.PRODUCE, 9, produce_body(TOPIC, p, build_batch(PER_BATCH)))
        assert answer["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == ErrorCode.NONE, answer


def _follower_fetch(conn: RawConnection) -> dict[str, Any]:
    """A full fetch as replica 1 (privileged: it may evict a young consumer session)."""
    body = {
        "ReplicaId": 1,
        "MaxWaitMs": 0,
        "MinBytes": 1,
        "MaxBytes": 1 << 20,
        "IsolationLevel": 0,
        "SessionId": 0,
        "SessionEpoch": 0,
        "Topics": [
            {
                "Topic": TOPIC,
                "Partitions": [
                    {
                        "Partition": 0,
                        "CurrentLeaderEpoch": -1,
                        "FetchOffset": 0,
                        "LogStartOffset": -1,
                        "PartitionMaxBytes": 1 << 20,
                    }
                ],
            }
        ],
        "ForgottenTopicsData": [],
        "RackId": "",
    }
    return conn.call(ApiKey.FETCH, 12, body)


@pytest.mark.compat("kafka-java", "consumer: incremental fetch sessions (KIP-227), an evicted session")
def test_java_consumer_uses_sessions_and_survives_eviction(one_slot_broker: Any, java_programs: Path) -> None:
    ctx = one_slot_broker.ctx
    cache = ctx.fetch_sessions
    errors: list[BaseException] = []
    with RawConnection(one_slot_broker.bootstrap) as conn:
        created = conn.call(ApiKey.CREATE_TOPICS, 7, create_topic_body(TOPIC, PARTITIONS))["Topics"][0]
        assert created["ErrorCode"] == ErrorCode.NONE, created
        _write_round(conn)

        def evict_then_write() -> None:
            try:
                wait_for(lambda: cache.incremental_fetches >= 3, 30, "the consumer's incremental fetches")
                evictions = cache.evictions
                assert _follower_fetch(conn)["SessionId"] != 0
                assert cache.evictions == evictions + 1
                _write_round(conn)
            except BaseException as exc:  # reported by the test's thread
                errors.append(exc)

        helper = threading.Thread(target=evict_then_write, daemon=True)
        helper.start()
        lines = run_java(
            java_programs,
            "ConsumerScenarios",
            one_slot_broker.bootstrap,
            "assigned",
            TOPIC,
            str(2 * PARTITIONS * PER_BATCH),
        )
        helper.join(30)
    assert not errors, errors
    records = [tuple(r) for r in lines[0]["records"]]
    expected = {(p, o) for p in range(PARTITIONS) for o in range(2 * PER_BATCH)}
    assert sorted(records) == sorted(expected), "every record once"
    snap = ctx.metrics.take_snapshot() if ctx.metrics is not None else None
    assert snap is not None
    assert snap.errors.get(("FetchConsumer", ErrorCode.FETCH_SESSION_ID_NOT_FOUND), 0) >= 1
    assert snap.fetch_session_evictions == 1 and snap.fetch_session_incremental_fetches >= 3
    assert snap.fetch_sessions == 1  # the follower's: the consumer's later full fetches got no session
