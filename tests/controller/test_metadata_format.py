"""The cluster metadata on disk: a cluster directory made by the earlier, untyped code still opens and is written
back in the same shape; keys of a newer format survive; a newer format version is refused by name. And the
controller's rule: nothing outside :mod:`broker_runtime.controller` changes the metadata."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

import broker_runtime
from broker_runtime.controller import (
    BrokerInfo,
    ControllerChannel,
    ControllerRecord,
    PartitionInfo,
    SingleHostMetadataStore,
    TopicRules,
)
from broker_runtime.errors import ConfigError
from broker_runtime.protocol.topic_id import format_topic_id, parse_topic_id
from broker_runtime.replication import assign_replicas

#: A document as the untyped code (before the typed metadata) wrote it, every field present.
WRITTEN_BEFORE: dict[str, Any] = {
    "version": 1,
    "cluster_id": "c1",
    "controller": {"id": 1, "epoch": 4},
    "controller_id": 1,
    "brokers": {
        "0": {"host": "127.0.0.1", "port": 40001, "broker_epoch": 2, "fenced": False},
        "1": {
            "host": "127.0.0.1",
            "port": 40003,
            "broker_epoch": 5,
            "fenced": True,
            "endpoints": {"INTERNAL": ["127.0.0.1", 40004], "PLAIN": ["127.0.0.1", 40003]},
        },
    },
    "topics": {
        "events": {
            "configs": {"cleanup.policy": "compact"},
            "partitions": [
                {"replicas": [0, 1], "leader": 0, "leader_epoch": 3, "isr": [0], "partition_epoch": 8},
                {"replicas": [1, 0], "leader": -1, "leader_epoch": 1, "isr": [1], "partition_epoch": 2},
            ],
        }
    },
    "next_producer_id": 2000,
    "broker_configs": {"": {"log.retention.ms": "1000"}, "1": {"log.cleaner.threads": "2"}},
    "acls": [["TOPIC", "events", "LITERAL", "User:alice", "*", "WRITE", "ALLOW"]],
    "deleted_topics": ["old"],
}

RULES = TopicRules(lambda name: None, lambda name, partitions, configs: None, assign_replicas)


def _write(directory: Path, doc: dict[str, Any]) -> Path:
    path = directory / "cluster.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True))
    return path


def test_a_document_of_the_untyped_code_reads_typed_and_writes_back_the_same(tmp_path: Path) -> None:
    path = _write(tmp_path, WRITTEN_BEFORE)
    meta = SingleHostMetadataStore(tmp_path).read()
    assert (
        meta.cluster_id == "c1" and meta.controller == ControllerRecord(1, 4) and meta.controller_holder == 1
    )
    assert meta.brokers[1] == BrokerInfo(
        1,
        "127.0.0.1",
        40003,
        fenced=True,
        endpoints=(("INTERNAL", ("127.0.0.1", 40004)), ("PLAIN", ("127.0.0.1", 40003))),
        broker_epoch=5,
    )
    assert meta.topics["events"].partitions[1] == PartitionInfo((1, 0), -1, 1, (1,), 2)
    assert meta.topics["events"].configs == {"cleanup.policy": "compact"}
    assert (meta.next_producer_id, meta.deleted_topics, meta.unfenced()) == (2000, ["old"], [0])
    assert meta.broker_configs[""] == {"log.retention.ms": "1000"}
    assert meta.topics["events"].topic_id is None, "a version-1 document has no topic ids"
    assert meta.to_json() == dict(WRITTEN_BEFORE, version=2), "written back in the same shape, as version 2"
    with SingleHostMetadataStore(tmp_path).update():
        pass
    upgraded = json.loads(path.read_text())
    given = upgraded["topics"]["events"].pop("topic_id")
    assert upgraded == dict(WRITTEN_BEFORE, version=2), "the first update adds the topic ids and nothing else"
    assert SingleHostMetadataStore(tmp_path).read().topics["events"].topic_id == parse_topic_id(given)
    inode = os.stat(path).st_ino
    with SingleHostMetadataStore(tmp_path).update():
        pass
    assert os.stat(path).st_ino == inode, "an update that changes nothing does not rewrite the file"
    assert json.loads(path.read_text())["topics"]["events"]["topic_id"] == given, "an id is never redrawn"


def test_a_topic_id_is_drawn_at_creation_and_never_reused_by_a_new_topic_of_the_same_name(
    tmp_path: Path,
) -> None:
    store = SingleHostMetadataStore(tmp_path)
    channel = ControllerChannel(store, store.session(0), "c1", RULES)
    channel.register("127.0.0.1", 1)
    channel.create_topic("t", 2, 1, {}, None)
    first = store.read().topics["t"].topic_id
    channel.delete_topic("t")
    channel.create_topic("t", 2, 1, {}, None)
    second = store.read().topics["t"].topic_id
    channel.close()
    assert first is not None and second is not None and first != second
    assert json.loads((tmp_path / "cluster.json").read_text())["topics"]["t"]["topic_id"] == format_topic_id(
        second
    )


def test_the_earliest_shape_reads_with_defaults_and_a_change_keeps_a_newer_formats_keys(
    tmp_path: Path,
) -> None:
    earliest = {
        "controller_id": 0,
        "brokers": {"0": {"host": "h", "port": 1}},
        "topics": {"t": {"partitions": [{"replicas": [0], "leader": 0, "leader_epoch": 0, "isr": [0]}]}},
        "future_key": {"kept": True},
    }
    _write(tmp_path, earliest)
    store = SingleHostMetadataStore(tmp_path)
    meta = store.read()
    assert meta.controller is None and meta.controller_holder == 0
    assert meta.brokers[0] == BrokerInfo(0, "h", 1) and meta.topics["t"].partitions[0].partition_epoch == 0
    channel = ControllerChannel(store, store.session(0), "c1", RULES)
    channel.set_broker_configs("", {"log.retention.ms": "5"})
    doc = json.loads((tmp_path / "cluster.json").read_text())
    assert doc["future_key"] == {"kept": True} and doc["cluster_id"] == "c1" and doc["version"] == 2
    assert doc["topics"]["t"]["partitions"][0]["partition_epoch"] == 0
    assert parse_topic_id(doc["topics"]["t"]["topic_id"]) == store.read().topics["t"].topic_id
    channel.close()
    assert store.read().broker_configs == {"": {"log.retention.ms": "5"}}


def test_a_newer_format_version_is_refused_by_name(tmp_path: Path) -> None:
    _write(tmp_path, dict(WRITTEN_BEFORE, version=3))
    with pytest.raises(ConfigError, match=r"cluster.json: cluster metadata format version 3; .* up to 2"):
        SingleHostMetadataStore(tmp_path).read()


def test_only_the_controller_package_updates_the_metadata_store() -> None:
    """KRaft's rule, structurally: brokers ask (ControllerChannel), the controller's operations write."""
    root = Path(broker_runtime.__file__).parent
    writers = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.parent.name != "controller"
        and re.search(r"store\.update\(|\.update\(\) as meta", path.read_text())
    ]
    assert writers == []
