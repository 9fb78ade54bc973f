"""Diverging logs across real broker processes: an old leader's unreplicated acks=1 tail is replaced by the new
leader's records at the same offsets once it returns as a follower (Fetch v12 LastFetchedEpoch ->
DivergingEpoch -> truncation). Leadership is moved with :func:`force_leader`, the same metadata write the
controller makes, so the test does not depend on the controller's timing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.launch import cluster_process
from broker_runtime.launch.layout import CLUSTER_DIR
from tests.server.rawclient import build_batch, fetch_body, produce_body, request
from tests.support.cluster import (
    batches_on_disk,
    create_replicated,
    force_leader,
    high_watermark,
    leo_on_disk,
    partition_state,
    paused,
    wait_for,
)

PRODUCE, FETCH = 0, 1
NOT_LEADER_OR_FOLLOWER = 6
FETCH_WAIT_MS = 100
SETTINGS = {
    # Long sessions and no rebalance: the controller leaves this partition's leadership to the test.
    "broker.session.timeout.ms": "60000",
    "auto.leader.rebalance.enable": "false",
    "replica.fetch.wait.max.ms": str(FETCH_WAIT_MS),
    "replica.fetch.backoff.ms": "100",
}


def _produce(bootstrap: str, topic: str, count: int, acks: int = -1) -> dict[str, Any]:
    answer = request(bootstrap, PRODUCE, 9, produce_body(topic, 0, build_batch(count), acks=acks))
    part: dict[str, Any] = answer["Responses"][0]["PartitionResponses"][0]
    return part


def _produce_when_leading(bootstrap: str) -> dict[str, Any] | None:
    """One acks=all produce of 2 records; None while the broker has not applied its leadership yet."""
    answer = _produce(bootstrap, "diverge", 2)
    if answer["ErrorCode"] == NOT_LEADER_OR_FOLLOWER:
        return None
    assert answer["ErrorCode"] == 0, answer
    return answer


def test_old_leaders_unreplicated_tail_is_replaced_by_the_new_leaders_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cluster_process(tmp_path, nodes=3, overrides=SETTINGS) as cluster:
        create_replicated(cluster, "diverge", rf=3, configs={"min.insync.replicas": "1"})
        before = partition_state(cluster.nodes[0].bootstrap, "diverge")
        old = before["LeaderId"]
        new, other = [n.node_id for n in cluster.nodes if n.node_id != old]
        # acks=all: on all three replicas
        assert _produce(cluster.nodes[old].bootstrap, "diverge", 5)["ErrorCode"] == 0
        wait_for(
            lambda: all(leo_on_disk(cluster, n, "diverge") == 5 for n in range(3)),
            what="5 records everywhere",
        )
        with paused(cluster.nodes[new].pid), paused(cluster.nodes[other].pid):
            # Let the followers' pending fetches expire (answered empty into their sockets), so the append below
            # completes no waiting fetch: offsets 5-7 in the old epoch then exist on the old leader only.
            time.sleep(3 * FETCH_WAIT_MS / 1000)
            assert _produce(cluster.nodes[old].bootstrap, "diverge", 3, acks=1)["ErrorCode"] == 0
            cluster.kill(old)
            record = force_leader(Path(cluster.data_dir) / CLUSTER_DIR, "diverge", 0, new)
        assert leo_on_disk(cluster, old, "diverge") == 8
        assert leo_on_disk(cluster, new, "diverge") == leo_on_disk(cluster, other, "diverge") == 5
        assert record.leader_epoch == before["LeaderEpoch"] + 1
        new_bootstrap = cluster.nodes[new].bootstrap
        wait_for(
            lambda: partition_state(new_bootstrap, "diverge")["LeaderEpoch"] == record.leader_epoch,
            what="the new leader's epoch in the metadata",
        )
        # The new leader's epoch takes offsets 5-8 with other records: two batches, ending above the old LEO 8,
        # so a follower that ignored epochs would simply fetch on from its own offset 8.
        first = wait_for(
            lambda: _produce_when_leading(new_bootstrap), what="a produce accepted by the new leader"
        )
        assert first["BaseOffset"] == 5, first
        assert _produce(new_bootstrap, "diverge", 2)["BaseOffset"] == 7
        expected = batches_on_disk(cluster, new, "diverge")
        assert len(expected) == 3
        assert batches_on_disk(cluster, old, "diverge")[1] not in expected
        log_path = Path(cluster.data_dir) / f"broker-{old}.log"
        monkeypatch.setenv("PYLOG_LOG_LEVEL", "INFO")  # the returning node logs its truncation at INFO
        cluster.start(old)  # same node id and log dir
        wait_for(
            lambda: all(batches_on_disk(cluster, n, "diverge") == expected for n in range(3)),
            timeout_s=20,
            what="identical logs on all replicas",
        )
        wait_for(
            lambda: old in partition_state(new_bootstrap, "diverge")["IsrNodes"],
            timeout_s=20,
            what="the old leader back in the ISR",
        )
        text = log_path.read_text(errors="replace")
        assert "log diverges from leader" in text and "truncating to 5" in text, text[-3000:]


def _follower_fetch(bootstrap: str, replica: int, offset: int, current_epoch: int, last_epoch: int) -> Any:
    body = fetch_body("recorded", 0, offset)
    body["ReplicaId"] = replica
    part = body["Topics"][0]["Partitions"][0]
    part["CurrentLeaderEpoch"], part["LastFetchedEpoch"] = current_epoch, last_epoch
    return request(bootstrap, FETCH, 12, body)["Responses"][0]["Partitions"][0]


def test_a_diverging_follower_fetch_is_not_taken_as_the_followers_log_end(tmp_path: Path) -> None:
    """The leader learns a follower's log end offset from its fetch offset -- except when the fetch diverges (or
    is fenced): such a follower is not caught up to anything, and counting it would move the high watermark
    over records it does not have. Follower A is stopped at offset 2 while B copies up to 5; a fetch in A's
    name at 5 whose LastFetchedEpoch diverges must leave the high watermark at 2; the same fetch with the
    right epoch moves it to 5."""
    with cluster_process(tmp_path, nodes=3, overrides=SETTINGS) as cluster:
        create_replicated(cluster, "recorded", rf=3, configs={"min.insync.replicas": "1"})
        leader = partition_state(cluster.nodes[0].bootstrap, "recorded")["LeaderId"]
        bootstrap = cluster.nodes[leader].bootstrap
        a, b = [n.node_id for n in cluster.nodes if n.node_id != leader]
        assert _produce(bootstrap, "recorded", 2)["ErrorCode"] == 0  # epoch 0: offsets 0-1, on all three
        record = force_leader(
            Path(cluster.data_dir) / CLUSTER_DIR, "recorded", 0, leader
        )  # same leader, epoch 1
        epoch = record.leader_epoch
        for node in cluster.nodes:
            wait_for(
                lambda n=node: partition_state(n.bootstrap, "recorded")["LeaderEpoch"] == epoch, what="epoch"
            )
        with paused(cluster.nodes[a].pid):
            assert _produce(bootstrap, "recorded", 3, acks=1)["ErrorCode"] == 0  # epoch 1: offsets 2-4
            wait_for(lambda: leo_on_disk(cluster, b, "recorded") == 5, what="follower B at 5")
            assert high_watermark(bootstrap, "recorded") == 2  # A, in the ISR, is still at 2
            answer = _follower_fetch(bootstrap, a, 5, epoch, 0)  # epoch 0 ends at 2 on the leader
            assert answer["ErrorCode"] == 0 and answer["DivergingEpoch"] == {"Epoch": 0, "EndOffset": 2}
            assert (
                _follower_fetch(bootstrap, a, 5, epoch - 1, 1)["ErrorCode"] == ErrorCode.FENCED_LEADER_EPOCH
            )
            assert high_watermark(bootstrap, "recorded") == 2
            answer = _follower_fetch(bootstrap, a, 5, epoch, epoch)
            assert answer["ErrorCode"] == 0 and answer["DivergingEpoch"]["Epoch"] == -1
            assert high_watermark(bootstrap, "recorded") == 5
