"""The cluster metadata, typed: brokers, topics and their partitions, the controller role, dynamic configs, ACL
rows, the producer-id counter (Kafka's metadata records, without the log: ``RegisterBrokerRecord``,
``TopicRecord``, ``PartitionRecord``, ``ConfigRecord``, ``AccessControlEntryRecord``, ``ProducerIdsRecord``,
``ClientQuotaRecord``).

The records are frozen dataclasses; :class:`ClusterMetadata`, the whole document, is mutable and only ever changed
by the controller's operations (:mod:`.cluster_control`, :mod:`.replication_control`) inside one update of the
store (:mod:`.store`); readers get a fresh :class:`ClusterMetadata` per read and never change it.

On disk (format ``version`` 2, one JSON document; :meth:`ClusterMetadata.from_json` reads it, with every field
optional as the earliest files had them, and :meth:`ClusterMetadata.to_json` writes it back in the same shape)::

    {"version": 1, "cluster_id": "...",
     "controller": {"id": 0, "epoch": 2}, "controller_id": 0,
     "brokers": {"0": {"host": "127.0.0.1", "port": 40001, "broker_epoch": 3, "fenced": false,
                       "endpoints": {"INTERNAL": ["127.0.0.1", 40002]}}, ...},
     "topics": {"events": {"topic_id": "tIjFfDlXRtuWtHbbhiUEfA", "configs": {...},
                           "partitions": [{"replicas": [0, 1, 2], "leader": 0, "leader_epoch": 4,
                                           "isr": [0, 1, 2], "partition_epoch": 9}, ...]}},
     "next_producer_id": 2000,
     "broker_configs": {"": {"log.retention.ms": "..."}, "1": {...}},
     "acls": [["TOPIC", "events", "LITERAL", "User:alice", "*", "WRITE", "ALLOW"], ...],
     "client_quotas": [{"entity": [["user", "alice"]], "quotas": {"producer_byte_rate": 1048576.0}}, ...],
     "deleted_topics": ["old-topic"]}

Versions: 2 added each topic's ``topic_id`` (KIP-516, Kafka's text form, :mod:`broker_runtime.protocol.topic_id`).
A version-1 document still opens: its topics have no id (``TopicInfo.topic_id`` None) until the controller's
first update gives each a new one (:func:`~.cluster_control.assign_missing_topic_ids`, logged at WARNING) and
writes version 2; a pylog that reads only version 1 refuses the upgraded file instead of writing it back without
the ids (which would give the topics new ids and make every partition directory's ``partition.metadata``
disagree).

Top-level keys this version does not know are kept as they are (``extra``), so a file written by a newer broker
loses nothing when an older one writes it. A document of a later format version is refused (:class:`ConfigError`
naming the file's version), never half-read. The ACL rows and the client quota rows stay rows here (the
controller does not interpret them; :class:`~broker_runtime.security.acl.AclBinding` and
:mod:`broker_runtime.server.client_quotas` parse them on the broker side).

No I/O, no clock; safe anywhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker_runtime.errors import ConfigError
from broker_runtime.protocol.topic_id import format_topic_id, parse_topic_id

__all__ = [
    "FORMAT_VERSION",
    "NO_CONTROLLER",
    "NO_LEADER",
    "BrokerInfo",
    "ClusterMetadata",
    "ControllerRecord",
    "PartitionInfo",
    "TopicInfo",
]

#: The format this code writes, and the newest it reads (see the module docstring for what each added).
FORMAT_VERSION = 2
#: ``ControllerId`` when no broker holds the controller role (Kafka's MetadataResponse answers -1 then too).
NO_CONTROLLER = -1
#: The leader of a partition no eligible replica can lead (Kafka's ``LeaderConstants.NO_LEADER``).
NO_LEADER = -1

_KNOWN_KEYS = frozenset(
    {
        "version",
        "cluster_id",
        "controller",
        "controller_id",
        "brokers",
        "topics",
        "next_producer_id",
        "broker_configs",
        "acls",
        "client_quotas",
        "deleted_topics",
    }
)


@dataclass(frozen=True)
class BrokerInfo:
    """A broker's registration (Kafka's ``BrokerRegistration``)."""

    node_id: int
    host: str
    port: int
    #: Fenced by the controller (dead or session expired): not a leader, not in any ISR, not in Metadata.
    fenced: bool = False
    #: Every advertised listener: ``(name, (host, port))`` pairs; ``host``/``port`` are the inter-broker one's.
    endpoints: tuple[tuple[str, tuple[str, int]], ...] = ()
    #: Incremented by every registration: tells a restarted broker's session from its previous incarnation's.
    broker_epoch: int = 0


@dataclass(frozen=True)
class PartitionInfo:
    """A partition's replicas, leader and ISR (Kafka's ``PartitionRegistration``)."""

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    #: Incremented by every change of leader or ISR (what AlterPartition is checked against).
    partition_epoch: int = 0


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str] = field(default_factory=dict)
    #: Drawn when the topic is created, never reused (KIP-516); None only for a topic of a version-1 document
    #: not yet given one (see the module docstring).
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True)
class ControllerRecord:
    """Who holds the controller role, and in which controller epoch (a replaced controller's epoch is older)."""

    id: int
    epoch: int


@dataclass
class ClusterMetadata:
    """The whole document; see the module docstring."""

    cluster_id: str | None = None
    controller: ControllerRecord | None = None
    #: The ``controller_id`` key (the holder, written beside ``controller`` for readers of the first format).
    controller_id: int | None = None
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    #: The next producer id no broker has had (AllocateProducerIds); 0 until the first block is taken.
    next_producer_id: int = 0
    #: Dynamic broker configs: ``""`` -> cluster-wide defaults, ``"<node id>"`` -> one broker's.
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    #: ACL bindings as JSON rows (:meth:`~broker_runtime.security.acl.AclBinding.to_json`), in creation order.
    acls: list[list[Any]] = field(default_factory=list)
    #: Client quotas as JSON rows (``{"entity": [[type, name-or-null], ...], "quotas": {key: value}}``).
    client_quotas: list[dict[str, Any]] = field(default_factory=list)
    #: Topics deleted through DeleteTopics and not created again since, sorted.
    deleted_topics: list[str] = field(default_factory=list)
    #: Top-level keys of a newer format, kept untouched.
    extra: dict[str, Any] = field(default_factory=dict)

    # -- reading --------------------------------------------------------------------------------------------

    @property
    def controller_holder(self) -> int:
        """The broker holding the controller role, or :data:`NO_CONTROLLER`."""
        if self.controller is not None:
            return self.controller.id
        return NO_CONTROLLER if self.controller_id is None else self.controller_id

    def unfenced(self) -> list[int]:
        """The ids of the registered, unfenced brokers, sorted."""
        return sorted(n for n, b in self.brokers.items() if not b.fenced)

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    # -- changing (the controller's operations only) ------------------------------------------------------

    def set_partition(self, topic: str, index: int, partition: PartitionInfo) -> None:
        info = self.topics[topic]
        parts = list(info.partitions)
        parts[index] = partition
        self.topics[topic] = TopicInfo(info.name, tuple(parts), info.configs, info.topic_id)

    # -- the document ---------------------------------------------------------------------------------------

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: object = "cluster metadata") -> ClusterMetadata:
        """Parse the document (see the module docstring); ConfigError naming ``where`` when it cannot be read."""
        version = doc.get("version", FORMAT_VERSION)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ConfigError(
                f"{where}: cluster metadata format version {version!r}; this broker reads versions up to "
                f"{FORMAT_VERSION} (run the newer pylog that wrote it)"
            )
        try:
            controller = doc.get("controller") or None
            return cls(
                cluster_id=None if doc.get("cluster_id") is None else str(doc["cluster_id"]),
                controller=None
                if controller is None
                else ControllerRecord(int(controller["id"]), int(controller.get("epoch", 0))),
                controller_id=None if doc.get("controller_id") is None else int(doc["controller_id"]),
                brokers={int(k): _broker(int(k), v) for k, v in (doc.get("brokers") or {}).items()},
                topics={str(k): _topic(str(k), v) for k, v in (doc.get("topics") or {}).items()},
                next_producer_id=int(doc.get("next_producer_id", 0)),
                broker_configs={
                    str(k): {str(a): str(b) for a, b in v.items()}
                    for k, v in (doc.get("broker_configs") or {}).items()
                },
                acls=[list(row) for row in doc.get("acls") or ()],
                client_quotas=[dict(row) for row in doc.get("client_quotas") or ()],
                deleted_topics=sorted(str(t) for t in doc.get("deleted_topics") or ()),
                extra={k: v for k, v in doc.items() if k not in _KNOWN_KEYS},
            )
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{where}: unreadable cluster metadata ({exc!r})") from None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = dict(self.extra)
        doc["version"] = FORMAT_VERSION
        if self.cluster_id is not None:
            doc["cluster_id"] = self.cluster_id
        if self.controller is not None:
            doc["controller"] = {"id": self.controller.id, "epoch": self.controller.epoch}
        if self.controller_id is not None:
            doc["controller_id"] = self.controller_id
        doc["brokers"] = {str(n): _broker_json(b) for n, b in sorted(self.brokers.items())}
        doc["topics"] = {name: _topic_json(t) for name, t in self.topics.items()}
        if self.next_producer_id:
            doc["next_producer_id"] = self.next_producer_id
        if self.broker_configs:
            doc["broker_configs"] = {k: dict(v) for k, v in self.broker_configs.items()}
        if self.acls:
            doc["acls"] = [list(row) for row in self.acls]
        if self.client_quotas:
            doc["client_quotas"] = [dict(row) for row in self.client_quotas]
        if self.deleted_topics:
            doc["deleted_topics"] = list(self.deleted_topics)
        return doc


def _broker(node_id: int, v: Mapping[str, Any]) -> BrokerInfo:
    return BrokerInfo(
        node_id,
        str(v["host"]),
        int(v["port"]),
        bool(v.get("fenced", False)),
        tuple((str(n), (str(e[0]), int(e[1]))) for n, e in sorted((v.get("endpoints") or {}).items())),
        int(v.get("broker_epoch", 0)),
    )


def _broker_json(b: BrokerInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"host": b.host, "port": b.port, "broker_epoch": b.broker_epoch, "fenced": b.fenced}
    if b.endpoints:
        out["endpoints"] = {name: [host, port] for name, (host, port) in b.endpoints}
    return out


def _topic(name: str, v: Mapping[str, Any]) -> TopicInfo:
    parts = tuple(
        PartitionInfo(
            tuple(int(r) for r in p["replicas"]),
            int(p["leader"]),
            int(p["leader_epoch"]),
            tuple(int(r) for r in p["isr"]),
            int(p.get("partition_epoch", 0)),
        )
        for p in v["partitions"]
    )
    topic_id = v.get("topic_id")
    return TopicInfo(
        name,
        parts,
        {str(a): str(b) for a, b in (v.get("configs") or {}).items()},
        None if topic_id is None else parse_topic_id(str(topic_id)),
    )


def _topic_json(t: TopicInfo) -> dict[str, Any]:
    out: dict[str, Any] = {} if t.topic_id is None else {"topic_id": format_topic_id(t.topic_id)}
    return out | {
        "configs": dict(t.configs),
        "partitions": [
            {
                "replicas": list(p.replicas),
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "isr": list(p.isr),
                "partition_epoch": p.partition_epoch,
            }
            for p in t.partitions
        ],
    }
