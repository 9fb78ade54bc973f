"""ACLs in a cluster: a binding created through one node is enforced by the other (the bindings live in the
cluster metadata every node polls), replication keeps working with an authorizer on (followers log in to the
inter-broker listener as ``User:broker``, a super user, as Kafka's brokers need CLUSTER_ACTION), and a client
logged in on that listener without CLUSTER_ACTION cannot pose as a follower: its Fetch with the follower's
ReplicaId is refused and does not move the high watermark. Real broker processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection, build_batch, fetch_body, plain_login, produce_body, request
from tests.support.cluster import (
    cluster_metadata,
    create_replicated,
    high_watermark,
    isr,
    metadata,
    partition_state,
    paused,
    wait_for,
)

pytestmark = pytest.mark.timeout(240)


INTERNAL_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-pw" user_broker="broker-pw" user_alice="alice-pw";'
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    overrides = {
        # clients on PLAINTEXT (User:ANONYMOUS), the brokers among themselves on INTERNAL as User:broker
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": INTERNAL_JAAS,
        "authorizer.class.name": "pylog.StandardAuthorizer",
        "super.users": "User:broker",
        # resources without bindings stay open to User:ANONYMOUS; the cluster gets one binding below
        "allow.everyone.if.no.acl.found": "true",
    }
    with cluster_process(
        tmp_path_factory.mktemp("acl-cluster"), 2, overrides=overrides, startup_timeout_s=90
    ) as running:
        # A binding on the cluster resource closes it to everyone else (allow.everyone.if.no.acl.found only
        # opens resources no binding names), CLUSTER_ACTION included; ANONYMOUS keeps ALTER for the ACL APIs.
        answer = _create_acl(running.nodes[0].bootstrap, 4, "kafka-cluster", "User:ANONYMOUS", 7, 3)  # ALTER
        assert answer["Results"] == [{"ErrorCode": 0, "ErrorMessage": None}]
        yield running


def _create_acl(
    bootstrap: str, resource_type: int, name: str, principal: str, operation: int, permission: int
) -> dict[str, Any]:
    creation = {
        "ResourceType": resource_type,
        "ResourceName": name,
        "ResourcePatternType": 3,  # LITERAL
        "Principal": principal,
        "Host": "*",
        "Operation": operation,
        "PermissionType": permission,  # 2 DENY, 3 ALLOW
    }
    return request(bootstrap, ApiKey.CREATE_ACLS, 3, {"Creations": [creation]})


def _internal_address(cluster: BrokerCluster, node_id: int) -> str:
    """``host:port`` of a node's INTERNAL listener, as it registered it in the cluster metadata."""
    host, port = dict(cluster_metadata(cluster).brokers[node_id].endpoints)["INTERNAL"]
    return f"{host}:{port}"


def _deny_write(bootstrap: str, topic: str) -> dict[str, Any]:
    return _create_acl(bootstrap, 2, topic, "User:ANONYMOUS", 4, 2)  # TOPIC, WRITE, DENY


def test_binding_created_on_one_node_is_enforced_by_the_other(cluster: BrokerCluster, tmp_path: Path) -> None:
    node0, node1 = cluster.nodes[0].bootstrap, cluster.nodes[1].bootstrap
    create_replicated(cluster, "acl-open", rf=2)
    create_replicated(cluster, "acl-closed", rf=2)
    answer = _deny_write(node0, "acl-closed")
    assert answer["Results"] == [{"ErrorCode": 0, "ErrorMessage": None}]

    def refused_on_node1() -> bool:
        topic = metadata(node1, ["acl-closed"])["Topics"][0]
        # the DENY WRITE binding makes the topic one with ACLs, and none allows DESCRIBE
        return bool(topic["ErrorCode"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED)

    wait_for(refused_on_node1, what="node 1 enforces the binding made on node 0")
    assert metadata(node1, ["acl-open"])["Topics"][0]["ErrorCode"] == 0
    # followers still fetch (inter-broker listener, User:broker): the open topic's replicas stay in sync
    assert isr(node1, "acl-open") == [0, 1]
    described = request(
        node1,
        ApiKey.DESCRIBE_ACLS,
        3,
        {
            "ResourceTypeFilter": 2,  # TOPIC
            "ResourceNameFilter": None,
            "PatternTypeFilter": 1,
            "PrincipalFilter": None,
            "HostFilter": None,
            "Operation": 1,
            "PermissionType": 1,
        },
    )
    assert [(r["ResourceName"], len(r["Acls"])) for r in described["Resources"]] == [("acl-closed", 1)]


def test_client_on_the_inter_broker_listener_cannot_move_the_high_watermark(cluster: BrokerCluster) -> None:
    """With the real follower paused, ``alice`` (no ACL) logged in on the leader's inter-broker listener sends a
    Fetch as that follower at the leader's log end: TOPIC_AUTHORIZATION_FAILED, and the high watermark stays
    where the real follower left it (before the fix, her fetch counted as the follower's and committed records
    that only the leader holds)."""
    topic = "acl-hw"
    create_replicated(cluster, topic, rf=2)
    leader = partition_state(cluster.nodes[0].bootstrap, topic)["LeaderId"]
    follower = 1 - leader
    leader_plain = cluster.nodes[leader].bootstrap
    with paused(cluster.nodes[follower].pid):
        produced = request(leader_plain, ApiKey.PRODUCE, 9, produce_body(topic, 0, build_batch(3), acks=1))
        assert produced["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == 0
        assert high_watermark(leader_plain, topic) == 0
        as_follower = {**fetch_body(topic, 0, 3), "ReplicaId": follower}
        with plain_login(RawConnection(_internal_address(cluster, leader)), "alice", "alice-pw") as alice:
            fetched = alice.call(ApiKey.FETCH, 12, as_follower)
        part = fetched["Responses"][0]["Partitions"][0]
        assert part["ErrorCode"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not part["Records"]
        assert high_watermark(leader_plain, topic) == 0
        assert isr(leader_plain, topic) == [0, 1]  # the follower was not dropped meanwhile: the check held
    wait_for(lambda: high_watermark(leader_plain, topic) == 3, what="the real follower commits the records")
