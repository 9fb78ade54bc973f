"""The acks=-1 path is driven by events, never by a wait expiring (Kafka's ``ReplicaManager``: an append
completes the delayed fetches of the partition, a follower's fetch that moves the high watermark completes the
delayed produces and the consumers' delayed fetches).

The cluster's followers fetch with ``replica.fetch.wait.max.ms`` = 60 s: a follower fetch parked on the leader
is answered within the test only if the leader's append wakes it. Each acks=-1 produce has a 20 s timeout, so
a produce that completed only on expiry answers REQUEST_TIMED_OUT instead of NONE; a consumer fetch parked with
MaxWaitMs 60 s is answered well before those 60 s only if the high watermark's move woke it. The assertions are
on outcomes, or on a bound of half the 60 s wait, so a loaded machine cannot fail them.

Both tests use one partition: a follower fetch already parked for other partitions does not cover a partition
added to the same leader's fetcher later (as in Kafka, the new one waits for the next fetch, up to
``replica.fetch.wait.max.ms``), which with 60 s would stall a second topic.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.launch import BrokerCluster, cluster_process
from tests.server.rawclient import RawConnection, build_batch, fetch_body, produce_body
from tests.support.cluster import create_replicated, high_watermark, partition_state

pytestmark = pytest.mark.timeout(120)

PRODUCE, FETCH = 0, 1
WAIT_MS = 60_000
PRODUCE_TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with cluster_process(
        tmp_path_factory.mktemp("wakeups"),
        3,
        overrides={"replica.fetch.wait.max.ms": str(WAIT_MS), "replica.lag.time.max.ms": "120000"},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def leader(cluster: BrokerCluster) -> Any:
    """The leader of the one partition of topic "wake" (created once for the module)."""
    create_replicated(cluster, "wake")
    leader_id = partition_state(cluster.bootstrap, "wake")["LeaderId"]
    return next(node for node in cluster.nodes if node.node_id == leader_id)


def _produce_all(conn: RawConnection, topic: str, count: int) -> dict[str, Any]:
    body = produce_body(topic, 0, build_batch(count), acks=-1)
    body["TimeoutMs"] = PRODUCE_TIMEOUT_MS
    answer = conn.call(PRODUCE, 9, body)
    result: dict[str, Any] = answer["Responses"][0]["PartitionResponses"][0]
    return result


def test_acks_all_produces_complete_by_wakeups_not_expiry(leader: Any) -> None:
    start = high_watermark(leader.bootstrap, "wake")
    elapsed: list[float] = []
    with RawConnection(leader.bootstrap, timeout_s=60) as conn:
        for i in range(10):
            t0 = time.monotonic()
            result = _produce_all(conn, "wake", 2)
            elapsed.append(time.monotonic() - t0)
            # Both followers' fetches were parked for up to 60 s: only the append's wake-up lets them copy the
            # batch, and only their next fetch moving the HW completes the produce before its 20 s timeout.
            assert (result["ErrorCode"], result["BaseOffset"]) == (ErrorCode.NONE, start + 2 * i), result
    assert high_watermark(leader.bootstrap, "wake") == start + 20
    print(f"acks=-1 round trips on a parked-fetch cluster: max {max(elapsed) * 1000:.1f} ms")


def test_parked_consumer_fetch_is_answered_when_the_high_watermark_moves(leader: Any) -> None:
    start = high_watermark(leader.bootstrap, "wake")
    with (
        RawConnection(leader.bootstrap, timeout_s=90) as consumer,
        RawConnection(leader.bootstrap, timeout_s=60) as producer,
    ):
        consumer.send_raw(consumer.encode(FETCH, 12, fetch_body("wake", 0, start, max_wait_ms=WAIT_MS)))
        time.sleep(0.3)  # parked by now (nothing to read yet)
        t0 = time.monotonic()
        assert _produce_all(producer, "wake", 3)["ErrorCode"] == ErrorCode.NONE
        _, answer = consumer.read_response(FETCH, 12)
        waited = time.monotonic() - t0
    part = answer["Responses"][0]["Partitions"][0]
    # Only expiry (60 s) could answer it without the HW move's wake-up.
    assert part["ErrorCode"] == ErrorCode.NONE
    assert part["HighWatermark"] == start + 3
    assert part["Records"], "the parked fetch was answered without the records"
    assert waited < WAIT_MS / 1000 / 2
