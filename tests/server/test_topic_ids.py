"""Topic IDs (KIP-516) on a single node, over real sockets: drawn at creation, answered by CreateTopics v7,
Metadata v10+ (and looked up by id from v12), DescribeTopicPartitions, DeleteTopics v6 and Fetch v13+; kept in
each partition directory's ``partition.metadata`` in Kafka's format; never given to a new topic of an old name
(the old id answers UNKNOWN_TOPIC_ID); assigned to directories written before topic ids; a directory naming
another id refused at load. The cluster side (the metadata's id against a hosted directory's: another
incarnation's directory moved aside as stray) is checked on a TopicManager over a real LogManager, and over real
broker processes in tests/replication/test_failover.py."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode, InconsistentTopicIdError
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.protocol.topic_id import ZERO_TOPIC_ID, format_topic_id, new_topic_id, parse_topic_id
from broker_runtime.server.topics import TopicManager
from broker_runtime.storage import log_manager
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager
from broker_runtime.storage.partition_log import PartitionLog
from broker_runtime.storage.partition_metadata import PARTITION_METADATA_FILE, read_topic_id, write_topic_id
from tests.server.rawclient import RawConnection, build_batch, create_topic_body, fetch_body, produce_body
from tests.support.brokers import start_broker

pytestmark = pytest.mark.timeout(60)

METADATA, FETCH, DELETE = ApiKey.METADATA, ApiKey.FETCH, ApiKey.DELETE_TOPICS
DESCRIBE_PARTITIONS = ApiKey.DESCRIBE_TOPIC_PARTITIONS


def _create(conn: RawConnection, name: str, partitions: int = 1) -> uuid.UUID:
    result = conn.call(ApiKey.CREATE_TOPICS, 7, create_topic_body(name, partitions))["Topics"][0]
    assert result["ErrorCode"] == ErrorCode.NONE, result
    topic_id: uuid.UUID = result["TopicId"]
    return topic_id


def _by_id(conn: RawConnection, *ids: uuid.UUID, name: str | None = None) -> list[dict[str, Any]]:
    body = {"Topics": [{"TopicId": i, "Name": name} for i in ids], "AllowAutoTopicCreation": True}
    topics: list[dict[str, Any]] = conn.call(METADATA, 12, body)["Topics"]
    return topics


def _fetch_by_id(conn: RawConnection, version: int, topic_id: uuid.UUID, offset: int = 0) -> dict[str, Any]:
    body = fetch_body("", 0, offset)
    body["Topics"][0]["TopicId"] = topic_id
    return conn.call(FETCH, version, body)


def _delete_by_id(conn: RawConnection, topic_id: uuid.UUID, name: str | None = None) -> dict[str, Any]:
    body = {"Topics": [{"Name": name, "TopicId": topic_id}], "TimeoutMs": 5000}
    result: dict[str, Any] = conn.call(DELETE, 6, body)["Responses"][0]
    return result


def test_an_id_is_answered_by_every_api_and_a_recreated_topic_never_aliases_the_old_one(
    tmp_path: Path,
) -> None:
    broker = start_broker(tmp_path)
    try:
        with RawConnection(str(broker.bootstrap)) as conn:
            first = _create(conn, "t", partitions=2)
            assert first != ZERO_TOPIC_ID
            by_name = conn.call(METADATA, 10, {"Topics": [{"TopicId": ZERO_TOPIC_ID, "Name": "t"}]})["Topics"]
            assert [(t["Name"], t["TopicId"]) for t in by_name] == [("t", first)]
            # an id with the empty name (Kafka's Java consumer subscribed to a pattern asks so) is asked by id
            by_id = _by_id(conn, first, name="")
            assert [(t["ErrorCode"], t["Name"], t["TopicId"]) for t in by_id] == [
                (ErrorCode.NONE, "t", first)
            ]
            described = conn.call(
                DESCRIBE_PARTITIONS,
                0,
                {"Topics": [{"Name": "t"}], "ResponsePartitionLimit": 10, "Cursor": None},
            )["Topics"]
            assert [(t["Name"], t["TopicId"]) for t in described] == [("t", first)]
            for partition in (0, 1):  # Kafka's file, in Kafka's text form of the id
                text = (tmp_path / "kafka-logs" / f"t-{partition}" / PARTITION_METADATA_FILE).read_text()
                assert text == f"version: 0\ntopic_id: {format_topic_id(first)}\n"
            [found] = _by_id(conn, first)
            assert (found["ErrorCode"], found["Name"], found["TopicId"], len(found["Partitions"])) == (
                0,
                "t",
                first,
                2,
            )

            conn.call(ApiKey.PRODUCE, 9, produce_body("t", 0, build_batch(3)))
            for version in (13, 15, 16, 18):
                resp = _fetch_by_id(conn, version, first)
                [topic] = resp["Responses"]
                part = topic["Partitions"][0]
                assert (topic["TopicId"], part["ErrorCode"], part["HighWatermark"]) == (first, 0, 3), version
                assert bytes(part["Records"]), version

            both = _delete_by_id(conn, first, "t")
            assert both["ErrorCode"] == ErrorCode.INVALID_REQUEST, "a name and an id in one entry"
            deleted = _delete_by_id(conn, first)
            assert (deleted["ErrorCode"], deleted["Name"], deleted["TopicId"]) == (0, "t", first)

            second = _create(conn, "t")
            assert second not in (first, ZERO_TOPIC_ID), "a topic created again gets a new id"
            [old] = _by_id(conn, first)
            assert (old["ErrorCode"], old["Name"], old["TopicId"]) == (
                ErrorCode.UNKNOWN_TOPIC_ID,
                None,
                first,
            )
            stale = _fetch_by_id(conn, 13, first)["Responses"][0]
            assert (stale["TopicId"], stale["Partitions"][0]["ErrorCode"]) == (
                first,
                ErrorCode.UNKNOWN_TOPIC_ID,
            )
            assert _delete_by_id(conn, first)["ErrorCode"] == ErrorCode.UNKNOWN_TOPIC_ID
            fresh = _fetch_by_id(conn, 13, second)["Responses"][0]["Partitions"][0]
            assert (fresh["ErrorCode"], fresh["HighWatermark"], bytes(fresh["Records"])) == (0, 0, b"")
        with KafkaClient(str(broker.bootstrap)) as client:  # the project's own client and admin facade
            assert client.metadata(["t"]).topics["t"].topic_id == second
            refused = client.admin.delete_topics_by_id([first])[first]
            assert refused is not None and refused.code == ErrorCode.UNKNOWN_TOPIC_ID
            assert client.admin.delete_topics_by_id([second]) == {second: None}
            assert "t" not in client.metadata().topics
    finally:
        broker.stop()


def test_the_id_survives_a_restart_and_directories_without_one_are_given_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker = start_broker(tmp_path)
    with RawConnection(str(broker.bootstrap)) as conn:
        created = _create(conn, "kept", partitions=2)
    broker.stop()
    logs = tmp_path / "kafka-logs"
    broker = start_broker(tmp_path)
    with RawConnection(str(broker.bootstrap)) as conn:
        assert [t["TopicId"] for t in _by_id(conn, created)] == [created]
    broker.stop()

    for partition in (0, 1):  # as a directory written before pylog had topic ids
        (logs / f"kept-{partition}" / PARTITION_METADATA_FILE).unlink()
    with caplog.at_level(logging.WARNING, logger="broker_runtime.server.topics"):
        broker = start_broker(tmp_path)
    try:
        assigned = {read_topic_id(logs / f"kept-{partition}") for partition in (0, 1)}
        assert len(assigned) == 1 and None not in assigned and created not in assigned
        assert any("had no topic id" in r.getMessage() and "kept" in r.getMessage() for r in caplog.records)
        with RawConnection(str(broker.bootstrap)) as conn:
            meta = conn.call(METADATA, 12, {"Topics": [{"TopicId": ZERO_TOPIC_ID, "Name": "kept"}]})
            assert {meta["Topics"][0]["TopicId"]} == assigned
    finally:
        broker.stop()


def test_partition_directories_naming_different_ids_are_refused_at_load(tmp_path: Path) -> None:
    broker = start_broker(tmp_path)
    with RawConnection(str(broker.bootstrap)) as conn:
        created = _create(conn, "split", partitions=2)
    broker.stop()
    other = new_topic_id()
    write_topic_id(tmp_path / "kafka-logs" / "split-1", other)
    with pytest.raises(InconsistentTopicIdError) as refused:
        start_broker(tmp_path)
    message = str(refused.value)
    assert "split" in message and format_topic_id(created) in message and format_topic_id(other) in message


def test_a_hosted_directory_of_another_incarnation_is_moved_aside_as_stray_in_a_cluster(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logs = LogManager([tmp_path / "logs"], LogConfig())
    logs.startup()
    stale_id, current_id = new_topic_id(), new_topic_id()
    stale = logs.create_log("c", 0, {}, topic_id=stale_id)  # left by the topic's deleted incarnation
    stale.append(bytearray(build_batch(3)))
    logs.create_log("legacy", 0, {})  # written before topic ids
    logs.shutdown()

    logs = LogManager([tmp_path / "logs"], LogConfig())
    logs.startup()
    topics = TopicManager(logs, LogConfig())
    legacy_id = new_topic_id()
    topics.use_cluster(lambda: {"c": (1, {}, current_id), "legacy": (1, {}, legacy_id)})
    topics.load()
    try:
        with caplog.at_level(logging.WARNING, logger="broker_runtime.server.topics"):
            fresh = topics.hosted_or_load("c", 0, {}, lambda: None, current_id)
        assert fresh is not None and fresh.topic_id == current_id
        assert fresh.log_end_offset == 0, "nothing of the old incarnation is served"
        assert topics.get_log("c", 0) is fresh and topics.stray_logs == 1 and topics.load_failures == 0
        assert read_topic_id(tmp_path / "logs" / "c-0") == current_id
        (aside,) = (tmp_path / "logs").glob("c-0.*-stray")
        assert read_topic_id(aside) == stale_id, "the stray data is kept aside, as Kafka keeps it"
        (line,) = [r.getMessage() for r in caplog.records if "stray" in r.getMessage()]
        assert format_topic_id(stale_id) in line and format_topic_id(current_id) in line
        legacy = topics.hosted_or_load("legacy", 0, {}, lambda: None, legacy_id)
        assert legacy is not None and legacy.topic_id == legacy_id
        assert read_topic_id(tmp_path / "logs" / "legacy-0") == legacy_id
        assert topics.topic_id("c") == current_id
    finally:
        logs.shutdown()
    caplog.clear()
    logs = LogManager([tmp_path / "logs"], LogConfig())
    with caplog.at_level(logging.WARNING, logger="broker_runtime.storage.log_manager"):
        logs.startup()
    try:
        assert set(logs.all_logs()) == {("c", 0), ("legacy", 0)}, "a stray directory is never loaded again"
        assert any(aside.name in r.getMessage() for r in caplog.records)
    finally:
        logs.shutdown()


def test_an_upgraded_clusters_directories_get_their_id_on_the_partition_load_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first start of a cluster upgraded from format 1: writing ``partition.metadata`` (with its fsyncs) to
    every hosted directory runs on the partition-load thread, never on the event loop; the partition is served
    once its directory has the id."""
    logs = LogManager([tmp_path / "logs"], LogConfig())
    logs.startup()
    logs.create_log("legacy", 0, {})  # written before topic ids
    logs.shutdown()
    writers: list[str] = []
    real_write = log_manager.write_topic_id

    def write(part_dir: Path, topic_id: uuid.UUID) -> None:
        writers.append(threading.current_thread().name)
        real_write(part_dir, topic_id)

    monkeypatch.setattr(log_manager, "write_topic_id", write)
    logs = LogManager([tmp_path / "logs"], LogConfig())
    logs.startup()
    topics = TopicManager(logs, LogConfig())
    legacy_id = new_topic_id()
    topics.use_cluster(lambda: {"legacy": (1, {}, legacy_id)})
    topics.load()
    loaded = threading.Event()

    async def first_pass() -> PartitionLog | None:
        assert topics.hosted_or_load("legacy", 0, {}, loaded.set, legacy_id) is None, (
            "not served before its id"
        )
        await asyncio.gather(*topics.pending("legacy"))
        return topics.hosted_or_load("legacy", 0, {}, loaded.set, legacy_id)

    try:
        served = asyncio.run(first_pass())
        assert served is not None and served.topic_id == legacy_id and loaded.is_set()
        assert read_topic_id(tmp_path / "logs" / "legacy-0") == legacy_id
        assert writers and all(name.startswith("pylog-partition-load") for name in writers), writers
    finally:
        topics.stop_loads()
        logs.shutdown()


def test_the_text_form_is_kafkas() -> None:
    # Kafka's Uuid.toString of the UUID with these bytes (URL-safe base64, no padding).
    topic_id = uuid.UUID(bytes=bytes(range(16)))
    assert format_topic_id(topic_id) == "AAECAwQFBgcICQoLDA0ODw"
    assert parse_topic_id("AAECAwQFBgcICQoLDA0ODw") == topic_id
    with pytest.raises(ValueError, match="22 characters"):
        parse_topic_id("AAECAwQFBgcICQoLDA0O")
