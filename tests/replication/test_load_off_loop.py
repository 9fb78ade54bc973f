"""A partition the cluster metadata assigns to a running broker gets its log made off the event loop.

Two brokers in this process share a cluster directory; ``os.fsync`` of node 1's new partition directory is made
slow (:data:`SLOW_FSYNC_S`, once). While node 1 waits for that fsync, it answers other requests at once; the
partition is served (and replicated to an ISR of 2) once its log is registered, with the metadata of that
moment applied to it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection, build_batch
from tests.support.brokers import start_node_brokers

pytestmark = pytest.mark.timeout(90)

SLOW_FSYNC_S = 3.0


def _wait_isr(client: KafkaClient, topic: str, replicas: int, timeout_s: float = 30) -> int:
    """The leader of ``topic``-0 once its ISR has ``replicas`` members."""
    deadline = time.monotonic() + timeout_s
    while True:
        part = client.metadata([topic]).topics[topic].partitions.get(0)
        if part is not None and part.leader >= 0 and len(part.isr) == replicas:
            return int(part.leader)
        assert time.monotonic() < deadline, f"{topic}: ISR never reached {replicas}: {part}"
        time.sleep(0.1)


def test_partition_assigned_at_runtime_loads_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fsync = os.fsync
    started, done = threading.Event(), threading.Event()
    slow_dir = str(tmp_path / "n1" / "assigned-0")

    def fsync(fd: Any) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}") if isinstance(fd, int) else ""
        if target == slow_dir and not started.is_set():
            started.set()
            time.sleep(SLOW_FSYNC_S)
            real_fsync(fd)
            done.set()
            return
        real_fsync(fd)

    cluster_dir = tmp_path / "cluster"
    cluster_dir.mkdir()
    base = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "pylog.cluster.dir": str(cluster_dir),
        "broker.heartbeat.interval.ms": "200",
        "broker.session.timeout.ms": "6000",
        "replica.fetch.wait.max.ms": "100",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
    }
    brokers = start_node_brokers(tmp_path, base)
    try:
        with KafkaClient(brokers[0].bootstrap) as client:
            assert client.admin.create_topics({"steady": (1, 2)})["steady"] == 0
            _wait_isr(client, "steady", 2)
            deadline = time.monotonic() + 30
            while brokers[1].ctx.replicas.partition("steady", 0) is None:  # node 1 applied that metadata
                assert time.monotonic() < deadline, "node 1 never hosted steady-0"
                time.sleep(0.05)
            monkeypatch.setattr(os, "fsync", fsync)
            assert client.admin.create_topics({"assigned": (1, 2)})["assigned"] == 0
            assert started.wait(15), "node 1 did not make the log of assigned-0"
            # node 1's event loop answers while its new partition waits for the disk
            t0 = time.monotonic()
            with RawConnection(brokers[1].bootstrap, timeout_s=30) as conn:
                meta = conn.call(
                    ApiKey.METADATA,
                    9,
                    {
                        "Topics": [{"Name": "steady"}],
                        "AllowAutoTopicCreation": False,
                        "IncludeTopicAuthorizedOperations": False,
                    },
                )
            took = time.monotonic() - t0
            assert meta["Topics"][0]["ErrorCode"] == ErrorCode.NONE
            assert not done.is_set(), "node 1 answered only after the fsync of its new partition"
            assert took < SLOW_FSYNC_S - 1
            assert brokers[1].ctx.replicas.partition("assigned", 0) is None  # not served until loaded
            assert done.wait(SLOW_FSYNC_S + 10)
            leader = _wait_isr(client, "assigned", 2)
            answer = client.produce(
                leader, {("assigned", 0): bytes(build_batch(5))}, acks=-1, timeout_ms=20000
            )
            assert answer is not None and answer[("assigned", 0)].error == 0
            hosted = brokers[1].ctx.replicas.partition("assigned", 0)
            assert hosted is not None and hosted.leader_id == leader
    finally:
        monkeypatch.setattr(os, "fsync", real_fsync)
        for b in brokers:
            b.stop()
