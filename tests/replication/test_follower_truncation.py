"""A follower whose log end fell below its leader's log start (retention ran on the leader while the follower
was stopped) truncates its log fully, starts at the leader's log start, catches up and rejoins the ISR
(Kafka's ``truncateFullyAndStartAt`` on OFFSET_OUT_OF_RANGE).

Two real broker processes, one partition with replicas [0, 1] (node 0 leads). ``segment.bytes`` is chosen so
that every batch fills a segment of its own, and ``replica.fetch.max.bytes`` so that a follower fetch carries
one batch: the layout of both replicas is then known in advance.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_runtime.launch import BrokerCluster, cluster_process
from tests.server.rawclient import RawConnection, build_batch, produce_body, request
from tests.support.cluster import create_replicated, isr, leo_on_disk, paused, wait_for

pytestmark = pytest.mark.timeout(120)

LIST_OFFSETS = 2
BATCHES = 10
RECORDS_PER_BATCH = 3
#: Batches kept by retention.bytes on the leader (the rest, BATCHES - KEPT, are deleted).
KEPT = 3


def _batch() -> bytearray:
    return build_batch(RECORDS_PER_BATCH, value_size=180)


BATCH_SIZE = len(_batch())
SEGMENT_BYTES = BATCH_SIZE + BATCH_SIZE // 2  # one batch per segment


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    overrides = {
        "replica.lag.time.max.ms": "1000",
        "log.retention.check.interval.ms": "100",
        "replica.fetch.max.bytes": str(SEGMENT_BYTES),
        "replica.fetch.backoff.ms": "100",
    }
    with cluster_process(tmp_path_factory.mktemp("truncate-fully"), 2, overrides=overrides) as running:
        yield running


def _earliest(bootstrap: str, topic: str) -> int:
    body = {
        "ReplicaId": -1,
        "IsolationLevel": 0,
        "Topics": [
            {"Name": topic, "Partitions": [{"PartitionIndex": 0, "CurrentLeaderEpoch": -1, "Timestamp": -2}]}
        ],
    }
    answer = request(bootstrap, LIST_OFFSETS, 7, body)["Topics"][0]["Partitions"][0]
    assert answer["ErrorCode"] == 0, answer
    offset: int = answer["Offset"]
    return offset


def _segment_bases(cluster: BrokerCluster, node_id: int, topic: str) -> list[int]:
    directory = Path(cluster.data_dir) / "kafka-logs" / f"node-{node_id}" / f"{topic}-0"
    return sorted(int(p.stem) for p in directory.glob("*.log"))


def test_follower_below_the_leaders_log_start_restarts_there_and_catches_up(cluster: BrokerCluster) -> None:
    topic = "trunc"
    create_replicated(
        cluster,
        topic,
        rf=2,
        # Retention keeps the newest KEPT segments: deleting one more would leave less than retention.bytes.
        configs={"segment.bytes": str(SEGMENT_BYTES), "retention.bytes": str(KEPT * BATCH_SIZE)},
    )
    leader, follower = cluster.nodes
    assert isr(leader.bootstrap, topic) == [0, 1]
    total = BATCHES * RECORDS_PER_BATCH
    expected_start = (BATCHES - KEPT) * RECORDS_PER_BATCH
    with paused(follower.pid):
        with RawConnection(leader.bootstrap) as conn:
            for i in range(BATCHES):
                answer = conn.call(0, 9, produce_body(topic, 0, _batch(), acks=1))
                part = answer["Responses"][0]["PartitionResponses"][0]
                assert (part["ErrorCode"], part["BaseOffset"]) == (0, i * RECORDS_PER_BATCH), part
        # The stopped follower leaves the ISR, the high watermark reaches the leader's log end, and retention
        # deletes the oldest segments: the leader's log now starts above the follower's log end (0).
        wait_for(lambda: isr(leader.bootstrap, topic) == [0], what="follower out of the ISR")
        wait_for(
            lambda: _earliest(leader.bootstrap, topic) == expected_start,
            what=f"leader log start {expected_start}",
        )
        # the files go right after the log start moves (inside the same retention step, as Kafka's deletion
        # follows its logStartOffset): waited for, not read at the same instant
        kept = [expected_start + RECORDS_PER_BATCH * k for k in range(KEPT)]
        wait_for(lambda: _segment_bases(cluster, 0, topic) == kept, what=f"leader segments {kept}")
        assert leo_on_disk(cluster, 1, topic) == 0
    # Continued: the follower's fetch at 0 is out of range; it starts over at the leader's log start.
    wait_for(lambda: leo_on_disk(cluster, 1, topic) == total, what=f"follower log end {total}")
    wait_for(lambda: isr(leader.bootstrap, topic) == [0, 1], what="follower back in the ISR")
    assert _segment_bases(cluster, 1, topic) == _segment_bases(cluster, 0, topic)
    leader_dir = Path(cluster.data_dir) / "kafka-logs" / "node-0" / f"{topic}-0"
    follower_dir = Path(cluster.data_dir) / "kafka-logs" / "node-1" / f"{topic}-0"
    for path in sorted(leader_dir.glob("*.log")):
        assert (follower_dir / path.name).read_bytes() == path.read_bytes()
