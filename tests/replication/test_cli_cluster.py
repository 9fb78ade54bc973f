"""``pylog-broker cluster``: N child brokers, their listening lines, the bootstrap line, clean stop on SIGTERM;
its supervision (a dead node is restarted, a node that keeps dying is given up, the rest keeps serving) and the
``pylog-broker node stop|start|status`` commands; and ``broker_process(..., nodes=N)``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from broker_runtime.launch import broker_process, create_topic
from tests.support.cluster import metadata, wait_for
from tests.support.launch import pylog_broker
from tests.support.processes import running

pytestmark = pytest.mark.timeout(90)


def _read_lines(proc: subprocess.Popen[str], n: int, timeout_s: float) -> list[str]:
    lines: list[str] = []

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())
            if len(lines) == n:
                return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return lines


def test_cluster_command_prints_nodes_and_bootstrap_and_stops_cleanly(tmp_path: Path) -> None:
    config = tmp_path / "broker.properties"
    config.write_text(f"log.dirs={tmp_path / 'logs'}\nlisteners=PLAINTEXT://127.0.0.1:9092\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker_runtime", "cluster", "--nodes", "2", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines = _read_lines(proc, 3, 30)
        assert len(lines) == 3, lines
        assert all(line.startswith("listening on 127.0.0.1:") for line in lines[:2])
        addresses = [line.removeprefix("listening on ") for line in lines[:2]]
        assert lines[2] == f"bootstrap servers: {','.join(addresses)}"
        md = metadata(addresses[1])
        assert sorted(f"{b['Host']}:{b['Port']}" for b in md["Brokers"]) == sorted(addresses)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    for node in (0, 1):
        assert (tmp_path / "logs" / f"node-{node}" / ".kafka_cleanshutdown").exists()
    assert (tmp_path / "logs" / "cluster.json").exists()


def test_embedded_broker_with_nodes_yields_the_bootstrap_list(tmp_path: Path) -> None:
    with broker_process(tmp_path, nodes=2) as bootstrap:
        assert len(bootstrap.split(",")) == 2
        create_topic(bootstrap, "two", 2, replication_factor=2)
        wait_for(
            lambda: (
                [
                    p["ReplicaNodes"]
                    for p in metadata(bootstrap.split(",")[1], ["two"])["Topics"][0]["Partitions"]
                ]
                == [[0, 1], [1, 0]]
            ),
            what="assignment visible on node 1",
        )


# --- supervision: dead nodes are restarted, operators stop and start nodes ------------------------------------


class _RunningCluster:
    """A ``pylog-broker cluster`` subprocess; its stderr goes to a file the test reads."""

    def __init__(self, tmp_path: Path, nodes: int, flags: list[str]) -> None:
        config = tmp_path / "broker.properties"
        config.write_text(f"log.dirs={tmp_path / 'logs'}\nlisteners=PLAINTEXT://127.0.0.1:0\n")
        self.dir = tmp_path / "logs"
        self.err_path = tmp_path / "cluster.err"
        with self.err_path.open("w") as err:
            self.proc = subprocess.Popen(
                pylog_broker("cluster", "--nodes", str(nodes), "--config", str(config), *flags),
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
            )
        lines = _read_lines(self.proc, nodes + 1, 60)
        assert len(lines) == nodes + 1, (lines, self.stderr())
        self.addresses = [line.removeprefix("listening on ") for line in lines[:nodes]]

    def stderr(self) -> str:
        return self.err_path.read_text()

    def wait_line(self, pattern: str, timeout_s: float = 20) -> re.Match[str]:
        found = wait_for(
            lambda: re.search(pattern, self.stderr()), timeout_s=timeout_s, what=f"a stderr line {pattern!r}"
        )
        assert isinstance(found, re.Match)
        return found

    def node(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            pylog_broker("node", *args, "--cluster-dir", str(self.dir)),
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    def status(self) -> list[dict[str, Any]]:
        result = self.node("status", "--json")
        assert result.returncode == 0, result.stderr
        nodes: list[dict[str, Any]] = json.loads(result.stdout)["nodes"]
        return nodes

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)


@contextlib.contextmanager
def _cluster(tmp_path: Path, nodes: int, *flags: str) -> Iterator[_RunningCluster]:
    cluster = _RunningCluster(tmp_path, nodes, list(flags))
    try:
        yield cluster
    finally:
        cluster.stop()


def _brokers(bootstrap: str) -> dict[int, str]:
    return {b["NodeId"]: f"{b['Host']}:{b['Port']}" for b in metadata(bootstrap)["Brokers"]}


def test_a_killed_node_is_restarted_while_the_others_keep_serving(tmp_path: Path) -> None:
    # The back-off outlasts a `node status` (a Python start of its own) on a busy machine: the test looks at the
    # node while it waits to restart.
    with _cluster(tmp_path, 3, "--restart-backoff-ms", "5000") as cluster:
        victim = cluster.status()[1]
        assert victim["state"] == "running" and victim["address"] == cluster.addresses[1]
        os.kill(victim["pid"], signal.SIGKILL)
        cluster.wait_line(
            rf"pylog-broker: warning: node 1 \(pid {victim['pid']}\) was killed by SIGKILL; "
            r"restarting it in 5 s \(restart 1 of at most 5 within 300 s\)"
        )
        # During the back-off the cluster keeps serving from the other nodes.
        assert cluster.proc.poll() is None, cluster.stderr()
        assert cluster.status()[1]["state"] == "restarting"
        for address in (cluster.addresses[0], cluster.addresses[2]):
            assert set(_brokers(address)) >= {0, 2}
        restarted = cluster.wait_line(r"pylog-broker: node 1 restarted \(pid (\d+)\), listening on (\S+)\n")
        pid, address = int(restarted[1]), restarted[2]
        assert address == cluster.addresses[1]  # its old port, as a Kafka broker keeps its configured port
        assert _brokers(address)[1] == address
        wait_for(
            lambda: _brokers(cluster.addresses[0]).get(1) == address, what="node 0 sees node 1's new address"
        )
        node = cluster.status()[1]
        assert (node["state"], node["pid"], node["address"], node["restarts"]) == ("running", pid, address, 1)
        assert node["last_exit"] == "was killed by SIGKILL"
        pids = [n["pid"] for n in cluster.status()]
        assert cluster.stop() == 0
    assert not any(running(p) for p in pids)
    assert not (cluster.dir / "supervisor.json").exists()
    for node_id in range(3):
        assert (cluster.dir / f"node-{node_id}" / ".kafka_cleanshutdown").exists()


def test_a_node_that_keeps_dying_hits_the_restart_limit_and_the_rest_keeps_running(tmp_path: Path) -> None:
    flags = ["--restart-limit", "2", "--restart-backoff-ms", "100", "--restart-window-s", "120"]
    with _cluster(tmp_path, 3, *flags) as cluster:
        pid = cluster.status()[2]["pid"]
        # A real reason for every restart to fail: node 2's log dir is replaced by a plain file.
        log_dir = cluster.dir / "node-2"
        log_dir.rename(cluster.dir / "node-2.moved")
        log_dir.write_text("not a directory\n")
        os.kill(pid, signal.SIGKILL)
        gave_up = cluster.wait_line(
            r"pylog-broker: warning: node 2 \(pid \d+\) (.*); giving up on it: (.*)\n"
        )
        assert gave_up[1].startswith("exited with status 1 before listening: cannot start:"), gave_up[0]
        assert str(log_dir) in gave_up[1]
        assert "3 deaths within 120 s exceed the restart limit of 2" in gave_up[2]
        time.sleep(1.0)  # ten back-offs: nothing more happens to node 2
        lines = [line for line in cluster.stderr().splitlines() if line.startswith("pylog-broker: ")]
        assert len([line for line in lines if "node 2 " in line and "restarting it in" in line]) == 2, lines
        assert len([line for line in lines if "giving up" in line]) == 1, lines
        assert cluster.proc.poll() is None
        states = cluster.status()
        assert [n["state"] for n in states] == ["running", "running", "failed"]
        assert states[2]["pid"] is None and states[2]["restarts"] == 2
        for address in cluster.addresses[:2]:
            assert set(_brokers(address)) >= {0, 1}
        # Repaired, the operator starts it again.
        log_dir.unlink()
        (cluster.dir / "node-2.moved").rename(log_dir)
        # Another process has taken node 2's port meanwhile: it starts on a free one, once, and says so.
        old_host, old_port = cluster.addresses[2].rsplit(":", 1)
        with socket.socket() as squatter:
            squatter.bind((old_host, int(old_port)))
            squatter.listen()
            started = cluster.node("start", "--node-id", "2")
        assert started.returncode == 0, (started.stderr, cluster.stderr())
        address = started.stdout.strip().rsplit(" ", 1)[-1]
        assert started.stdout.startswith("node 2 started on request (pid ")
        assert address != cluster.addresses[2]
        moved = [line for line in cluster.stderr().splitlines() if "could not bind" in line]
        assert moved == [
            f"pylog-broker: warning: node 2 could not bind its PLAINTEXT port again: {cluster.addresses[2]} is "
            f"taken (Address already in use); it listens on {address} instead: give clients that name "
            f"{cluster.addresses[2]} in bootstrap.servers the new address"
        ], cluster.stderr()
        assert _brokers(address)[2] == address
        assert cluster.stop() == 0


def test_node_stop_is_not_restarted_until_node_start(tmp_path: Path) -> None:
    with (
        _cluster(tmp_path, 3, "--restart-backoff-ms", "100") as cluster,
        _producer(cluster.addresses) as produce,
    ):
        create_topic(cluster.addresses[0], "kept", 3)
        produce("kept", 3)
        pid = cluster.status()[1]["pid"]
        stopped = cluster.node("stop", "--node-id", "1")
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.startswith(f"node 1 stopped on request (pid {pid} exited with status 0)")
        assert not running(pid)
        assert (cluster.dir / "node-1" / ".kafka_cleanshutdown").exists()  # a clean shutdown
        time.sleep(1.0)  # ten back-offs: a dead node would have been restarted by now
        node = cluster.status()[1]
        assert (node["state"], node["pid"], node["address"]) == ("stopped", None, None)
        assert "restarted" not in cluster.stderr() and "warning: node 1" not in cluster.stderr()
        assert cluster.node("stop", "--node-id", "1").stdout.strip() == "node 1 is already stopped"
        for address in (cluster.addresses[0], cluster.addresses[2]):
            assert set(_brokers(address)) >= {0, 2}

        started = cluster.node("start", "--node-id", "1")
        assert started.returncode == 0, started.stderr
        found = re.fullmatch(r"node 1 started on request \(pid (\d+)\), listening on (\S+)\n", started.stdout)
        assert found is not None, started.stdout
        assert found[2] == cluster.addresses[1]  # its old port again
        assert _brokers(found[2])[1] == found[2]
        nodes = cluster.status()
        assert (nodes[1]["state"], nodes[1]["pid"], nodes[1]["address"]) == (
            "running",
            int(found[1]),
            found[2],
        )
        # Every node dies, one after another, before the producer could learn anything new: it knows only the
        # old addresses (its bootstrap list and metadata), and keeps producing because the nodes come back there.
        for node in nodes:
            os.kill(node["pid"], signal.SIGKILL)
        for node_id in range(3):
            cluster.wait_line(rf"pylog-broker: node {node_id} restarted \(pid \d+\), listening on ")
        produce("kept", 3)
        assert cluster.stop() == 0


@contextlib.contextmanager
def _producer(bootstrap: list[str]) -> Iterator[Callable[[str, int], None]]:
    """A librdkafka producer of ``bootstrap``; ``produce(topic, n)`` sends one record to each of ``n``
    partitions and waits (bounded) until every one is acknowledged."""
    producer = Producer(
        {
            "bootstrap.servers": ",".join(bootstrap),
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
            "retry.backoff.ms": 50,
            "message.timeout.ms": 20000,
        }
    )
    acked: list[Any] = []

    def produce(topic: str, partitions: int) -> None:
        acked.clear()
        for partition in range(partitions):
            producer.produce(
                topic, b"v", partition=partition, on_delivery=lambda err, _msg: acked.append(err)
            )
        deadline = time.monotonic() + 25
        while len(acked) < partitions and time.monotonic() < deadline:
            producer.poll(0.1)
        assert acked == [None] * partitions, f"{partitions} records to {bootstrap}: delivery reports {acked}"

    try:
        yield produce
    finally:
        producer.flush(0)


def test_node_commands_without_a_running_cluster_exit_3_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "supervisor.json").write_text('{"pid": 1, "nodes": []}')  # stale: nobody holds the lock
    (tmp_path / "supervisor.lock").touch()
    for args in (["status"], ["status", "--json"], ["stop", "--node-id", "0"], ["start", "--node-id", "0"]):
        result = subprocess.run(
            pylog_broker("node", *args, "--cluster-dir", str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 3, (args, result)
        assert result.stderr == f"pylog-broker: no pylog-broker cluster is running for {tmp_path}\n"


def test_a_second_supervisor_of_the_same_cluster_dir_refuses_to_start(tmp_path: Path) -> None:
    with _cluster(tmp_path, 1) as cluster:
        config = tmp_path / "broker.properties"
        second = subprocess.run(
            pylog_broker("cluster", "--nodes", "1", "--config", str(config)),
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
        assert second.returncode == 1 and second.stdout == ""
        assert second.stderr == (
            f"pylog-broker: another pylog-broker cluster (pid {cluster.proc.pid}) already runs the cluster in "
            f"{cluster.dir}\n"
        )
        assert cluster.status()[0]["state"] == "running"
