"""``BrokerCluster``'s one-node helpers on real broker processes: ``kill`` then ``start`` brings a node back on a
new port with its data; ``stop`` is clean; ``restart`` is stop + start; ``bootstrap`` lists running nodes only."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.errors import IllegalStateError
from broker_runtime.launch import cluster_process
from broker_runtime.launch.layout import CLUSTER_DIR
from tests.server.rawclient import build_batch
from tests.support.cluster import create_replicated, metadata, wait_for
from tests.support.processes import running

pytestmark = pytest.mark.timeout(120)


def _led_by(bootstrap: str, topic: str, node_id: int) -> int:
    """The partition of ``topic`` whose leader is ``node_id``."""
    partitions = metadata(bootstrap, [topic])["Topics"][0]["Partitions"]
    return next(p["PartitionIndex"] for p in partitions if p["LeaderId"] == node_id)


def _records(bootstrap: str, topic: str, partition: int) -> bytes:
    """The record bytes node ``bootstrap`` serves for the partition from offset 0 (b"" while it cannot)."""
    try:
        with KafkaClient(bootstrap, request_timeout_ms=5000) as client:
            result = client.fetch({(topic, partition): 0}, max_wait_ms=0)[(topic, partition)]
    except Exception:  # the node is still electing itself leader again: retried by the caller's deadline
        return b""
    return bytes(result.records or b"") if result.error == 0 else b""


def test_kill_then_start_brings_the_node_back_with_its_data(tmp_path: Path) -> None:
    with cluster_process(tmp_path, nodes=2) as cluster:
        first_address = cluster.nodes[1].bootstrap
        create_replicated(cluster, "kept", partitions=2, rf=1)
        partition = _led_by(cluster.nodes[0].bootstrap, "kept", 1)
        batch = build_batch(4, value_size=32)
        with KafkaClient(cluster.bootstrap) as client:
            result = client.produce(1, {("kept", partition): batch}, acks=1, timeout_ms=10000)
        assert result is not None and result[("kept", partition)].error == 0

        old_pid = cluster.nodes[1].pid
        cluster.kill(1)  # SIGKILL: no clean shutdown; returns once the process has exited
        assert not running(old_pid) and not cluster.nodes[1].running
        assert cluster.bootstrap == cluster.nodes[0].bootstrap
        with pytest.raises(IndexError):
            cluster.nodes[5]

        address = cluster.start(1)
        assert cluster.nodes[1].bootstrap == address != first_address
        assert cluster.nodes[1].pid != old_pid and cluster.nodes[1].running
        assert cluster.bootstrap.split(",") == [cluster.nodes[0].bootstrap, address]
        records = wait_for(
            lambda: _records(address, "kept", partition), what="the restarted node serves its data"
        )
        assert bytes(batch[-20:]) in records  # the same records, read back from the restarted node


def test_stop_is_clean_restart_and_start_of_a_running_node(tmp_path: Path) -> None:
    with cluster_process(tmp_path, nodes=2) as cluster:
        marker = tmp_path / CLUSTER_DIR / "node-0" / ".kafka_cleanshutdown"
        cluster.stop(0)
        assert not cluster.nodes[0].running and marker.exists()
        assert cluster.bootstrap == cluster.nodes[1].bootstrap
        address = cluster.start(0)
        metadata(address)
        with pytest.raises(IllegalStateError):
            cluster.start(0)
        old_pid = cluster.nodes[1].pid
        new_address = cluster.restart(1)
        assert cluster.nodes[1].pid != old_pid and not running(old_pid)
        wait_for(
            lambda: new_address in {f"{b['Host']}:{b['Port']}" for b in metadata(new_address)["Brokers"]},
            what="node 1 registered its new address",
        )
        cluster.kill(1, signal.SIGTERM)  # clean as well: TERM waits for the exit
        assert not cluster.nodes[1].running
        assert (tmp_path / CLUSTER_DIR / "node-1" / ".kafka_cleanshutdown").exists()
