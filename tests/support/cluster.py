"""Helpers for cluster tests: real broker processes (``cluster_process``), raw sockets, SIGSTOP/SIGCONT.

Nothing here waits without a deadline: every poll has a timeout and every stopped process is continued in a
``finally`` (and ``cluster_process`` continues them again before stopping the cluster).

A process cluster shared by a module's tests (module scope: it starts once, and the module's tests run on one
xdist worker) is made whole again before each test by :func:`heal` (a function-scoped fixture of the module
calls it): every stopped node continued, every exited node started, then a wait until every node is registered
unfenced and every partition of every topic has a leader and its full ISR on every node's metadata. Its tests
then only need topic (and transactional id, group) names of their own, as each test of such a module uses.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from broker_runtime.controller import ClusterMetadata, PartitionInfo, SingleHostMetadataStore, move_leader
from broker_runtime.errors import BrokerStartError
from broker_runtime.launch import BrokerCluster, create_topic
from broker_runtime.protocol.batch_header import iter_batch_spans
from tests.server.rawclient import request
from tests.support.processes import process_state

METADATA, LIST_OFFSETS = 3, 2

#: The one copy of the short cluster timings of the tests: brokers heartbeat every 200 ms and a stopped or
#: killed one is fenced within 1.5 s; followers fetch with 100 ms waits and back-offs. Modules add their own
#: keys on top (``{**FAST, ...}``).
FAST = {
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "1500",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
}


def wait_for(condition: Callable[[], Any], timeout_s: float = 15, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout_s} s (last value {value!r})")
        time.sleep(0.02)


def heal(cluster: BrokerCluster, timeout_s: float = 60) -> None:
    """Make a shared cluster whole again (see the module docstring); raises AssertionError naming what is still
    missing after ``timeout_s``."""
    for node in cluster.nodes:
        if node.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGCONT)
        else:
            try:
                cluster.start(node.node_id)
            except BrokerStartError:
                # A child that missed its start deadline may still be starting: the next heal would take it
                # for a running node at its old address. Gone, it is started again by the next heal.
                cluster.kill(node.node_id)
                raise
    deadline = time.monotonic() + timeout_s
    while missing := unhealthy(cluster):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the shared cluster is not whole {timeout_s:g} s after healing what the previous test left: "
                f"{missing[:5]} ({len(missing)} in all)"
            )
        time.sleep(0.05)


def unhealthy(cluster: BrokerCluster) -> list[str]:
    """What keeps ``cluster`` from being whole, as each node's metadata says: nodes not registered (or fenced),
    partitions without a leader or short of their ISR (empty when whole)."""
    everyone = sorted(n.node_id for n in cluster.nodes)
    found: list[str] = []
    for node in cluster.nodes:
        try:
            md = metadata(node.bootstrap)
        except Exception as exc:  # a node still starting: say so and look again
            found.append(f"node {node.node_id}: {exc}")
            continue
        brokers = sorted(b["NodeId"] for b in md["Brokers"])
        if brokers != everyone:
            found.append(f"node {node.node_id} sees brokers {brokers}")
        for topic in md["Topics"]:
            for part in topic["Partitions"]:
                where = f"node {node.node_id}: {topic['Name']}-{part['PartitionIndex']}"
                if part["LeaderId"] == -1:
                    found.append(f"{where} has no leader")
                elif sorted(part["IsrNodes"]) != sorted(part["ReplicaNodes"]):
                    found.append(f"{where} ISR {sorted(part['IsrNodes'])} of {sorted(part['ReplicaNodes'])}")
    return found


def metadata(bootstrap: str, topics: list[str] | None = None) -> dict[str, Any]:
    return request(
        bootstrap,
        METADATA,
        12,
        {
            "Topics": None if topics is None else [{"Name": t, "TopicId": None} for t in topics],
            "AllowAutoTopicCreation": False,
            "IncludeTopicAuthorizedOperations": False,
        },
    )


def partition_state(bootstrap: str, topic: str, partition: int = 0) -> dict[str, Any]:
    md = metadata(bootstrap, [topic])
    found: dict[str, Any] = md["Topics"][0]["Partitions"][partition]
    return found


def isr(bootstrap: str, topic: str, partition: int = 0) -> list[int]:
    return sorted(partition_state(bootstrap, topic, partition)["IsrNodes"])


def create_replicated(
    cluster: BrokerCluster,
    topic: str,
    partitions: int = 1,
    rf: int = 3,
    configs: dict[str, str] | None = None,
) -> None:
    """Create a topic and wait until every node hosts its replicas' logs and knows the topic."""
    create_topic(cluster.bootstrap, topic, partitions, configs, replication_factor=rf)
    for node in cluster.nodes:
        wait_for(
            functools.partial(_knows, node.bootstrap, topic, partitions),
            what=f"node {node.node_id} knows {topic}",
        )


def _knows(bootstrap: str, topic: str, partitions: int) -> bool:
    return len(metadata(bootstrap, [topic])["Topics"][0]["Partitions"]) == partitions


def high_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    body = {
        "ReplicaId": -1,
        "IsolationLevel": 0,
        "Topics": [
            {
                "Name": topic,
                "Partitions": [{"PartitionIndex": partition, "CurrentLeaderEpoch": -1, "Timestamp": -1}],
            }
        ],
    }
    answer = request(bootstrap, LIST_OFFSETS, 7, body)["Topics"][0]["Partitions"][0]
    assert answer["ErrorCode"] == 0, answer
    offset: int = answer["Offset"]
    return offset


def leo_on_disk(cluster: BrokerCluster, node_id: int, topic: str, partition: int = 0) -> int:
    """The log end offset of a replica, read from its segment files (read-only; whole batches only)."""
    directory = Path(cluster.data_dir) / "kafka-logs" / f"node-{node_id}" / f"{topic}-{partition}"
    leo = 0
    for path in sorted(directory.glob("*.log")):
        spans = iter_batch_spans(path.read_bytes())
        if spans:
            leo = spans[-1][1].next_offset
    return leo


@contextlib.contextmanager
def paused(pid: int) -> Iterator[None]:
    """SIGSTOP a broker process for the duration of the block (always continued).

    The block starts only once the process is really stopped: ``kill`` returns before the signal is delivered,
    and a broker still running for those few milliseconds could, say, answer one more fetch.
    """
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: process_state(pid) in ("T", "t"), timeout_s=5, what=f"process {pid} stopped")
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def readable(sock: socket.socket, timeout_s: float) -> bool:
    ready, _, _ = select.select([sock], [], [], timeout_s)
    return bool(ready)


def batches_on_disk(cluster: BrokerCluster, node_id: int, topic: str, partition: int = 0) -> list[bytes]:
    """The bytes of every batch of a replica's log, in order (read-only, from its segment files)."""
    directory = Path(cluster.data_dir) / "kafka-logs" / f"node-{node_id}" / f"{topic}-{partition}"
    found: list[bytes] = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        found += [bytes(data[pos : pos + header.size]) for pos, header in iter_batch_spans(data)]
    return found


def force_leader(
    cluster_dir: str | os.PathLike[str], topic: str, partition: int, new_leader: int, *, unclean: bool = False
) -> PartitionInfo:
    """Make ``new_leader`` the leader of ``topic``-``partition`` the way the controller moves leadership: its
    :func:`~broker_runtime.controller.move_leader` in one update of the store (leader := ``new_leader``,
    leader_epoch + 1, the previous leader out of the ISR and ``new_leader`` in it, partition_epoch + 1). As the
    controller, it refuses a replica outside the ISR (it may lack acknowledged records) unless ``unclean``.
    Returns the new partition state. ``cluster_dir`` is the cluster directory (``<data dir>/kafka-logs``)."""
    with SingleHostMetadataStore(cluster_dir).update() as meta:
        return move_leader(meta, topic, partition, new_leader, unclean=unclean)


def cluster_metadata(cluster: BrokerCluster) -> ClusterMetadata:
    """The cluster's metadata as its store reads it (typed; no lock taken)."""
    return SingleHostMetadataStore(Path(cluster.data_dir) / "kafka-logs").read()
