"""ACLs in a cluster: a binding created through one node is enforced by the other (the bindings live in the
cluster metadata every node polls), and replication keeps working with an authorizer on (followers fetch on the
inter-broker listener). Real broker processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import request
from tests.support.cluster import create_replicated, isr, metadata, wait_for

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    overrides = {
        "authorizer.class.name": "pylog.StandardAuthorizer",
        # PLAINTEXT only, so every client is User:ANONYMOUS: resources without bindings stay open to it
        "allow.everyone.if.no.acl.found": "true",
    }
    with cluster_process(
        tmp_path_factory.mktemp("acl-cluster"), 2, overrides=overrides, startup_timeout_s=90
    ) as running:
        yield running


def _deny_write(bootstrap: str, topic: str) -> dict[str, Any]:
    creation = {
        "ResourceType": 2,  # TOPIC
        "ResourceName": topic,
        "ResourcePatternType": 3,  # LITERAL
        "Principal": "User:ANONYMOUS",
        "Host": "*",
        "Operation": 4,  # WRITE
        "PermissionType": 2,  # DENY
    }
    return request(bootstrap, ApiKey.CREATE_ACLS, 3, {"Creations": [creation]})


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
    # followers still fetch (inter-broker listener): the open topic's replicas stay in sync
    assert isr(node1, "acl-open") == [0, 1]
    described = request(
        node1,
        ApiKey.DESCRIBE_ACLS,
        3,
        {
            "ResourceTypeFilter": 1,
            "ResourceNameFilter": None,
            "PatternTypeFilter": 1,
            "PrincipalFilter": None,
            "HostFilter": None,
            "Operation": 1,
            "PermissionType": 1,
        },
    )
    assert [(r["ResourceName"], len(r["Acls"])) for r in described["Resources"]] == [("acl-closed", 1)]
