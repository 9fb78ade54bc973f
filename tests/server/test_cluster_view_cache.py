"""A single node's cluster view is built once per change, not once per read (``SingleNodeCluster.view``).

Every handler reads the view, many once per topic, and with an authorizer every authorization reads its ACLs:
built from every topic on each read, requests over many topics were quadratic (creating 1,000 topics took
minutes). These tests count the builds per request kind over 100 topics (counts, not times), and check that the
cache is never stale: a creation, deletion, partition change, ACL, client quota or dynamic config change is seen
by the very next request of each kind.

One broker for the module, with the standard authorizer (its anonymous principal a super user): every
authorization reads the view then, the heaviest pattern.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import CONSUMER_REPLICA_ID, ApiKey
from broker_runtime.server.cluster import ClusterView, SingleNodeCluster
from tests.server.rawclient import RawConnection, build_batch
from tests.support.brokers import start_broker

pytestmark = pytest.mark.timeout(120)

TOPICS = 100
AUTHORIZED = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "offsets.topic.num.partitions": "1",  # the first OffsetCommit creates it: one partition, not 50
}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    instance = start_broker(tmp_path_factory.mktemp("view-cache"), AUTHORIZED)
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def conn(node: Any) -> Iterator[RawConnection]:
    with RawConnection(str(node.bootstrap), timeout_s=60) as c:
        yield c


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per build of a single node's view while the test runs."""
    counted: list[int] = []
    build = SingleNodeCluster._build_view

    def counting(self: SingleNodeCluster) -> Any:
        counted.append(1)
        return build(self)

    monkeypatch.setattr(SingleNodeCluster, "_build_view", counting)
    return counted


def _create(conn: RawConnection, names: list[str], partitions: int = 1) -> dict[str, Any]:
    body = {
        "Topics": [
            {"Name": n, "NumPartitions": partitions, "ReplicationFactor": 1, "Assignments": [], "Configs": []}
            for n in names
        ],
        "timeoutMs": 30000,
        "validateOnly": False,
    }
    answer = conn.call(ApiKey.CREATE_TOPICS, 7, body)
    assert [t["ErrorCode"] for t in answer["Topics"]] == [ErrorCode.NONE] * len(names), answer
    return answer


def _metadata(conn: RawConnection, names: list[str] | None) -> dict[str, Any]:
    topics = None if names is None else [{"TopicId": None, "Name": n} for n in names]
    return conn.call(ApiKey.METADATA, 12, {"Topics": topics, "AllowAutoTopicCreation": False})


def _metadata_by_id(conn: RawConnection, ids: list[uuid.UUID]) -> dict[str, Any]:
    topics = [{"TopicId": topic_id, "Name": None} for topic_id in ids]
    return conn.call(ApiKey.METADATA, 12, {"Topics": topics, "AllowAutoTopicCreation": False})


def _describe_configs(conn: RawConnection, resource_type: int, names: list[str]) -> list[dict[str, Any]]:
    body = {
        "Resources": [
            {"ResourceType": resource_type, "ResourceName": n, "ConfigurationKeys": None} for n in names
        ],
        "IncludeSynonyms": False,
        "IncludeDocumentation": False,
    }
    results: list[dict[str, Any]] = conn.call(ApiKey.DESCRIBE_CONFIGS, 4, body)["Results"]
    return results


def _describe_partitions(conn: RawConnection, names: list[str]) -> list[dict[str, Any]]:
    body = {"Topics": [{"Name": n} for n in names], "ResponsePartitionLimit": 2000, "Cursor": None}
    topics: list[dict[str, Any]] = conn.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body)["Topics"]
    return topics


def _produce(conn: RawConnection, names: list[str]) -> list[int]:
    body = {
        "TransactionalId": None,
        "Acks": 1,
        "TimeoutMs": 5000,
        "TopicData": [{"Name": n, "PartitionData": [{"Index": 0, "Records": build_batch(1)}]} for n in names],
    }
    answer = conn.call(ApiKey.PRODUCE, 9, body)["Responses"]
    return [p["ErrorCode"] for t in answer for p in t["PartitionResponses"]]


def _fetch(conn: RawConnection, names: list[str]) -> list[int]:
    partition = {
        "Partition": 0,
        "CurrentLeaderEpoch": -1,
        "FetchOffset": 0,
        "LastFetchedEpoch": -1,
        "LogStartOffset": -1,
        "PartitionMaxBytes": 1024,
    }
    body = {
        "ReplicaId": -1,
        "MaxWaitMs": 0,
        "MinBytes": 0,
        "MaxBytes": 1 << 20,
        "IsolationLevel": 0,
        "SessionId": 0,
        "SessionEpoch": -1,
        "Topics": [{"Topic": n, "Partitions": [partition]} for n in names],
        "ForgottenTopicsData": [],
        "RackId": "",
    }
    answer = conn.call(ApiKey.FETCH, 12, body)["Responses"]
    return [p["ErrorCode"] for t in answer for p in t["Partitions"]]


def _list_offsets(conn: RawConnection, names: list[str]) -> list[int]:
    partition = {"PartitionIndex": 0, "CurrentLeaderEpoch": -1, "Timestamp": -1}
    body = {
        "ReplicaId": CONSUMER_REPLICA_ID,
        "IsolationLevel": 0,
        "Topics": [{"Name": n, "Partitions": [partition]} for n in names],
    }
    answer = conn.call(ApiKey.LIST_OFFSETS, 8, body)["Topics"]
    return [p["ErrorCode"] for t in answer for p in t["Partitions"]]


def _commit(conn: RawConnection, names: list[str]) -> list[int]:
    partition = {
        "PartitionIndex": 0,
        "CommittedOffset": 0,
        "CommittedLeaderEpoch": -1,
        "CommittedMetadata": "",
    }
    body = {
        "GroupId": "view-cache",
        "GenerationIdOrMemberEpoch": -1,
        "MemberId": "",
        "GroupInstanceId": None,
        "Topics": [{"Name": n, "Partitions": [partition]} for n in names],
    }
    answer = conn.call(ApiKey.OFFSET_COMMIT, 8, body)["Topics"]
    return [p["ErrorCode"] for t in answer for p in t["Partitions"]]


def _offset_fetch(conn: RawConnection, names: list[str]) -> list[int]:
    body = {
        "GroupId": "view-cache",
        "Topics": [{"Name": n, "PartitionIndexes": [0]} for n in names],
        "RequireStable": False,
    }
    answer = conn.call(ApiKey.OFFSET_FETCH, 7, body)
    assert answer["ErrorCode"] == ErrorCode.NONE, answer
    return [p["ErrorCode"] for t in answer["Topics"] for p in t["Partitions"]]


def _delete(conn: RawConnection, names: list[str]) -> list[int]:
    answer = conn.call(ApiKey.DELETE_TOPICS, 4, {"TopicNames": names, "TimeoutMs": 30000})
    return [t["ErrorCode"] for t in answer["Responses"]]


def test_requests_over_100_topics_build_the_view_a_bounded_number_of_times(
    conn: RawConnection, builds: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    indexed: list[int] = []
    index = ClusterView.names_by_id

    def counting_index(self: ClusterView) -> dict[uuid.UUID, str]:
        indexed.append(1)
        return index(self)

    monkeypatch.setattr(ClusterView, "names_by_id", counting_index)
    names = [f"many-{i:03d}" for i in range(TOPICS)]
    ok = [ErrorCode.NONE] * TOPICS
    singly = 10
    answers = [_create(conn, names[:-singly])]
    for name in names[-singly:]:  # one request each: each changes the view, so at most a build or two each
        answers.append(_create(conn, [name]))
    ids = [t["TopicId"] for answer in answers for t in answer["Topics"]]
    assert len(builds) <= 2 * (1 + singly), f"{len(builds)} view builds creating {TOPICS} topics"

    kinds: dict[str, Callable[[], object]] = {
        "Metadata (all)": lambda: len(_metadata(conn, None)["Topics"]) >= TOPICS,
        "Metadata (named)": lambda: [t["ErrorCode"] for t in _metadata(conn, names)["Topics"]] == ok,
        "Metadata (by id)": lambda: [t["Name"] for t in _metadata_by_id(conn, ids)["Topics"]] == names,
        "Produce": lambda: _produce(conn, names) == ok,
        "Fetch": lambda: _fetch(conn, names) == ok,
        "ListOffsets": lambda: _list_offsets(conn, names) == ok,
        "DescribeConfigs": lambda: [r["ErrorCode"] for r in _describe_configs(conn, 2, names)] == ok,
        "DescribeTopicPartitions": lambda: [t["ErrorCode"] for t in _describe_partitions(conn, names)] == ok,
        "OffsetCommit": lambda: _commit(conn, names) == ok,
        "OffsetFetch": lambda: _offset_fetch(conn, names) == ok,
    }
    counts = {}
    for kind, call in kinds.items():
        builds.clear()
        indexed.clear()
        assert call(), f"{kind} did not answer every topic without error"
        counts[kind] = len(builds)
        # the id -> name map of a view is made from all its topics: once per request, not per topic
        assert len(indexed) <= 1, f"{kind} of {TOPICS} topics made the view's id map {len(indexed)} times"
    # Nothing changed since the creations: at most the one build the last creation left to do.
    assert all(n <= 1 for n in counts.values()), f"view builds per request of {TOPICS} topics: {counts}"
    builds.clear()
    deleted = names[:10]  # (a deletion is a dozen fsyncs on the event loop: a few suffice)
    assert _delete(conn, deleted) == [ErrorCode.NONE] * len(deleted)
    # Every topic authorized before the first deletion (as Kafka does): not a build per deletion.
    assert len(builds) <= 2, f"{len(builds)} view builds deleting {len(deleted)} topics"


def _ids(conn: RawConnection, names: list[str]) -> dict[str, uuid.UUID]:
    return {
        t["Name"]: t["TopicId"] for t in _metadata(conn, names)["Topics"] if t["ErrorCode"] == ErrorCode.NONE
    }


def test_a_creation_and_a_deletion_are_seen_by_the_very_next_request_of_each_kind(
    conn: RawConnection,
) -> None:
    name = "fresh"
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    for round_ in range(2):  # the second round re-creates the name: a new topic id, answered at once
        assert _ids(conn, [name]) == {}  # the view read (and kept) before each change
        created = _create(conn, [name])["Topics"][0]["TopicId"]
        assert _ids(conn, [name]) == {name: created}
        by_id = _metadata_by_id(conn, [created])
        assert [(t["Name"], t["ErrorCode"]) for t in by_id["Topics"]] == [(name, ErrorCode.NONE)]
        assert [(t["Name"], t["TopicId"]) for t in _describe_partitions(conn, [name])] == [(name, created)]
        assert [r["ErrorCode"] for r in _describe_configs(conn, 2, [name])] == [ErrorCode.NONE]
        assert _produce(conn, [name]) == [ErrorCode.NONE]
        assert _fetch(conn, [name]) == [ErrorCode.NONE]
        assert _list_offsets(conn, [name]) == [ErrorCode.NONE]
        assert _commit(conn, [name]) == [ErrorCode.NONE]

        assert _delete(conn, [name]) == [ErrorCode.NONE]
        assert _ids(conn, [name]) == {}
        assert name not in [t["Name"] for t in _metadata(conn, None)["Topics"]]
        by_id = _metadata_by_id(conn, [created])
        assert [t["ErrorCode"] for t in by_id["Topics"]] == [ErrorCode.UNKNOWN_TOPIC_ID], round_
        assert [t["ErrorCode"] for t in _describe_partitions(conn, [name])] == [unknown]
        assert [r["ErrorCode"] for r in _describe_configs(conn, 2, [name])] == [unknown]
        assert _produce(conn, [name]) == [unknown]
        assert _fetch(conn, [name]) == [unknown]
        assert _list_offsets(conn, [name]) == [unknown]
        assert _delete(conn, [name]) == [unknown]


def test_new_partitions_are_seen_by_the_very_next_request(conn: RawConnection) -> None:
    _create(conn, ["grows"])
    assert [len(t["Partitions"]) for t in _metadata(conn, ["grows"])["Topics"]] == [1]
    body = {
        "Topics": [{"Name": "grows", "Count": 3, "Assignments": None}],
        "TimeoutMs": 30000,
        "ValidateOnly": False,
    }
    assert [r["ErrorCode"] for r in conn.call(ApiKey.CREATE_PARTITIONS, 3, body)["Results"]] == [
        ErrorCode.NONE
    ]
    assert [len(t["Partitions"]) for t in _metadata(conn, ["grows"])["Topics"]] == [3]
    assert [len(t["Partitions"]) for t in _describe_partitions(conn, ["grows"])] == [3]


def test_acls_quotas_and_broker_configs_are_seen_by_the_very_next_request(conn: RawConnection) -> None:
    acl_filter = {
        "ResourceTypeFilter": 2,  # TOPIC
        "ResourceNameFilter": "guarded",
        "PatternTypeFilter": 3,  # LITERAL
        "PrincipalFilter": None,
        "HostFilter": None,
        "Operation": 1,  # ANY
        "PermissionType": 1,  # ANY
    }

    def acls() -> list[str]:
        answer = conn.call(ApiKey.DESCRIBE_ACLS, 3, acl_filter)
        return [a["Principal"] for r in answer["Resources"] for a in r["Acls"]]

    assert acls() == []
    creation = {
        "ResourceType": 2,
        "ResourceName": "guarded",
        "ResourcePatternType": 3,
        "Principal": "User:alice",
        "Host": "*",
        "Operation": 3,  # READ
        "PermissionType": 3,  # ALLOW
    }
    created = conn.call(ApiKey.CREATE_ACLS, 3, {"Creations": [creation]})["Results"]
    assert [r["ErrorCode"] for r in created] == [ErrorCode.NONE]
    assert acls() == ["User:alice"]
    deleted = conn.call(ApiKey.DELETE_ACLS, 3, {"Filters": [acl_filter]})["FilterResults"]
    assert [r["ErrorCode"] for r in deleted] == [ErrorCode.NONE]
    assert acls() == []

    entity = [{"EntityType": "client-id", "EntityName": "cached"}]

    def quotas() -> list[tuple[str, float]]:
        body = {
            "Components": [{"EntityType": "client-id", "MatchType": 0, "Match": "cached"}],
            "Strict": False,
        }
        answer = conn.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, body)
        return [(v["Key"], v["Value"]) for e in answer["Entries"] or [] for v in e["Values"]]

    assert quotas() == []
    op = {"Key": "producer_byte_rate", "Value": 1024.0, "Remove": False}
    body = {"Entries": [{"Entity": entity, "Ops": [op]}], "ValidateOnly": False}
    assert [e["ErrorCode"] for e in conn.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, body)["Entries"]] == [
        ErrorCode.NONE
    ]
    assert quotas() == [("producer_byte_rate", 1024.0)]

    def retention() -> str | None:
        [result] = _describe_configs(conn, 4, [""])  # BROKER, the cluster-wide defaults
        found = [c["Value"] for c in result["Configs"] if c["Name"] == "log.retention.ms"]
        return found[0] if found else None

    before = retention()
    config = {"Name": "log.retention.ms", "ConfigOperation": 0, "Value": "4321000"}  # SET
    body = {
        "Resources": [{"ResourceType": 4, "ResourceName": "", "Configs": [config]}],
        "ValidateOnly": False,
    }
    altered = conn.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["Responses"]
    assert [r["ErrorCode"] for r in altered] == [ErrorCode.NONE], altered
    assert (before, retention()) == (before, "4321000")
