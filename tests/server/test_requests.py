"""Fetch, ListOffsets, Metadata, CreateTopics, InitProducerId, DescribeConfigs, ApiVersions over real sockets."""

from __future__ import annotations

import time
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import (
    CONSUMER_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    ApiKey,
    IsolationLevel,
)
from broker_runtime.server.handlers import supported_versions
from tests.server.rawclient import RawConnection, build_batch, create_topic_body, fetch_body, produce_body

pytestmark = pytest.mark.timeout(60)

PRODUCE, FETCH, LIST_OFFSETS, METADATA = ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA
API_VERSIONS, CREATE, INIT_PID = ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS, ApiKey.INIT_PRODUCER_ID
DESCRIBE = ApiKey.DESCRIBE_CONFIGS


def _create(
    conn: RawConnection, name: str, partitions: int = 1, replication: int = 1, **configs: str
) -> dict[str, Any]:
    body = create_topic_body(
        name, partitions, replication, {k.replace("_", "."): v for k, v in configs.items()}
    )
    result: dict[str, Any] = conn.call(CREATE, 7, body)["Topics"][0]
    return result


def _partition(resp: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = resp["Responses"][0]["Partitions"][0]
    return result


def test_api_versions_advertises_exactly_the_served_ranges(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        resp = conn.call(API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})
    got = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in resp["ApiKeys"]}
    assert got == supported_versions()
    assert got[0] == (0, 12) and got[1] == (4, 18) and got[3] == (0, 13) and got[18] == (0, 4)


def test_fetch_reads_batches_and_reports_offsets(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _create(conn, "f")
        for _ in range(3):
            conn.call(PRODUCE, 9, produce_body("f", 0, build_batch(4)))
        part = _partition(conn.call(FETCH, 12, fetch_body("f", 0, 4)))
        assert (
            part["ErrorCode"],
            part["HighWatermark"],
            part["LastStableOffset"],
            part["LogStartOffset"],
        ) == (0, 12, 12, 0)
        records = bytes(part["Records"])
        assert int.from_bytes(records[:8], "big") == 4  # starts at the batch holding offset 4
        assert len(records) > 0
        tail = _partition(conn.call(FETCH, 12, fetch_body("f", 0, 12)))
        assert (tail["ErrorCode"], bytes(tail["Records"])) == (0, b"")
        out = _partition(conn.call(FETCH, 12, fetch_body("f", 0, 13)))
        assert out["ErrorCode"] == ErrorCode.OFFSET_OUT_OF_RANGE
        missing = conn.call(FETCH, 12, fetch_body("nope", 0, 0))
        assert _partition(missing)["ErrorCode"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_respects_max_bytes_but_returns_one_batch(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _create(conn, "m")
        for _ in range(4):
            conn.call(PRODUCE, 9, produce_body("m", 0, build_batch(5, value_size=200)))
        part = _partition(conn.call(FETCH, 12, fetch_body("m", 0, 0, max_bytes=10)))
        one = bytes(part["Records"])
        batch_len = int.from_bytes(one[8:12], "big") + 12
        assert len(one) == batch_len  # exactly the first batch, though it exceeds max_bytes
        part = _partition(conn.call(FETCH, 12, fetch_body("m", 0, 0, max_bytes=2 * batch_len)))
        assert len(bytes(part["Records"])) == 2 * batch_len


def test_delayed_fetch_waits_max_wait_then_answers_empty(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _create(conn, "d")
        t0 = time.monotonic()
        part = _partition(conn.call(FETCH, 12, fetch_body("d", 0, 0, max_wait_ms=400, min_bytes=1)))
        waited = time.monotonic() - t0
    assert part["ErrorCode"] == 0 and bytes(part["Records"]) == b""
    assert 0.35 <= waited < 3


def test_delayed_fetch_completes_when_data_arrives(bootstrap: str) -> None:
    with RawConnection(bootstrap) as consumer, RawConnection(bootstrap) as producer:
        _create(producer, "w")
        consumer.send_raw(consumer.encode(FETCH, 12, fetch_body("w", 0, 0, max_wait_ms=10_000, min_bytes=1)))
        time.sleep(0.2)
        t0 = time.monotonic()
        producer.call(PRODUCE, 9, produce_body("w", 0, build_batch(2)))
        _, resp = consumer.read_response(FETCH, 12)
        assert time.monotonic() - t0 < 2
    part = _partition(resp)
    assert part["HighWatermark"] == 2 and len(bytes(part["Records"])) > 0


def test_pipelined_requests_behind_a_delayed_one_are_answered_in_order(bootstrap: str) -> None:
    """A parked request does not block processing of the next ones, but responses keep request order."""
    with RawConnection(bootstrap) as conn:
        _create(conn, "order")
        fetch = conn.encode(FETCH, 12, fetch_body("order", 0, 0, max_wait_ms=5_000, min_bytes=1))
        produce = conn.encode(PRODUCE, 9, produce_body("order", 0, build_batch(2), acks=1))
        t0 = time.monotonic()
        conn.send_raw(fetch + produce)
        # The produce (sent second) is processed while the fetch waits and completes it with its data; the
        # fetch answer still comes first.
        fetch_id, fetched = conn.read_response(FETCH, 12)
        produce_id, produced = conn.read_response(PRODUCE, 9)
        assert time.monotonic() - t0 < 3
    assert (fetch_id, produce_id) == (conn.correlation_id - 1, conn.correlation_id)
    assert _partition(fetched)["HighWatermark"] == 2 and len(bytes(_partition(fetched)["Records"])) > 0
    assert produced["Responses"][0]["PartitionResponses"][0]["BaseOffset"] == 0


def test_list_offsets(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _create(conn, "l")
        base = 1_700_000_000_000
        for i in range(3):
            conn.call(PRODUCE, 9, produce_body("l", 0, build_batch(2, timestamp_ms=base + i * 1000)))

        def lookup(ts: int, version: int = 8) -> tuple[int, int]:
            body = {
                "ReplicaId": CONSUMER_REPLICA_ID,
                "IsolationLevel": IsolationLevel.READ_UNCOMMITTED,
                "Topics": [
                    {
                        "Name": "l",
                        "Partitions": [{"PartitionIndex": 0, "CurrentLeaderEpoch": -1, "Timestamp": ts}],
                    }
                ],
            }
            p = conn.call(LIST_OFFSETS, version, body)["Topics"][0]["Partitions"][0]
            assert p["ErrorCode"] == 0
            return p["Offset"], p["Timestamp"]

        assert lookup(LATEST_TIMESTAMP) == (6, -1)
        assert lookup(EARLIEST_TIMESTAMP) == (0, -1)
        assert lookup(MAX_TIMESTAMP) == (4, base + 2000)
        assert lookup(base + 500)[0] == 2
        assert lookup(base + 10_000) == (-1, -1)
        body0 = {
            "ReplicaId": CONSUMER_REPLICA_ID,
            "Topics": [
                {
                    "Name": "l",
                    "Partitions": [{"PartitionIndex": 0, "Timestamp": LATEST_TIMESTAMP, "MaxNumOffsets": 1}],
                }
            ],
        }
        assert conn.call(LIST_OFFSETS, 0, body0)["Topics"][0]["Partitions"][0]["OldStyleOffsets"] == [6]


def test_metadata_describes_this_node_and_auto_creates(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        resp = conn.call(
            METADATA, 12, {"Topics": [{"TopicId": None, "Name": "auto"}], "AllowAutoTopicCreation": True}
        )
        assert resp["Brokers"] == [{"NodeId": 0, "Host": "127.0.0.1", "Port": broker.port, "Rack": None}]
        topic = resp["Topics"][0]
        assert topic["ErrorCode"] == 0 and len(topic["Partitions"]) == 1
        p = topic["Partitions"][0]
        assert (p["LeaderId"], p["LeaderEpoch"], p["ReplicaNodes"], p["IsrNodes"]) == (0, 0, [0], [0])
        no_auto = conn.call(
            METADATA, 12, {"Topics": [{"TopicId": None, "Name": "other"}], "AllowAutoTopicCreation": False}
        )
        assert no_auto["Topics"][0]["ErrorCode"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        bad = conn.call(
            METADATA, 12, {"Topics": [{"TopicId": None, "Name": "bad/name"}], "AllowAutoTopicCreation": True}
        )
        assert bad["Topics"][0]["ErrorCode"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        everything = conn.call(METADATA, 1, {"Topics": None})
        assert [t["Name"] for t in everything["Topics"]] == ["auto"]


def test_an_all_topics_metadata_reads_the_cluster_view_a_fixed_number_of_times(
    broker: Any, bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A single node's cluster view is built from its topics on each read: the Metadata answer reads it once, not
    once per topic (which made a 1,000-topic answer take 6.5 s, the web console's topic list; see
    ``bash jobs/dev.sh bench console``)."""
    with RawConnection(bootstrap) as conn:
        body = create_topic_body("m-00")
        body["Topics"] = [{**body["Topics"][0], "Name": f"m-{i:02d}"} for i in range(20)]
        assert all(t["ErrorCode"] == 0 for t in conn.call(CREATE, 7, body)["Topics"])
        cluster_type = type(broker.ctx.cluster)
        built = cluster_type.view.fget
        reads: list[int] = []

        def counted(self: Any) -> Any:
            reads.append(1)
            return built(self)

        monkeypatch.setattr(cluster_type, "view", property(counted))
        everything = conn.call(METADATA, 12, {"Topics": None, "AllowAutoTopicCreation": False})
        assert len(everything["Topics"]) == 20
        assert len(reads) <= 3, f"{len(reads)} reads of the cluster view for one Metadata of 20 topics"
        named = conn.call(
            METADATA,
            12,
            {
                "Topics": [{"TopicId": None, "Name": f"m-{i:02d}"} for i in range(20)],
                "AllowAutoTopicCreation": False,
            },
        )
        assert all(t["ErrorCode"] == 0 for t in named["Topics"])
        assert len(reads) <= 6, f"{len(reads)} reads of the cluster view for two Metadata of 20 topics"


@pytest.mark.parametrize("broker_overrides", [{"auto.create.topics.enable": "false"}])
def test_metadata_without_auto_create(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        resp = conn.call(METADATA, 4, {"Topics": [{"Name": "x"}], "AllowAutoTopicCreation": True})
    assert resp["Topics"][0]["ErrorCode"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_create_topics_errors(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        assert _create(conn, "c", 3)["ErrorCode"] == 0
        assert _create(conn, "c", 3)["ErrorCode"] == ErrorCode.TOPIC_ALREADY_EXISTS
        assert _create(conn, "r", 1, 3)["ErrorCode"] == ErrorCode.INVALID_REPLICATION_FACTOR
        assert _create(conn, "p", 0)["ErrorCode"] == ErrorCode.INVALID_PARTITIONS
        assert _create(conn, "bad name")["ErrorCode"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert _create(conn, "cfg", retention_ms="soon")["ErrorCode"] == ErrorCode.INVALID_CONFIG
        assert _create(conn, "dflt", -1, -1)["NumPartitions"] == 1
        body = create_topic_body("v", 2)
        body["validateOnly"] = True
        assert conn.call(CREATE, 7, body)["Topics"][0]["ErrorCode"] == 0
        assert _create(conn, "v", 2)["ErrorCode"] == 0  # validate-only created nothing


def test_init_producer_id_and_describe_configs(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        first = conn.call(
            INIT_PID,
            4,
            {"TransactionalId": None, "TransactionTimeoutMs": 60000, "ProducerId": -1, "ProducerEpoch": -1},
        )
        second = conn.call(
            INIT_PID,
            4,
            {"TransactionalId": None, "TransactionTimeoutMs": 60000, "ProducerId": -1, "ProducerEpoch": -1},
        )
        assert first["ErrorCode"] == 0 and second["ProducerId"] > first["ProducerId"] >= 0
        txn = conn.call(
            INIT_PID,
            4,
            {"TransactionalId": "tx", "TransactionTimeoutMs": 60000, "ProducerId": -1, "ProducerEpoch": -1},
        )
        assert txn["ErrorCode"] == ErrorCode.NONE and txn["ProducerEpoch"] == 0
        again = conn.call(
            INIT_PID,
            4,
            {"TransactionalId": "tx", "TransactionTimeoutMs": 60000, "ProducerId": -1, "ProducerEpoch": -1},
        )
        assert (again["ProducerId"], again["ProducerEpoch"]) == (txn["ProducerId"], 1), "the epoch is bumped"
        too_long = conn.call(
            INIT_PID,
            4,
            {"TransactionalId": "tx", "TransactionTimeoutMs": 900_001, "ProducerId": -1, "ProducerEpoch": -1},
        )
        assert too_long["ErrorCode"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        _create(conn, "dc", retention_ms="12345")
        resp = conn.call(
            DESCRIBE,
            4,
            {
                "Resources": [{"ResourceType": 2, "ResourceName": "dc", "ConfigurationKeys": None}],
                "IncludeSynonyms": False,
                "IncludeDocumentation": False,
            },
        )
        configs = {c["Name"]: (c["Value"], c["ConfigSource"]) for c in resp["Results"][0]["Configs"]}
        assert configs["retention.ms"] == ("12345", 1)
        assert configs["segment.bytes"][1] == 5
        assert configs["min.cleanable.dirty.ratio"] == ("0.5", 5)
        assert configs["delete.retention.ms"] == ("86400000", 5)
