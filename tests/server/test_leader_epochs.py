"""Leader epochs on the wire, raw sockets against real broker processes (a 3-node cluster whose partition's
epoch is moved on with the controller's metadata write): CurrentLeaderEpoch fencing of Fetch and ListOffsets,
Fetch v12 DivergingEpoch, and OffsetForLeaderEpoch (API 23) answered from the leader's epoch cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.launch.layout import CLUSTER_DIR
from tests.server.rawclient import build_batch, fetch_body, produce_body, request
from tests.support.cluster import create_replicated, force_leader, metadata, partition_state, wait_for

PRODUCE, FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH = 0, 1, 2, 23
TOPIC = "epochs"
FENCED, UNKNOWN, NOT_LEADER = (
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
)


class Epochs:
    """The cluster and what the module fixture wrote: epoch 0 holds offsets 0-2, epoch 1 offsets 3-4, epoch 2
    (current, same leader) offset 5; LEO 6."""

    def __init__(self, cluster: BrokerCluster, leader: int) -> None:
        self.cluster = cluster
        self.leader = cluster.nodes[leader].bootstrap
        self.follower = next(n.bootstrap for n in cluster.nodes if n.node_id != leader)


def _bump_epoch(cluster: BrokerCluster, leader: int, epoch: int) -> None:
    """A new leader epoch for the same leader (as a controller re-electing it), applied on every node."""
    record = force_leader(Path(cluster.data_dir) / CLUSTER_DIR, TOPIC, 0, leader)
    assert record.leader_epoch == epoch, record
    for node in cluster.nodes:  # a Metadata request makes a broker apply the metadata file at once
        wait_for(lambda n=node: partition_state(n.bootstrap, TOPIC)["LeaderEpoch"] == epoch, what="new epoch")


def _produce(bootstrap: str, count: int) -> int:
    answer = request(bootstrap, PRODUCE, 9, produce_body(TOPIC, 0, build_batch(count), acks=-1))
    part = answer["Responses"][0]["PartitionResponses"][0]
    assert part["ErrorCode"] == 0, part
    base: int = part["BaseOffset"]
    return base


@pytest.fixture(scope="module")
def epochs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Epochs]:
    overrides = {"auto.leader.rebalance.enable": "false", "broker.session.timeout.ms": "60000"}
    with cluster_process(tmp_path_factory.mktemp("cluster"), nodes=3, overrides=overrides) as cluster:
        create_replicated(cluster, TOPIC, rf=3)
        leader = partition_state(cluster.nodes[0].bootstrap, TOPIC)["LeaderId"]
        assert partition_state(cluster.nodes[0].bootstrap, TOPIC)["LeaderEpoch"] == 0
        bootstrap = cluster.nodes[leader].bootstrap
        assert _produce(bootstrap, 3) == 0
        _bump_epoch(cluster, leader, 1)
        assert _produce(bootstrap, 2) == 3
        _bump_epoch(cluster, leader, 2)
        assert _produce(bootstrap, 1) == 5
        yield Epochs(cluster, leader)


def _fetch(bootstrap: str, version: int, current_epoch: int, offset: int = 0, last_fetched: int = -1) -> Any:
    body = fetch_body(TOPIC, 0, offset)
    part = body["Topics"][0]["Partitions"][0]
    part["CurrentLeaderEpoch"] = current_epoch
    part["LastFetchedEpoch"] = last_fetched
    return request(bootstrap, FETCH, version, body)["Responses"][0]["Partitions"][0]


@pytest.mark.parametrize("version", [9, 12])
def test_fetch_fences_a_stale_epoch_and_refuses_an_unknown_one(epochs: Epochs, version: int) -> None:
    assert _fetch(epochs.leader, version, 1)["ErrorCode"] == FENCED
    assert _fetch(epochs.leader, version, 0)["ErrorCode"] == FENCED
    assert _fetch(epochs.leader, version, 3)["ErrorCode"] == UNKNOWN
    for current in (2, -1):
        answer = _fetch(epochs.leader, version, current)
        assert answer["ErrorCode"] == 0 and answer["HighWatermark"] == 6 and len(answer["Records"]) > 0
    # A replica that does not lead: the epoch is checked first (Kafka's order), then leadership.
    assert _fetch(epochs.follower, version, 1)["ErrorCode"] == FENCED
    assert _fetch(epochs.follower, version, 3)["ErrorCode"] == UNKNOWN
    assert _fetch(epochs.follower, version, 2)["ErrorCode"] == NOT_LEADER
    assert _fetch(epochs.follower, version, -1)["ErrorCode"] == NOT_LEADER


def test_fetch_before_v9_has_no_epoch_to_check(epochs: Epochs) -> None:
    assert _fetch(epochs.leader, 8, 1)["ErrorCode"] == 0  # the field does not exist in v8: not sent


@pytest.mark.parametrize(
    ("last_fetched", "offset", "code", "diverging"),
    [
        (0, 3, 0, None),  # epoch 0 ends at 3 here too: no divergence
        (0, 5, 0, (0, 3)),  # the fetcher has epoch 0 records beyond where the leader's epoch 0 ended
        (1, 6, 0, (1, 5)),
        (2, 6, 0, None),  # the current epoch ends at the LEO
        (3, 6, ErrorCode.OFFSET_OUT_OF_RANGE, None),  # an epoch the leader never had: it cannot place it
    ],
)
def test_fetch_v12_answers_diverging_epoch_without_records(
    epochs: Epochs, last_fetched: int, offset: int, code: int, diverging: tuple[int, int] | None
) -> None:
    answer = _fetch(epochs.leader, 12, 2, offset=offset, last_fetched=last_fetched)
    assert answer["ErrorCode"] == code, answer
    got = answer["DivergingEpoch"]
    assert (got["Epoch"], got["EndOffset"]) == (diverging or (-1, -1))
    if diverging is not None or code:
        assert len(answer["Records"] or b"") == 0


def _list_offsets(bootstrap: str, version: int, current_epoch: int, timestamp: int) -> Any:
    part = {"PartitionIndex": 0, "CurrentLeaderEpoch": current_epoch, "Timestamp": timestamp}
    body = {"ReplicaId": -1, "IsolationLevel": 0, "Topics": [{"Name": TOPIC, "Partitions": [part]}]}
    return request(bootstrap, LIST_OFFSETS, version, body)["Topics"][0]["Partitions"][0]


@pytest.mark.parametrize("version", [4, 7])
def test_list_offsets_fences_a_stale_epoch_and_refuses_an_unknown_one(epochs: Epochs, version: int) -> None:
    assert _list_offsets(epochs.leader, version, 1, -1)["ErrorCode"] == FENCED
    assert _list_offsets(epochs.leader, version, 3, -1)["ErrorCode"] == UNKNOWN
    assert _list_offsets(epochs.follower, version, 1, -1)["ErrorCode"] == FENCED
    assert _list_offsets(epochs.follower, version, 2, -1)["ErrorCode"] == NOT_LEADER
    latest = _list_offsets(epochs.leader, version, 2, -1)
    assert (latest["ErrorCode"], latest["Offset"], latest["LeaderEpoch"]) == (0, 6, 2)
    earliest = _list_offsets(epochs.leader, version, -1, -2)
    assert (earliest["ErrorCode"], earliest["Offset"], earliest["LeaderEpoch"]) == (0, 0, 0)
    by_time = _list_offsets(epochs.leader, version, 2, 0)  # the first record: written in epoch 0
    assert (by_time["ErrorCode"], by_time["Offset"], by_time["LeaderEpoch"]) == (0, 0, 0)


def _offset_for_leader_epoch(
    bootstrap: str, version: int, current: int, epoch: int, topic: str = TOPIC
) -> Any:
    part = {"Partition": 0, "CurrentLeaderEpoch": current, "LeaderEpoch": epoch}
    body = {"ReplicaId": -1, "Topics": [{"Topic": topic, "Partitions": [part]}]}
    answer = request(bootstrap, OFFSET_FOR_LEADER_EPOCH, version, body)["Topics"][0]
    assert answer["Topic"] == topic
    return answer["Partitions"][0]


@pytest.mark.parametrize("version", [2, 3, 4])
@pytest.mark.parametrize(
    ("epoch", "expected"),
    [(0, (0, 3)), (1, (1, 5)), (2, (2, 6)), (3, (-1, -1)), (-1, (-1, -1))],
)
def test_offset_for_leader_epoch_answers_from_the_leaders_epoch_cache(
    epochs: Epochs, version: int, epoch: int, expected: tuple[int, int]
) -> None:
    answer = _offset_for_leader_epoch(epochs.leader, version, 2, epoch)
    assert (answer["ErrorCode"], answer["Partition"]) == (0, 0)
    assert (answer["LeaderEpoch"], answer["EndOffset"]) == expected


def test_offset_for_leader_epoch_old_versions_and_fencing(epochs: Epochs) -> None:
    assert _offset_for_leader_epoch(epochs.leader, 0, -1, 1)["EndOffset"] == 5  # v0: no epoch in the answer
    assert (_offset_for_leader_epoch(epochs.leader, 1, -1, 1)["LeaderEpoch"]) == 1
    assert _offset_for_leader_epoch(epochs.leader, 4, 1, 1)["ErrorCode"] == FENCED
    assert _offset_for_leader_epoch(epochs.leader, 4, 3, 1)["ErrorCode"] == UNKNOWN
    assert _offset_for_leader_epoch(epochs.follower, 4, 2, 1)["ErrorCode"] == NOT_LEADER
    assert _offset_for_leader_epoch(epochs.follower, 4, 1, 1)["ErrorCode"] == FENCED
    missing = _offset_for_leader_epoch(epochs.leader, 4, -1, 1, topic="no-such-topic")
    assert (missing["ErrorCode"], missing["EndOffset"]) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)


def test_api_versions_advertises_offset_for_leader_epoch(epochs: Epochs) -> None:
    keys = {k["ApiKey"]: k for k in request(epochs.leader, 18, 3, {})["ApiKeys"]}
    assert (keys[23]["MinVersion"], keys[23]["MaxVersion"]) == (0, 4)
    assert metadata(epochs.leader, [TOPIC])["Topics"][0]["Partitions"][0]["LeaderEpoch"] == 2
