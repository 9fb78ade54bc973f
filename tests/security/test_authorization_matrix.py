"""Authorization that cannot be forgotten: every API the broker serves, on every listener kind, sent by a
principal without any ACL, gets Kafka's answer for that API; and before a SASL login every request but
ApiVersions, SaslHandshake and SaslAuthenticate closes the connection.

Both matrices are generated: the APIs come from the handler registry
(:func:`broker_runtime.server.handlers.handler_table`, each at the highest version it serves) and, before login,
from the whole :class:`~broker_runtime.protocol.messages.ApiKey` enum. :data:`DECISIONS` holds, per API key, the
request sent and the answer Kafka's ``KafkaApis`` gives a principal with no ACL (the authorization error it
uses, or an empty / filtered answer); a served API without an entry fails with "add an authorization decision
for X", so a new handler cannot ship without one.

One broker for the module (``allow.everyone.if.no.acl.found=false``, ``super.users=User:admin``) with four
listeners: PLAINTEXT (``User:ANONYMOUS``), SSL with a client certificate (``User:CN=alice,O=pylog``),
SASL_PLAINTEXT -- also the inter-broker listener -- and SASL_SSL (``User:alice``, PLAIN). The admin creates the
resources the requests name first (topic, group with committed offsets, transactional id), so refusals and
filtered lists are checked against things that exist.
"""

from __future__ import annotations

import ssl
import struct
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.protocol.topic_id import ZERO_TOPIC_ID
from broker_runtime.server.handlers import handler_table, supported_versions
from tests.security.certs import Pki, make_pki
from tests.security.conftest import secured_props
from tests.server.rawclient import RawConnection, build_batch, plain_login

pytestmark = pytest.mark.timeout(60)

TOPIC, GROUP, TXN = "matrix", "matrix-group", "matrix-txn"
NEW_TOPIC = "matrix-new"
E = ErrorCode
TOPIC_DENIED, GROUP_DENIED = E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED, TXN_DENIED = E.CLUSTER_AUTHORIZATION_FAILED, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
BROKER_RESOURCE, TOPIC_RESOURCE = 4, 2  # ConfigResource types
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Answered before a login (Kafka's SaslServerAuthenticator); every other key closes the connection.
BEFORE_LOGIN = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


@dataclass(frozen=True)
class Case:
    """One request and what Kafka answers a principal without ACLs: ``observe(answer) == expected``."""

    what: str
    body: dict[str, Any]
    observe: Callable[[dict[str, Any]], Any]
    expected: Any
    #: The version sent, when not the highest the broker serves (an API whose versions differ in authorization).
    version: int | None = None


def _part(answer: dict[str, Any], topics: str, parts: str, code: str = "ErrorCode") -> Any:
    return answer[topics][0][parts][0][code]


def _fetch(replica_id: int) -> dict[str, Any]:
    partition = {"Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": 0, "PartitionMaxBytes": 1 << 20}
    return {
        "ReplicaId": replica_id,
        "MaxBytes": 1 << 20,
        "Topics": [{"Topic": TOPIC, "Partitions": [partition]}],
    }


def _configs(resource_type: int, name: str, operation: bool = False) -> dict[str, Any]:
    entry = {
        "Name": "retention.ms" if resource_type == TOPIC_RESOURCE else "log.retention.ms",
        "Value": "1000",
    }
    if operation:
        entry["ConfigOperation"] = 0  # SET
    return {"Resources": [{"ResourceType": resource_type, "ResourceName": name, "Configs": [entry]}]}


_ACL = {
    "ResourceType": TOPIC_RESOURCE,
    "ResourceName": TOPIC,
    "ResourcePatternType": 3,
    "Principal": "User:x",
}
_ACL_FILTER = {"ResourceTypeFilter": 1, "PatternTypeFilter": 1, "Operation": 1, "PermissionType": 1}
_SASL_AFTER_LOGIN = "ILLEGAL_SASL_STATE: no SASL exchange is expected on this connection (Kafka's KafkaApis)"

#: API key -> the requests sent at the API's highest served version and Kafka's answer to a principal
#: without ACLs. Decided from KafkaApis (handleXxxRequest) and AuthHelper.
DECISIONS: dict[ApiKey, list[Case]] = {
    ApiKey.PRODUCE: [
        Case(
            "WRITE on the topic",
            {
                "Acks": 1,
                "TimeoutMs": 5000,
                "TopicData": [{"Name": TOPIC, "PartitionData": [{"Index": 0, "Records": build_batch(1)}]}],
            },
            lambda a: _part(a, "Responses", "PartitionResponses"),
            TOPIC_DENIED,
        ),
        Case(
            "transactional: WRITE on the transactional id first",
            {
                "TransactionalId": TXN,
                "Acks": 1,
                "TimeoutMs": 5000,
                "TopicData": [{"Name": TOPIC, "PartitionData": [{"Index": 0, "Records": build_batch(1)}]}],
            },
            lambda a: _part(a, "Responses", "PartitionResponses"),
            TXN_DENIED,
        ),
    ],
    ApiKey.FETCH: [
        Case(
            "consumer: READ on the topic",
            _fetch(-1),
            lambda a: _part(a, "Responses", "Partitions"),
            TOPIC_DENIED,
        ),
        Case(
            "follower: CLUSTER_ACTION", _fetch(0), lambda a: _part(a, "Responses", "Partitions"), TOPIC_DENIED
        ),
    ],
    ApiKey.LIST_OFFSETS: [
        Case(
            "DESCRIBE on the topic",
            {
                "ReplicaId": -1,
                "Topics": [
                    {
                        "Name": TOPIC,
                        "Partitions": [{"PartitionIndex": 0, "CurrentLeaderEpoch": -1, "Timestamp": -1}],
                    }
                ],
            },
            lambda a: _part(a, "Topics", "Partitions"),
            TOPIC_DENIED,
        )
    ],
    ApiKey.METADATA: [
        Case(
            "named topic: DESCRIBE",
            {"Topics": [{"Name": TOPIC}], "AllowAutoTopicCreation": False},
            lambda a: a["Topics"][0]["ErrorCode"],
            TOPIC_DENIED,
        ),
        Case(
            "unknown topic with auto-creation: no CREATE, no DESCRIBE",
            {"Topics": [{"Name": NEW_TOPIC}], "AllowAutoTopicCreation": True},
            lambda a: a["Topics"][0]["ErrorCode"],
            TOPIC_DENIED,
        ),
        Case("all topics: filtered", {"Topics": None}, lambda a: a["Topics"], []),
    ],
    ApiKey.OFFSET_COMMIT: [
        Case(
            "READ on the group",
            {
                "GroupId": GROUP,
                "Topics": [{"Name": TOPIC, "Partitions": [{"PartitionIndex": 0, "CommittedOffset": 0}]}],
            },
            lambda a: _part(a, "Topics", "Partitions"),
            GROUP_DENIED,
        )
    ],
    ApiKey.OFFSET_FETCH: [
        Case(
            "DESCRIBE on the group",
            {"Groups": [{"GroupId": GROUP, "Topics": None}]},
            lambda a: a["Groups"][0]["ErrorCode"],
            GROUP_DENIED,
        )
    ],
    ApiKey.FIND_COORDINATOR: [
        Case(
            "group: DESCRIBE on the group",
            {"KeyType": 0, "CoordinatorKeys": [GROUP]},
            lambda a: a["Coordinators"][0]["ErrorCode"],
            GROUP_DENIED,
        ),
        Case(
            "transaction: DESCRIBE on the transactional id",
            {"KeyType": 1, "CoordinatorKeys": [TXN]},
            lambda a: a["Coordinators"][0]["ErrorCode"],
            TXN_DENIED,
        ),
    ],
    ApiKey.JOIN_GROUP: [
        Case(
            "READ on the group",
            {
                "GroupId": GROUP,
                "SessionTimeoutMs": 10000,
                "RebalanceTimeoutMs": 10000,
                "ProtocolType": "consumer",
                "Protocols": [{"Name": "range", "Metadata": b""}],
            },
            lambda a: a["ErrorCode"],
            GROUP_DENIED,
        )
    ],
    ApiKey.HEARTBEAT: [
        Case("READ on the group", {"GroupId": GROUP, "MemberId": "m"}, lambda a: a["ErrorCode"], GROUP_DENIED)
    ],
    ApiKey.CONSUMER_GROUP_HEARTBEAT: [
        Case(
            "READ on the group",
            {"GroupId": GROUP, "MemberId": "m", "MemberEpoch": 0, "SubscribedTopicNames": [TOPIC]},
            lambda a: a["ErrorCode"],
            GROUP_DENIED,
        )
    ],
    ApiKey.CONSUMER_GROUP_DESCRIBE: [
        Case(
            "DESCRIBE on the group",
            {"GroupIds": [GROUP]},
            lambda a: a["Groups"][0]["ErrorCode"],
            GROUP_DENIED,
        )
    ],
    ApiKey.LEAVE_GROUP: [
        Case(
            "READ on the group",
            {"GroupId": GROUP, "Members": [{"MemberId": "m"}]},
            lambda a: a["ErrorCode"],
            GROUP_DENIED,
        )
    ],
    ApiKey.SYNC_GROUP: [
        Case("READ on the group", {"GroupId": GROUP, "MemberId": "m"}, lambda a: a["ErrorCode"], GROUP_DENIED)
    ],
    ApiKey.DESCRIBE_GROUPS: [
        Case(
            "DESCRIBE on the group", {"Groups": [GROUP]}, lambda a: a["Groups"][0]["ErrorCode"], GROUP_DENIED
        )
    ],
    ApiKey.LIST_GROUPS: [
        Case("filtered by DESCRIBE on each group", {}, lambda a: (a["ErrorCode"], a["Groups"]), (0, []))
    ],
    ApiKey.SASL_HANDSHAKE: [
        Case(_SASL_AFTER_LOGIN, {"Mechanism": "PLAIN"}, lambda a: a["ErrorCode"], E.ILLEGAL_SASL_STATE)
    ],
    ApiKey.API_VERSIONS: [Case("answered to everyone", {}, lambda a: a["ErrorCode"], 0)],
    ApiKey.CREATE_TOPICS: [
        Case(
            "CREATE on the cluster or the topic",
            {"Topics": [{"Name": NEW_TOPIC, "NumPartitions": 1, "ReplicationFactor": 1}]},
            lambda a: a["Topics"][0]["ErrorCode"],
            TOPIC_DENIED,
        )
    ],
    ApiKey.DELETE_TOPICS: [
        Case(
            "DELETE on the topic",
            {"Topics": [{"Name": TOPIC}]},
            lambda a: a["Responses"][0]["ErrorCode"],
            TOPIC_DENIED,
        )
    ],
    ApiKey.DELETE_RECORDS: [
        Case(
            "DELETE on the topic",
            {"Topics": [{"Name": TOPIC, "Partitions": [{"PartitionIndex": 0, "Offset": 1}]}]},
            lambda a: _part(a, "Topics", "Partitions"),
            TOPIC_DENIED,
        )
    ],
    ApiKey.INIT_PRODUCER_ID: [
        Case(
            "transactional: WRITE on the transactional id",
            {"TransactionalId": TXN, "TransactionTimeoutMs": 10000},
            lambda a: a["ErrorCode"],
            TXN_DENIED,
        ),
        Case(
            "idempotent: IDEMPOTENT_WRITE on the cluster or WRITE on some topic",
            {"TransactionalId": None, "TransactionTimeoutMs": 10000},
            lambda a: a["ErrorCode"],
            CLUSTER_DENIED,
        ),
    ],
    ApiKey.OFFSET_FOR_LEADER_EPOCH: [
        Case(
            f"replica id {replica}: CLUSTER_ACTION, else DESCRIBE on the topic",
            {
                "ReplicaId": replica,
                "Topics": [{"Topic": TOPIC, "Partitions": [{"Partition": 0, "LeaderEpoch": 0}]}],
            },
            lambda a: _part(a, "Topics", "Partitions"),
            TOPIC_DENIED,
        )
        for replica in (-1, 0)
    ],
    ApiKey.ADD_PARTITIONS_TO_TXN: [
        Case(
            "v4+ (brokers verifying, KIP-890): CLUSTER_ACTION on the cluster",
            {
                "Transactions": [
                    {
                        "TransactionalId": TXN,
                        "ProducerId": 0,
                        "ProducerEpoch": 0,
                        "VerifyOnly": True,
                        "Topics": [{"Name": TOPIC, "Partitions": [0]}],
                    }
                ]
            },
            lambda a: (a["ErrorCode"], a["ResultsByTransaction"]),
            (CLUSTER_DENIED, []),
        ),
        Case(
            "v0-3 (clients): WRITE on the transactional id",
            {
                "V3AndBelowTransactionalId": TXN,
                "V3AndBelowProducerId": 0,
                "V3AndBelowProducerEpoch": 0,
                "V3AndBelowTopics": [{"Name": TOPIC, "Partitions": [0]}],
            },
            lambda a: a["ResultsByTopicV3AndBelow"][0]["ResultsByPartition"][0]["PartitionErrorCode"],
            TXN_DENIED,
            version=3,
        ),
    ],
    ApiKey.ADD_OFFSETS_TO_TXN: [
        Case(
            "WRITE on the transactional id",
            {"TransactionalId": TXN, "GroupId": GROUP},
            lambda a: a["ErrorCode"],
            TXN_DENIED,
        )
    ],
    ApiKey.END_TXN: [
        Case("WRITE on the transactional id", {"TransactionalId": TXN}, lambda a: a["ErrorCode"], TXN_DENIED)
    ],
    ApiKey.WRITE_TXN_MARKERS: [
        Case(
            "CLUSTER_ACTION (or ALTER) on the cluster",
            {
                "Markers": [
                    {
                        "ProducerId": 0,
                        "ProducerEpoch": 0,
                        "TransactionResult": True,
                        "Topics": [{"Name": TOPIC, "PartitionIndexes": [0]}],
                        "CoordinatorEpoch": 0,
                    }
                ]
            },
            lambda a: a["Markers"][0]["Topics"][0]["Partitions"][0]["ErrorCode"],
            CLUSTER_DENIED,
        )
    ],
    ApiKey.TXN_OFFSET_COMMIT: [
        Case(
            "WRITE on the transactional id",
            {
                "TransactionalId": TXN,
                "GroupId": GROUP,
                "Topics": [{"Name": TOPIC, "Partitions": [{"PartitionIndex": 0, "CommittedOffset": 0}]}],
            },
            lambda a: _part(a, "Topics", "Partitions"),
            TXN_DENIED,
        )
    ],
    ApiKey.DESCRIBE_ACLS: [
        Case(
            "DESCRIBE on the cluster",
            _ACL_FILTER,
            lambda a: (a["ErrorCode"], a["Resources"]),
            (CLUSTER_DENIED, []),
        )
    ],
    ApiKey.CREATE_ACLS: [
        Case(
            "ALTER on the cluster",
            {"Creations": [{**_ACL, "Host": "*", "Operation": 3, "PermissionType": 3}]},
            lambda a: a["Results"][0]["ErrorCode"],
            CLUSTER_DENIED,
        )
    ],
    ApiKey.DELETE_ACLS: [
        Case(
            "ALTER on the cluster",
            {"Filters": [_ACL_FILTER]},
            lambda a: a["FilterResults"][0]["ErrorCode"],
            CLUSTER_DENIED,
        )
    ],
    ApiKey.DESCRIBE_CONFIGS: [
        Case(
            "topic: DESCRIBE_CONFIGS on the topic",
            {
                "Resources": [
                    {"ResourceType": TOPIC_RESOURCE, "ResourceName": TOPIC, "ConfigurationKeys": None}
                ]
            },
            lambda a: a["Results"][0]["ErrorCode"],
            TOPIC_DENIED,
        ),
        Case(
            "broker: DESCRIBE_CONFIGS on the cluster",
            {
                "Resources": [
                    {"ResourceType": BROKER_RESOURCE, "ResourceName": "0", "ConfigurationKeys": None}
                ]
            },
            lambda a: a["Results"][0]["ErrorCode"],
            CLUSTER_DENIED,
        ),
    ],
    ApiKey.ALTER_CONFIGS: [
        Case(
            "topic: ALTER_CONFIGS on the topic",
            _configs(TOPIC_RESOURCE, TOPIC),
            lambda a: a["Responses"][0]["ErrorCode"],
            TOPIC_DENIED,
        ),
        Case(
            "broker: ALTER_CONFIGS on the cluster",
            _configs(BROKER_RESOURCE, ""),
            lambda a: a["Responses"][0]["ErrorCode"],
            CLUSTER_DENIED,
        ),
    ],
    ApiKey.INCREMENTAL_ALTER_CONFIGS: [
        Case(
            "topic: ALTER_CONFIGS on the topic",
            _configs(TOPIC_RESOURCE, TOPIC, operation=True),
            lambda a: a["Responses"][0]["ErrorCode"],
            TOPIC_DENIED,
        ),
        Case(
            "broker: ALTER_CONFIGS on the cluster",
            _configs(BROKER_RESOURCE, "", operation=True),
            lambda a: a["Responses"][0]["ErrorCode"],
            CLUSTER_DENIED,
        ),
    ],
    ApiKey.DESCRIBE_LOG_DIRS: [
        Case(
            "DESCRIBE on the cluster",
            {"Topics": None},
            lambda a: (a["ErrorCode"], a["Results"]),
            (CLUSTER_DENIED, []),
        )
    ],
    ApiKey.SASL_AUTHENTICATE: [
        Case(
            _SASL_AFTER_LOGIN,
            {"AuthBytes": b"\0alice\0alice-secret"},
            lambda a: a["ErrorCode"],
            E.ILLEGAL_SASL_STATE,
        )
    ],
    ApiKey.CREATE_PARTITIONS: [
        Case(
            "ALTER on the topic",
            {"Topics": [{"Name": TOPIC, "Count": 2, "Assignments": None}]},
            lambda a: a["Results"][0]["ErrorCode"],
            TOPIC_DENIED,
        )
    ],
    ApiKey.DELETE_GROUPS: [
        Case(
            "DELETE on the group",
            {"GroupsNames": [GROUP]},
            lambda a: a["Results"][0]["ErrorCode"],
            GROUP_DENIED,
        )
    ],
    ApiKey.ELECT_LEADERS: [
        Case(
            "ALTER on the cluster: the top-level error and each partition's",
            {"TopicPartitions": [{"Topic": TOPIC, "Partitions": [0]}]},
            lambda a: (
                a["ErrorCode"],
                [p["ErrorCode"] for p in a["ReplicaElectionResults"][0]["PartitionResult"]],
            ),
            (CLUSTER_DENIED, [CLUSTER_DENIED]),
        )
    ],
    ApiKey.OFFSET_DELETE: [
        Case(
            "DELETE on the group",
            {"GroupId": GROUP, "Topics": [{"Name": TOPIC, "Partitions": [{"PartitionIndex": 0}]}]},
            lambda a: a["ErrorCode"],
            GROUP_DENIED,
        )
    ],
    # Kafka's broker checks nothing (AuthHelper.computeDescribeClusterResponse): the brokers, as Metadata answers
    ApiKey.DESCRIBE_CLUSTER: [
        Case("answered without ACL", {}, lambda a: (a["ErrorCode"], len(a["Brokers"]) > 0), (0, True))
    ],
    ApiKey.DESCRIBE_PRODUCERS: [
        Case(
            "READ on the topic",
            {"Topics": [{"Name": TOPIC, "PartitionIndexes": [0]}]},
            lambda a: _part(a, "Topics", "Partitions"),
            TOPIC_DENIED,
        )
    ],
    ApiKey.DESCRIBE_TRANSACTIONS: [
        Case(
            "DESCRIBE on the transactional id",
            {"TransactionalIds": [TXN]},
            lambda a: a["TransactionStates"][0]["ErrorCode"],
            TXN_DENIED,
        )
    ],
    ApiKey.LIST_TRANSACTIONS: [
        Case(
            "filtered by DESCRIBE on each transactional id",
            {},
            lambda a: (a["ErrorCode"], a["TransactionStates"]),
            (0, []),
        )
    ],
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: [
        Case(
            "DESCRIBE on the topic",
            {"Topics": [{"Name": TOPIC}]},
            lambda a: a["Topics"][0]["ErrorCode"],
            TOPIC_DENIED,
        ),
        Case("all topics: filtered", {"Topics": []}, lambda a: a["Topics"], []),
    ],
    ApiKey.DESCRIBE_CLIENT_QUOTAS: [
        Case("DESCRIBE_CONFIGS on the cluster", {"Components": []}, lambda a: a["ErrorCode"], CLUSTER_DENIED)
    ],
    ApiKey.ALTER_CLIENT_QUOTAS: [
        Case(
            "ALTER_CONFIGS on the cluster",
            {"Entries": [{"Entity": [{"EntityType": "user", "EntityName": "alice"}], "Ops": []}]},
            lambda a: [e["ErrorCode"] for e in a["Entries"]],
            [CLUSTER_DENIED],
        )
    ],
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: [
        Case(
            "DESCRIBE on the cluster",
            {"Users": [{"Name": "alice"}]},
            lambda a: (a["ErrorCode"], a["Results"][0]["ErrorCode"], a["Results"][0]["CredentialInfos"]),
            (CLUSTER_DENIED, CLUSTER_DENIED, []),
        )
    ],
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: [
        Case(
            "ALTER on the cluster",
            {"Deletions": [{"Name": "alice", "Mechanism": 1}]},
            lambda a: [(r["User"], r["ErrorCode"]) for r in a["Results"]],
            [("alice", CLUSTER_DENIED)],
        )
    ],
}


def _served() -> list[int]:
    return sorted(handler_table())


@dataclass
class MatrixBroker:
    broker: Any
    pki: Pki
    #: The id of TOPIC (Fetch v13+ names topics by id).
    topic_id: uuid.UUID

    def connect(self, listener: str, *, login: bool = True) -> RawConnection:
        """A connection to ``listener`` as the principal without ACLs (``login=False``: SASL not started)."""
        tls = None
        if listener in ("SSL", "SASL_SSL"):
            tls = ssl.create_default_context(cafile=str(self.pki.ca))
            if listener == "SSL":
                tls.load_cert_chain(str(self.pki.client_cert), str(self.pki.client_key))
        conn = RawConnection(self.broker.listener_bootstrap(listener), tls=tls)
        if login and listener.startswith("SASL_"):
            plain_login(conn, "alice", "alice-secret")
        return conn


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MatrixBroker]:
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    data_dir = tmp_path_factory.mktemp("matrix")
    pki = make_pki(data_dir / "pki")
    props = {
        **secured_props(data_dir, pki),
        "inter.broker.listener.name": "SASL_PLAINTEXT",  # the inter-broker listener grants nothing either
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
        "group.initial.rebalance.delay.ms": "0",
    }
    broker = Broker(BrokerConfig.from_properties(props)).start()
    try:
        with plain_login(
            RawConnection(broker.listener_bootstrap("SASL_PLAINTEXT")), "admin", "admin-secret"
        ) as admin:
            _setup(admin)
            meta = admin.call(ApiKey.METADATA, 12, {"Topics": [{"Name": TOPIC, "TopicId": ZERO_TOPIC_ID}]})
        yield MatrixBroker(broker, pki, meta["Topics"][0]["TopicId"])
    finally:
        broker.stop()


def _setup(admin: RawConnection) -> None:
    """As the super user: the topic (one record), the group (a committed offset), the transactional id."""
    v = supported_versions()
    created = admin.call(
        ApiKey.CREATE_TOPICS,
        v[ApiKey.CREATE_TOPICS][1],
        {"Topics": [{"Name": TOPIC, "NumPartitions": 1, "ReplicationFactor": 1}]},
    )
    assert created["Topics"][0]["ErrorCode"] == 0, created
    for key in (ApiKey.PRODUCE, ApiKey.OFFSET_COMMIT):
        case = DECISIONS[key][0]
        answer = admin.call(key, v[key][1], case.body)
        assert case.observe(answer) == 0, answer
    answer = admin.call(
        ApiKey.INIT_PRODUCER_ID, v[ApiKey.INIT_PRODUCER_ID][1], DECISIONS[ApiKey.INIT_PRODUCER_ID][0].body
    )
    assert answer["ErrorCode"] == 0, answer
    # what the principal without ACLs must not see in the lists, the super user sees
    assert admin.call(ApiKey.LIST_GROUPS, v[ApiKey.LIST_GROUPS][1], {})["Groups"]
    assert admin.call(ApiKey.LIST_TRANSACTIONS, v[ApiKey.LIST_TRANSACTIONS][1], {})["TransactionStates"]
    assert admin.call(ApiKey.METADATA, v[ApiKey.METADATA][1], {"Topics": None})["Topics"]


def _closed(conn: RawConnection, timeout_s: float = 5) -> bool:
    """True when the broker closed the connection (EOF, reset, TLS close) without answering."""
    conn.sock.settimeout(timeout_s)
    try:
        return conn.sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("listener", LISTENERS)
@pytest.mark.parametrize("key", _served(), ids=lambda k: ApiKey(k).name)
def test_every_api_decides_authorization(matrix: MatrixBroker, listener: str, key: int) -> None:
    cases = DECISIONS.get(ApiKey(key))
    assert cases, (
        f"add an authorization decision for {ApiKey(key).name} to DECISIONS: what does Kafka answer a principal "
        "without ACLs (KafkaApis)?"
    )
    with matrix.connect(listener) as conn:
        for case in cases:
            version = case.version if case.version is not None else supported_versions()[key][1]
            body = case.body
            if key == ApiKey.FETCH and version >= 13:  # the same request, naming the topic by its id
                body = {**body, "Topics": [{**t, "TopicId": matrix.topic_id} for t in body["Topics"]]}
            answer = conn.call(key, version, body)
            assert case.observe(answer) == case.expected, (
                f"{ApiKey(key).name} v{version} on {listener} ({case.what}): {answer}"
            )


def test_every_decision_is_for_a_served_api() -> None:
    assert set(DECISIONS) <= set(handler_table()), set(DECISIONS) - set(handler_table())


def _frame(conn: RawConnection, key: int) -> bytes:
    """A well-formed request of ``key``: the decision table's first body when the broker serves the API, else a
    bare v0 header (the broker cannot parse such a request at all)."""
    if key in DECISIONS:
        return conn.encode(key, supported_versions()[key][1], DECISIONS[ApiKey(key)][0].body)
    client_id = b"raw-test"
    header = struct.pack(">hhih", key, 0, 1, len(client_id)) + client_id
    return struct.pack(">i", len(header)) + header


@pytest.mark.parametrize(
    ("listener", "stage"),
    [
        ("SASL_PLAINTEXT", "before handshake"),
        ("SASL_SSL", "before handshake"),
        ("SASL_PLAINTEXT", "after handshake"),
    ],
)
@pytest.mark.parametrize("key", [k for k in ApiKey if k not in BEFORE_LOGIN], ids=lambda k: k.name)
def test_before_login_every_other_api_closes_the_connection(
    matrix: MatrixBroker, listener: str, stage: str, key: ApiKey
) -> None:
    with matrix.connect(listener, login=False) as conn:
        if stage == "after handshake":
            assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "PLAIN"})["ErrorCode"] == 0
        conn.send_raw(_frame(conn, key))
        assert _closed(conn), f"{key.name} {stage} on {listener} was not refused by closing the connection"


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_before_login_the_sasl_apis_are_answered(matrix: MatrixBroker, listener: str) -> None:
    """The three exceptions: ApiVersions and SaslHandshake are answered before the handshake; a SaslAuthenticate
    before the handshake closes (Kafka: unexpected during the handshake), after it logs in."""
    with matrix.connect(listener, login=False) as conn:
        assert conn.call(ApiKey.API_VERSIONS, 3, {})["ErrorCode"] == 0
        conn.send_raw(_frame(conn, ApiKey.SASL_AUTHENTICATE))
        assert _closed(conn)
    with matrix.connect(listener, login=False) as conn:
        plain_login(conn, "alice", "alice-secret")
