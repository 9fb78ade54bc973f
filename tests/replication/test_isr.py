"""ISR shrink and expand on a 3-node cluster with ``replica.lag.time.max.ms=1000``, and min.insync.replicas=2.

One stopped follower leaves the ISR after the lag time and acks=-1 still succeeds on the other two; with both
followers stopped the ISR falls under min.insync.replicas, so the high watermark stops (as Kafka's since
KAFKA-15583): the waiting produce ends REQUEST_TIMED_OUT with its records invisible to consumers, and the next
one is refused NOT_ENOUGH_REPLICAS before appending; continued followers catch up and rejoin the ISR, which every
broker's Metadata reports, and the high watermark then covers the timed-out batch too.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.launch import BrokerCluster, cluster_process
from tests.server.rawclient import RawConnection, build_batch, produce_body
from tests.support.cluster import create_replicated, high_watermark, isr, leo_on_disk, paused, wait_for

pytestmark = pytest.mark.timeout(120)

LAG_MS = 1000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with cluster_process(
        tmp_path_factory.mktemp("isr"), 3, overrides={"replica.lag.time.max.ms": str(LAG_MS)}
    ) as running:
        yield running


def _produce(conn: RawConnection, topic: str, timeout_ms: int = 10000) -> dict[str, Any]:
    body = produce_body(topic, 0, build_batch(2), acks=-1)
    body["TimeoutMs"] = timeout_ms
    answer: dict[str, Any] = conn.call(0, 9, body)["Responses"][0]["PartitionResponses"][0]
    return answer


def _isr_is(bootstrap: str, expected: list[int]) -> bool:
    return isr(bootstrap, "isr") == expected


def test_stopped_followers_leave_the_isr_and_min_isr_is_enforced(cluster: BrokerCluster) -> None:
    create_replicated(cluster, "isr", configs={"min.insync.replicas": "2"})
    leader, f1, f2 = cluster.nodes
    with RawConnection(leader.bootstrap, timeout_s=30) as conn:
        assert _produce(conn, "isr")["ErrorCode"] == 0
        with paused(f2.pid):
            t0 = time.monotonic()
            first = _produce(conn, "isr")
            waited = time.monotonic() - t0
            # Completed once node 2 left the ISR, well before the request timeout. Node 2 was last caught up at
            # its last fetch (up to replica.fetch.wait.max.ms = 500 ms before the produce), so it can leave as
            # early as LAG_MS - 500 ms after it.
            assert (first["ErrorCode"], first["BaseOffset"]) == (0, 2)
            assert (LAG_MS - 500) / 1000 - 0.05 <= waited < 5
            for node in cluster.nodes[:2]:
                wait_for(
                    functools.partial(_isr_is, node.bootstrap, [0, 1]), what=f"ISR [0, 1] on {node.node_id}"
                )
            with paused(f1.pid):
                after = _produce(conn, "isr", timeout_ms=3000)
                assert after["ErrorCode"] == ErrorCode.REQUEST_TIMED_OUT
                wait_for(functools.partial(_isr_is, leader.bootstrap, [0]), what="ISR [0] on the leader")
                assert high_watermark(leader.bootstrap, "isr") == 4  # appended, not visible: ISR under min
                before = _produce(conn, "isr")
                assert before["ErrorCode"] == ErrorCode.NOT_ENOUGH_REPLICAS
                assert "min.isr requirement of 2" in before["ErrorMessage"]
                assert leo_on_disk(cluster, 0, "isr") == 6  # the refused batch was not appended
        # Both continued: they catch up, rejoin, and acks=-1 works with the full ISR again.
        for node in cluster.nodes:
            wait_for(
                functools.partial(_isr_is, node.bootstrap, [0, 1, 2]), what=f"ISR back on {node.node_id}"
            )
        assert _produce(conn, "isr")["ErrorCode"] == 0
        assert high_watermark(leader.bootstrap, "isr") == 8
    assert [leo_on_disk(cluster, n, "isr") for n in range(3)] == [8, 8, 8]
