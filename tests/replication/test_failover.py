"""Leader failover with real broker processes: the controller fences a dead or stopped broker, elects a new
leader from the ISR with a new leader epoch, and a replaced leader never appends as a zombie.

The tests share one 3-node cluster (``cluster``: started once per module, made whole again by
:func:`~tests.support.cluster.heal` before each test); each test uses topics of its own. Automatic
leader rebalancing is off on it (a rebalance could race the preferred-election test); the test of that
rebalancing starts its own cluster with a 1 s check interval.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.client.admin import NewTopic
from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.protocol.batch_header import iter_batch_spans
from broker_runtime.protocol.topic_id import format_topic_id
from broker_runtime.storage.partition_metadata import read_topic_id
from tests.server.rawclient import build_batch, fetch_body, produce_body, request
from tests.support.cluster import (
    FAST,
    batches_on_disk,
    cluster_metadata,
    create_replicated,
    force_leader,
    heal,
    leo_on_disk,
    metadata,
    partition_state,
    paused,
    wait_for,
)

PRODUCE = 0
SHARED = {**FAST, "auto.leader.rebalance.enable": "false"}


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with cluster_process(tmp_path_factory.mktemp("failover"), nodes=3, overrides=SHARED) as running:
        yield running


@pytest.fixture
def cluster(shared_cluster: BrokerCluster) -> BrokerCluster:
    """The module's cluster, made whole for the test (every node running, unfenced, every partition with its
    full ISR): what the previous test killed or stopped is restored."""
    heal(shared_cluster)
    return shared_cluster


def _live(cluster: BrokerCluster, dead: set[int]) -> list[str]:
    return [n.bootstrap for n in cluster.nodes if n.node_id not in dead]


def _produce(bootstrap: str, topic: str, count: int, acks: int = -1) -> dict[str, Any]:
    answer = request(bootstrap, PRODUCE, 9, produce_body(topic, 0, build_batch(count), acks=acks))
    part: dict[str, Any] = answer["Responses"][0]["PartitionResponses"][0]
    return part


def test_sigkill_of_the_leader_elects_a_new_leader_from_the_isr_with_a_new_epoch(
    cluster: BrokerCluster,
) -> None:
    create_replicated(cluster, "failover", rf=3, configs={"min.insync.replicas": "2"})
    before = partition_state(cluster.nodes[1].bootstrap, "failover")
    leader = before["LeaderId"]
    assert _produce(cluster.nodes[leader].bootstrap, "failover", 2)["ErrorCode"] == 0
    started = time.monotonic()
    cluster.kill(leader)
    survivor = _live(cluster, {leader})[0]

    def moved() -> dict[str, Any] | None:
        state = partition_state(survivor, "failover")
        return state if state["LeaderId"] not in (leader, -1) else None

    after = wait_for(moved, timeout_s=10, what="a new leader")
    elapsed = time.monotonic() - started
    assert after["LeaderEpoch"] > before["LeaderEpoch"]
    assert leader not in after["IsrNodes"]
    assert after["OfflineReplicas"] == [leader]
    assert leader not in [b["NodeId"] for b in metadata(survivor)["Brokers"]]
    # A dead process is seen through its lock, well before the 1.5 s session would expire.
    assert elapsed < 1.5, elapsed
    new_leader = cluster.nodes[after["LeaderId"]].bootstrap
    answer = wait_for(lambda: _produce(new_leader, "failover", 1), what="acks=all on the new leader")
    assert answer["ErrorCode"] == 0 and answer["BaseOffset"] == 2, answer


def test_a_stopped_leader_is_fenced_after_its_session_and_never_appends_as_a_zombie(
    cluster: BrokerCluster,
) -> None:
    create_replicated(cluster, "zombie", rf=3)
    leader = partition_state(cluster.nodes[0].bootstrap, "zombie")["LeaderId"]
    zombie = cluster.nodes[leader]
    assert _produce(zombie.bootstrap, "zombie", 1, acks=1)["ErrorCode"] == 0
    survivor = _live(cluster, {leader})[0]
    with paused(zombie.pid):
        state = wait_for(
            lambda: (s := partition_state(survivor, "zombie"))["LeaderId"] not in (leader, -1) and s,
            timeout_s=10,
            what="fencing of the stopped leader",
        )
        assert cluster_metadata(cluster).brokers[leader].fenced is True
    # The first thing the woken broker is asked: an acks=1 write, as its old leader.
    answer = _produce(zombie.bootstrap, "zombie", 1, acks=1)
    assert answer["ErrorCode"] == 6, answer  # NOT_LEADER_OR_FOLLOWER
    new_leader = cluster.nodes[state["LeaderId"]].bootstrap
    assert _produce(new_leader, "zombie", 1)["ErrorCode"] == 0
    # The woken broker is unfenced again and follows the new leader.
    wait_for(lambda: cluster_metadata(cluster).brokers[leader].fenced is False, what="unfenced again")
    wait_for(lambda: leader in partition_state(survivor, "zombie")["IsrNodes"], what="back in the ISR")


def test_the_controller_role_moves_when_the_controller_dies(cluster: BrokerCluster) -> None:
    create_replicated(cluster, "ctl", rf=3)
    controller = wait_for(lambda: cluster_metadata(cluster).controller, what="a controller")
    cluster.kill(controller.id)
    survivor = _live(cluster, {controller.id})[0]
    after = wait_for(
        lambda: (c := cluster_metadata(cluster).controller) and c.id != controller.id and c,
        timeout_s=10,
        what="a new controller",
    )
    assert after.epoch > controller.epoch
    assert metadata(survivor)["ControllerId"] == after.id
    # The new controller does the work: the dead node is fenced.
    wait_for(
        lambda: cluster_metadata(cluster).brokers[controller.id].fenced is True,
        what="the old controller fenced",
    )


def _kill_leader_alone_in_the_isr(cluster: BrokerCluster, topic: str) -> tuple[int, int]:
    """A topic of two replicas: stop the follower until it is fenced (out of the ISR), write one record to the
    leader alone, kill the leader, continue the follower; returns (dead leader, follower)."""
    state = partition_state(cluster.nodes[0].bootstrap, topic)
    leader = state["LeaderId"]
    (follower,) = (r for r in state["ReplicaNodes"] if r != leader)
    with paused(cluster.nodes[follower].pid):
        # The leader drops the stopped follower from the ISR only after replica.lag.time.max.ms (30 s by
        # default); its fencing removes it at once.
        wait_for(
            lambda: partition_state(cluster.nodes[leader].bootstrap, topic)["IsrNodes"] == [leader],
            timeout_s=10,
            what="ISR shrink to the leader",
        )
        assert _produce(cluster.nodes[leader].bootstrap, topic, 1)["ErrorCode"] == 0
        cluster.kill(leader)
    return leader, follower


def test_a_partition_whose_isr_is_only_the_dead_leader_goes_offline_until_it_returns(
    cluster: BrokerCluster,
) -> None:
    """unclean.leader.election.enable=false: no replica outside the ISR becomes leader."""
    create_replicated(cluster, "offline", rf=2)
    leader, follower = _kill_leader_alone_in_the_isr(cluster, "offline")
    survivor = cluster.nodes[follower].bootstrap
    state = wait_for(
        lambda: (s := partition_state(survivor, "offline"))["LeaderId"] == -1 and s,
        what="the partition offline",
    )
    assert state["ErrorCode"] == 5  # LEADER_NOT_AVAILABLE
    assert state["IsrNodes"] == [leader]
    # ... and stays offline once the follower is back and unfenced: it is outside the ISR.
    wait_for(
        lambda: follower in [b["NodeId"] for b in metadata(survivor)["Brokers"]], what="the follower unfenced"
    )
    assert partition_state(survivor, "offline")["LeaderId"] == -1


def test_unclean_leader_election_when_enabled_elects_a_live_out_of_sync_replica(
    cluster: BrokerCluster,
) -> None:
    create_replicated(cluster, "unclean", rf=2, configs={"unclean.leader.election.enable": "true"})
    _, follower = _kill_leader_alone_in_the_isr(cluster, "unclean")
    survivor = cluster.nodes[follower].bootstrap
    state = wait_for(
        lambda: (s := partition_state(survivor, "unclean"))["LeaderId"] == follower and s,
        what="unclean election of the follower",
    )
    assert state["IsrNodes"] == [follower]
    # Said by the controller, whichever node it is.
    logs = [(Path(cluster.data_dir) / f"broker-{n.node_id}.log").read_text() for n in cluster.nodes]
    assert any("unclean-0: UNCLEAN leader election" in log for log in logs)


def test_preferred_leader_comes_back_by_elect_leaders_from_confluent_kafka_admin(
    cluster: BrokerCluster,
) -> None:
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient

    create_replicated(cluster, "preferred", rf=3)
    state = partition_state(cluster.nodes[0].bootstrap, "preferred")
    preferred = state["ReplicaNodes"][0]
    assert state["LeaderId"] == preferred
    other = _live(cluster, {preferred})[0]
    with paused(cluster.nodes[preferred].pid):
        wait_for(
            lambda: partition_state(other, "preferred")["LeaderId"] not in (preferred, -1),
            timeout_s=10,
            what="leadership moved away from the stopped preferred leader",
        )
    wait_for(
        lambda: preferred in partition_state(other, "preferred")["IsrNodes"],
        what="the preferred replica back in the ISR",
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    future = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("preferred", 0)])
    results = future.result(timeout=15)
    assert list(results.values()) == [None], results  # None: elected
    after = wait_for(
        lambda: (s := partition_state(other, "preferred"))["LeaderId"] == preferred and s,
        what="the preferred replica leading again",
    )
    assert after["LeaderEpoch"] >= state["LeaderEpoch"] + 2
    again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("preferred", 0)]).result(timeout=15)
    assert "ELECTION_NOT_NEEDED" in str(next(iter(again.values()))), again


def test_auto_leader_rebalance_moves_leadership_back_to_the_preferred_replica(tmp_path: Path) -> None:
    overrides = {**FAST, "leader.imbalance.check.interval.seconds": "1"}
    with cluster_process(tmp_path, nodes=3, overrides=overrides) as cluster:
        create_replicated(cluster, "rebalance", rf=3)
        preferred = partition_state(cluster.nodes[0].bootstrap, "rebalance")["ReplicaNodes"][0]
        other = _live(cluster, {preferred})[0]
        with paused(cluster.nodes[preferred].pid):
            wait_for(
                lambda: partition_state(other, "rebalance")["LeaderId"] not in (preferred, -1),
                timeout_s=10,
                what="leadership moved away",
            )
        wait_for(
            lambda: partition_state(other, "rebalance")["LeaderId"] == preferred,
            timeout_s=20,
            what="automatic preferred leader election",
        )


def test_diverging_logs_end_identical_after_failover_and_the_old_leaders_tail_is_truncated(
    cluster: BrokerCluster,
) -> None:
    """The old leader wrote acks=1 records no follower fetched, then died; a follower became leader in a new
    epoch and took other records at the same offsets. When the old leader returns, its fetch (with its
    LastFetchedEpoch) is answered DivergingEpoch: it truncates its tail and copies the new leader's records, so
    all three logs end byte-identical."""
    create_replicated(cluster, "diverge", rf=3)
    old = partition_state(cluster.nodes[0].bootstrap, "diverge")["LeaderId"]
    followers = [n for n in cluster.nodes if n.node_id != old]
    assert _produce(cluster.nodes[old].bootstrap, "diverge", 5)["ErrorCode"] == 0  # acks=all: everywhere
    with paused(followers[0].pid), paused(followers[1].pid):
        # A fetch the followers sent before they stopped waits at the leader for up to
        # replica.fetch.wait.max.ms; were the records appended meanwhile, its answer would carry them into
        # the stopped followers' socket buffers. Let those fetches expire empty first.
        time.sleep(1.0)
        assert _produce(cluster.nodes[old].bootstrap, "diverge", 3, acks=1)["ErrorCode"] == 0
        cluster.kill(old)
    assert leo_on_disk(cluster, old, "diverge") == 8
    survivor = followers[0].bootstrap
    state = wait_for(
        lambda: (s := partition_state(survivor, "diverge"))["LeaderId"] not in (old, -1) and s,
        what="a new leader",
    )
    new_leader = cluster.nodes[state["LeaderId"]].bootstrap
    answer = wait_for(lambda: _produce(new_leader, "diverge", 2), what="acks=all on the new leader")
    assert answer["ErrorCode"] == 0 and answer["BaseOffset"] == 5, answer
    cluster.start(old)
    wait_for(
        lambda: old in partition_state(survivor, "diverge")["IsrNodes"],
        timeout_s=20,
        what="the old leader back in the ISR",
    )
    expected = batches_on_disk(cluster, state["LeaderId"], "diverge")
    assert len(expected) == 2
    wait_for(
        lambda: all(batches_on_disk(cluster, n, "diverge") == expected for n in range(3)),
        what="identical logs on all replicas",
    )


def test_a_rolling_restart_under_acks_all_load_loses_nothing_acked(cluster: BrokerCluster) -> None:
    """Each node in turn is stopped cleanly (its leaderships move first) and started again while a
    confluent-kafka idempotent producer writes with acks=all; every acknowledged record is read back exactly
    once."""
    import threading
    from collections import Counter

    from confluent_kafka import Consumer, Producer, TopicPartition

    create_replicated(cluster, "rolling", partitions=3, rf=3, configs={"min.insync.replicas": "2"})
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    acked: list[bytes] = []
    failed: list[Any] = []
    stop = threading.Event()

    def on_delivery(err: Any, msg: Any) -> None:
        (failed if err is not None else acked).append(err if err is not None else msg.value())

    def produce() -> None:
        n = 0
        while not stop.is_set():
            for _ in range(50):
                producer.produce("rolling", str(n).encode(), key=str(n % 7).encode(), on_delivery=on_delivery)
                n += 1
            producer.poll(0.05)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    addresses = {n.node_id: n.bootstrap for n in cluster.nodes}

    def more_acked(what: str) -> None:
        """Wait (no fixed sleep) until the load has been acknowledged further: 250 records more."""
        start = len(acked)
        wait_for(lambda: len(acked) >= start + 250 or failed, timeout_s=30, what=f"250 records acked {what}")

    try:
        for node in cluster.nodes:
            more_acked("by the whole cluster")
            node.proc.terminate()
            node.proc.wait(30)
            other = next(a for i, a in addresses.items() if i != node.node_id)
            more_acked(f"with node {node.node_id} stopped")
            addresses[node.node_id] = cluster.start(node.node_id)
            for p in range(3):
                wait_for(
                    lambda p=p, node=node, at=other: (
                        node.node_id in partition_state(at, "rolling", p)["IsrNodes"]
                    ),
                    timeout_s=30,
                    what=f"node {node.node_id} back in the ISR of partition {p}",
                )
    finally:
        stop.set()
        thread.join(30)
    assert producer.flush(60) == 0
    assert failed == [], failed[:3]
    assert len(acked) > 1000
    consumer = Consumer(
        {
            "bootstrap.servers": ",".join(addresses.values()),
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    ends = {p: consumer.get_watermark_offsets(TopicPartition("rolling", p), timeout=10)[1] for p in range(3)}
    consumer.assign([TopicPartition("rolling", p, 0) for p in range(3)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    positions = dict.fromkeys(range(3), 0)
    while any(positions[p] < ends[p] for p in range(3)) and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            continue
        seen.append(msg.value())
        positions[msg.partition()] = msg.offset() + 1
    consumer.close()
    counts = Counter(seen)
    assert [v for v, c in counts.items() if c > 1] == [], "duplicates"
    assert set(acked) <= set(counts), f"{len(set(acked) - set(counts))} acked records lost"


def test_new_topics_are_placed_on_unfenced_brokers_only(cluster: BrokerCluster) -> None:
    from broker_runtime.errors import KafkaError
    from broker_runtime.launch import create_topic

    cluster.kill(2)
    live = _live(cluster, {2})
    wait_for(lambda: cluster_metadata(cluster).brokers[2].fenced, what="node 2 fenced")
    with pytest.raises(KafkaError, match="INVALID_REPLICATION_FACTOR"):
        create_topic(",".join(live), "three", 1, replication_factor=3)
    create_topic(",".join(live), "two", 4, replication_factor=2)
    for p in range(4):
        state = partition_state(live[0], "two", p)
        assert sorted(state["ReplicaNodes"]) == [0, 1] and state["OfflineReplicas"] == []


def test_a_replica_of_a_topic_deleted_and_created_again_while_its_node_was_away_is_moved_aside_as_stray(
    cluster: BrokerCluster,
) -> None:
    """Kafka's stray replica (``LogManager.isStrayKraftReplica``): the restarted node's directory names the old
    topic id; it is never served, renamed ``-stray`` (kept) with a WARNING naming both ids, and the replica of the
    new topic is created empty and caught up from the leader. Partition 1 of the new topic is placed on the other
    nodes only: the restarted node's old directory of it goes aside as stray too."""
    create_replicated(cluster, "reborn", partitions=2, rf=3)
    controller = wait_for(lambda: cluster_metadata(cluster).controller, what="a controller").id
    away = next(n.node_id for n in cluster.nodes if n.node_id != controller)
    leader = partition_state(cluster.nodes[controller].bootstrap, "reborn")["LeaderId"]
    assert _produce(cluster.nodes[leader].bootstrap, "reborn", 5)["ErrorCode"] == 0
    wait_for(
        lambda: leo_on_disk(cluster, away, "reborn") == 5, what="the old incarnation on the node going away"
    )
    old_id = cluster_metadata(cluster).topics["reborn"].topic_id
    cluster.stop(away)
    wait_for(lambda: cluster_metadata(cluster).brokers[away].fenced, what=f"node {away} fenced")
    others = [n.node_id for n in cluster.nodes if n.node_id != away]
    with KafkaClient(cluster.nodes[controller].bootstrap) as client:
        assert client.admin.delete_topics(["reborn"]) == {"reborn": None}
        created = client.admin.create_topics(
            [NewTopic("reborn", assignments={0: [away, *others], 1: others})]
        )
        assert created == {"reborn": 0}, created
    new_id = cluster_metadata(cluster).topics["reborn"].topic_id
    assert new_id != old_id
    new_leader = partition_state(cluster.nodes[controller].bootstrap, "reborn")["LeaderId"]
    assert new_leader in others
    wait_for(
        lambda: _produce(cluster.nodes[new_leader].bootstrap, "reborn", 2)["ErrorCode"] == 0, what="produce"
    )

    cluster.start(away)
    wait_for(
        lambda: away in partition_state(cluster.nodes[controller].bootstrap, "reborn")["IsrNodes"],
        what="the restarted node back in the new topic's ISR",
    )
    log_dir = Path(cluster.data_dir) / "kafka-logs" / f"node-{away}"
    assert read_topic_id(log_dir / "reborn-0") == new_id
    assert leo_on_disk(cluster, away, "reborn") == 2, "the new incarnation's records only"
    (aside,) = log_dir.glob("reborn-0.*-stray")
    assert read_topic_id(aside) == old_id
    wait_for(lambda: not (log_dir / "reborn-1").exists(), what="the unhosted old partition moved aside")
    (aside,) = log_dir.glob("reborn-1.*-stray")
    assert read_topic_id(aside) == old_id
    said = cluster.nodes[away].log_path.read_text(encoding="utf-8", errors="replace")
    assert any(
        "stray" in line and format_topic_id(old_id) in line and format_topic_id(new_id) in line
        for line in said.splitlines()
        if "WARNING" in line
    ), "a WARNING naming both topic ids"
    # Led by the restarted node, the partition answers the new incarnation's records and nothing else.
    force_leader(Path(cluster.data_dir) / "kafka-logs", "reborn", 0, away)
    wait_for(
        lambda: partition_state(cluster.nodes[away].bootstrap, "reborn")["LeaderId"] == away,
        what="the restarted node leading",
    )
    fetched = wait_for(
        lambda: (
            (
                p := request(cluster.nodes[away].bootstrap, 1, 12, fetch_body("reborn", 0, 0))["Responses"][
                    0
                ]["Partitions"][0]
            )["ErrorCode"]
            == 0
            and p
        )
    )
    assert fetched["HighWatermark"] == 2
    assert [h.next_offset for _, h in iter_batch_spans(bytes(fetched["Records"]))] == [2]
