"""Cluster membership and partition assignment: who the brokers are, which replicas each partition has, who
leads it, and its ISR.

Two implementations of one small interface (:class:`ClusterStore`):

* :class:`SingleNodeCluster` -- the default: this broker alone; every local topic's partitions have replicas
  = ISR = [this node], leader this node, epoch 0. Nothing is persisted beyond the logs themselves.
* :class:`SharedFileCluster` -- several broker processes on one machine (``pylog.cluster.dir``, set by
  ``pylog-broker cluster``). The truth is one JSON file, ``<cluster dir>/cluster.json``::

      {"version": 1, "cluster_id": "...", "controller_id": 0,
       "brokers": {"0": {"host": "127.0.0.1", "port": 40001}, ...},
       "topics": {"events": {"configs": {...},
                             "partitions": [{"replicas": [0, 1, 2], "leader": 0, "leader_epoch": 0,
                                             "isr": [0, 1, 2], "partition_epoch": 3}, ...]}},
       "next_producer_id": 2000}

  Why a file: the brokers share a machine, so a file plus ``flock`` gives a linearizable store for free, with
  no extra protocol and nothing that can diverge. Every change is a read-modify-write under an exclusive
  ``flock`` of ``<cluster dir>/cluster.lock``, written atomically (``.tmp``, fsync, rename); readers need no
  lock. Writers: each broker registers its own address at start; CreateTopics (and auto-creation) on any
  broker runs the controller's assignment (:func:`~broker_runtime.replication.assign_replicas`, a pure
  function of the sorted broker ids, so the result does not depend on which broker ran it) under the lock;
  the leader of a partition alters that partition's ISR (Kafka's AlterPartition) -- nobody else touches it;
  a broker that needs producer ids takes the next block of ``next_producer_id`` (Kafka's AllocateProducerIds),
  so producer ids are unique across the cluster.
  Node 0 is reported as the controller. Brokers notice changes by polling the file's identity (inode,
  mtime, size) every ``POLL_INTERVAL_MS`` and on demand when a request names a topic they do not know.
  Membership is static: a registered broker stays registered (a stopped broker is simply unreachable).

Lock waits are bounded (``LOCK_TIMEOUT_S``): a broker stopped while holding the lock (SIGSTOP) makes the
others' writes fail with a log line instead of hanging them.

Thread-safety: each store is used from its broker's event-loop thread only; cross-process safety comes from
the file lock and atomic renames.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from broker_runtime.errors import ConfigError, ErrorCode, WaitTimeoutError
from broker_runtime.fsutil import write_atomically
from broker_runtime.replication.assignment import assign_replicas
from broker_runtime.server.topics import TopicError, TopicManager, topic_name_error

__all__ = [
    "CLUSTER_FILE",
    "CLUSTER_LOCK_FILE",
    "LOCK_TIMEOUT_S",
    "POLL_INTERVAL_MS",
    "BrokerInfo",
    "ClusterStore",
    "ClusterView",
    "PartitionInfo",
    "SharedFileCluster",
    "SingleNodeCluster",
    "TopicInfo",
]

_log = logging.getLogger(__name__)

CLUSTER_FILE = "cluster.json"
CLUSTER_LOCK_FILE = "cluster.lock"
POLL_INTERVAL_MS = 100
LOCK_TIMEOUT_S = 3.0
_FORMAT_VERSION = 1
CONTROLLER_ID = 0


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class PartitionInfo:
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterView:
    """An immutable snapshot of the cluster metadata."""

    brokers: Mapping[int, BrokerInfo]
    topics: Mapping[str, TopicInfo]
    controller_id: int = CONTROLLER_ID


class ClusterStore(Protocol):
    """What the broker needs from cluster membership; see the module docstring."""

    node_id: int

    @property
    def view(self) -> ClusterView: ...

    def refresh(self) -> bool: ...

    def register(self, host: str, port: int) -> None: ...

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> tuple[int, int]: ...

    def alter_isr(self, topic: str, partition: int, isr: list[int]) -> bool: ...


class SingleNodeCluster:
    """This broker alone: the view is derived from the local topics (see the module docstring)."""

    def __init__(self, node_id: int, topics: TopicManager) -> None:
        self.node_id = node_id
        self._topics = topics
        self._host = "127.0.0.1"
        self._port = 0

    @property
    def view(self) -> ClusterView:
        node = self.node_id
        only = PartitionInfo((node,), node, 0, (node,))
        topics = {
            name: TopicInfo(name, (only,) * (self._topics.partition_count(name) or 0))
            for name in self._topics.names()
        }
        return ClusterView({node: BrokerInfo(node, self._host, self._port)}, topics, node)

    def refresh(self) -> bool:
        return False

    def register(self, host: str, port: int) -> None:
        self._host, self._port = host, port

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> tuple[int, int]:
        node = self.node_id
        if assignments:
            for index, ids in sorted(assignments.items()):
                if list(ids) != [node]:
                    raise TopicError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"partition {index} of topic {name}: replicas {list(ids)} "
                        f"must be exactly [{node}] on this single-node broker",
                    )
            partitions, replication_factor = len(assignments), 1
        if replication_factor <= 0:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            )
        if replication_factor != 1:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
                f"of {replication_factor} cannot be reached because only 1 broker(s) are registered.",
            )
        self._topics.check_new(name, partitions, configs)
        if not validate_only:
            self._topics.create(name, partitions, configs)
        return partitions, replication_factor

    def alter_isr(self, topic: str, partition: int, isr: list[int]) -> bool:
        return list(isr) == [self.node_id]


def _parse_view(data: Mapping[str, Any]) -> ClusterView:
    brokers = {
        int(k): BrokerInfo(int(k), str(v["host"]), int(v["port"])) for k, v in data.get("brokers", {}).items()
    }
    topics: dict[str, TopicInfo] = {}
    for name, t in data.get("topics", {}).items():
        parts = tuple(
            PartitionInfo(
                tuple(p["replicas"]),
                int(p["leader"]),
                int(p["leader_epoch"]),
                tuple(p["isr"]),
                int(p.get("partition_epoch", 0)),
            )
            for p in t["partitions"]
        )
        topics[name] = TopicInfo(name, parts, dict(t.get("configs", {})))
    return ClusterView(brokers, topics, int(data.get("controller_id", CONTROLLER_ID)))


class SharedFileCluster:
    """Cluster metadata in ``<cluster dir>/cluster.json`` shared by the brokers of one machine."""

    def __init__(
        self, node_id: int, cluster_dir: str | os.PathLike[str], cluster_id: str, topics: TopicManager
    ) -> None:
        self.node_id = node_id
        self.dir = Path(cluster_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / CLUSTER_FILE
        self.lock_path = self.dir / CLUSTER_LOCK_FILE
        self._cluster_id = cluster_id
        self._topics = topics
        self._identity: tuple[int, int, int] | None = None
        self._view = ClusterView({}, {}, CONTROLLER_ID)
        self.refresh()

    # -- reading --------------------------------------------------------------------------------------------

    @property
    def view(self) -> ClusterView:
        return self._view

    def refresh(self) -> bool:
        """Re-read the file if it changed since the last read; True when the view changed."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        identity = (st.st_ino, st.st_mtime_ns, st.st_size)
        if identity == self._identity:
            return False
        data = self._read()
        self._identity = identity
        view = _parse_view(data)
        changed = view != self._view
        self._view = view
        return changed

    def _read(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {"version": _FORMAT_VERSION, "cluster_id": self._cluster_id, "brokers": {}, "topics": {}}
        data: dict[str, Any] = json.loads(text)
        return data

    # -- writing --------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[dict[str, Any]]:
        """Hold the cluster lock; yields the current file content, written back when the block succeeds."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise WaitTimeoutError(
                            f"cluster metadata lock {self.lock_path} still held by another broker after "
                            f"{timeout_s} s"
                        ) from None
                    time.sleep(0.002)
            data = self._read()
            yield data
            data["version"] = _FORMAT_VERSION
            data.setdefault("cluster_id", self._cluster_id)
            data.setdefault("controller_id", CONTROLLER_ID)
            write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))
        finally:
            os.close(fd)  # releases the flock
        self.refresh()

    def register(self, host: str, port: int) -> None:
        """Record this broker's address (at start); refuses to join a cluster with another cluster.id."""
        with self._locked(timeout_s=30.0) as data:
            existing = data.get("cluster_id")
            if existing is not None and existing != self._cluster_id:
                raise ConfigError(
                    f"{self.path} belongs to cluster {existing!r}, this broker is configured for {self._cluster_id!r}"
                )
            data.setdefault("brokers", {})[str(self.node_id)] = {"host": host, "port": port}
            data.setdefault("topics", {})
        _log.info("node %d registered as %s:%d in %s", self.node_id, host, port, self.path)

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> tuple[int, int]:
        """Assign and record a new topic (any broker may call; the lock serializes). Raises TopicError."""
        try:
            with self._locked() as data:
                result = self._create_locked(data, name, partitions, replication_factor, configs, assignments)
                if validate_only:
                    raise _ValidateOnly(result)
        except _ValidateOnly as done:
            return done.result
        except TimeoutError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None
        _log.info("created topic %s: %d partition(s), replication factor %d", name, *result)
        return result

    def _create_locked(
        self,
        data: dict[str, Any],
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None,
    ) -> tuple[int, int]:
        problem = topic_name_error(name)
        if problem is not None:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        topics: dict[str, Any] = data.setdefault("topics", {})
        if name in topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        folded = name.replace(".", "_")
        for existing in topics:
            if existing.replace(".", "_") == folded:
                raise TopicError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {existing}",
                )
        brokers = sorted(int(b) for b in data.get("brokers", {}))
        if assignments:
            indexes = sorted(assignments)
            if indexes != list(range(len(indexes))):
                raise TopicError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"partitions of topic {name} must be numbered 0..{len(indexes) - 1}, got {indexes}",
                )
            replica_lists = [list(assignments[i]) for i in indexes]
            for i, ids in enumerate(replica_lists):
                if not ids or len(set(ids)) != len(ids) or any(b not in brokers for b in ids):
                    raise TopicError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"partition {i} of topic {name}: replicas {ids} must be distinct registered brokers "
                        f"{brokers}",
                    )
            partitions, replication_factor = len(replica_lists), len(replica_lists[0])
        else:
            if replication_factor <= 0:
                raise TopicError(
                    ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
                )
            if replication_factor > len(brokers):
                raise TopicError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {replication_factor} time(s): The target replication "
                    f"factor of {replication_factor} cannot be reached because only {len(brokers)} broker(s) "
                    "are registered.",
                )
            if partitions <= 0:
                raise TopicError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"Number of partitions must be larger than 0, got {partitions}.",
                )
            replica_lists = assign_replicas(brokers, partitions, replication_factor)
        # Name, partition count and configs are also checked by the local rules (compression, LogConfig).
        self._topics.check_config(name, partitions, configs)
        topics[name] = {
            "configs": dict(configs),
            "partitions": [
                {"replicas": ids, "leader": ids[0], "leader_epoch": 0, "isr": list(ids), "partition_epoch": 0}
                for ids in replica_lists
            ],
        }
        return partitions, replication_factor

    def alter_isr(self, topic: str, partition: int, isr: list[int]) -> bool:
        """The leader's ISR change; False (and a log line) when it cannot be recorded now."""
        try:
            with self._locked() as data:
                entry = data["topics"][topic]["partitions"][partition]
                if entry["leader"] != self.node_id:
                    raise _Rejected(f"node {self.node_id} is not the leader of {topic}-{partition}")
                entry["isr"] = sorted(isr)
                entry["partition_epoch"] = int(entry.get("partition_epoch", 0)) + 1
        except (TimeoutError, _Rejected, KeyError, IndexError, OSError) as exc:
            _log.warning("ISR change of %s-%d to %s not recorded: %s", topic, partition, isr, exc)
            return False
        return True

    def allocate_producer_ids(self, floor: int, block_size: int) -> tuple[int, int]:
        """The next block of ``block_size`` producer ids no node has had, starting at ``floor`` or later.

        Kafka's controller hands out producer-id blocks (AllocateProducerIds) and records the next free id in
        its metadata; here ``next_producer_id`` in ``cluster.json``, advanced under the cluster lock, plays
        that part. Raises :class:`~broker_runtime.errors.WaitTimeoutError` when the lock cannot be had.
        """
        with self._locked() as data:
            start = max(int(data.get("next_producer_id", 0)), floor)
            end = start + block_size - 1
            data["next_producer_id"] = end + 1
        _log.info("node %d took producer ids [%d, %d] from %s", self.node_id, start, end, self.path)
        return start, end


class _ValidateOnly(Exception):
    """Leaves the locked block without writing (CreateTopics validateOnly)."""

    def __init__(self, result: tuple[int, int]) -> None:
        super().__init__("validate only")
        self.result = result


class _Rejected(Exception):
    pass
