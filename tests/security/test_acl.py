"""ACL authorization with Kafka's model, judged by confluent-kafka and kafka-python over SASL/PLAIN: the ACL
admin APIs, WRITE / READ / DESCRIBE enforcement with Kafka's error codes, Metadata hiding topics, prefixed and
DENY bindings, super users, ACLs surviving a restart, a follower-style Fetch from a client refused, and a
consumer group's regex subscription resolved to the topics its member may describe.

Pure decision rules (implied operations, wildcards, allow.everyone.if.no.acl.found) are checked on the
:class:`~broker_runtime.security.acl.Authorizer` itself in the first tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ConfigError, ErrorCode
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.security.acl import (
    AclBinding,
    AclOperation,
    AclPermission,
    Authorizer,
    PatternType,
    ResourceType,
    authorizer_from_properties,
)
from tests.server.rawclient import RawConnection, fetch_body, plain_login

pytestmark = pytest.mark.timeout(120)

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-pw" '
    'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";'
)
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermission.ALLOW, AclPermission.DENY
Op = AclOperation


def _b(rt: ResourceType, name: str, principal: str, op: AclOperation, perm: AclPermission = ALLOW, **kw: Any):
    return AclBinding(rt, name, kw.get("pattern", LIT), principal, kw.get("host", "*"), op, perm)


# -- the decision rules -------------------------------------------------------------------------------------


def test_decision_rules() -> None:
    az = Authorizer(["User:root"])
    acls = (
        _b(T, "orders", "User:alice", Op.READ),
        _b(T, "pay-", "User:alice", Op.WRITE, pattern=PRE),
        _b(T, "pay-secret", "User:alice", Op.ALL, DENY),
        _b(T, "*", "User:bob", Op.DESCRIBE),
        _b(T, "cfg", "User:bob", Op.ALTER_CONFIGS),
        _b(G, "g1", "User:*", Op.READ, host="10.0.0.1"),
    )

    def ok(principal: str, op: AclOperation, rt: ResourceType, name: str, host: str = "127.0.0.1") -> bool:
        return az.authorize(acls, principal, host, op, rt, name)

    assert ok("User:alice", Op.READ, T, "orders")
    assert ok("User:alice", Op.DESCRIBE, T, "orders")  # implied by READ
    assert not ok("User:alice", Op.WRITE, T, "orders")
    assert ok("User:alice", Op.WRITE, T, "pay-in")  # prefixed
    assert not ok("User:alice", Op.WRITE, T, "pa")
    assert not ok("User:alice", Op.WRITE, T, "pay-secret")  # DENY ALL beats the prefixed ALLOW
    assert ok("User:bob", Op.DESCRIBE, T, "anything")  # wildcard name
    assert not ok("User:bob", Op.READ, T, "anything")
    assert ok("User:bob", Op.DESCRIBE_CONFIGS, T, "cfg")  # implied by ALTER_CONFIGS
    assert ok("User:carol", Op.READ, G, "g1", host="10.0.0.1")  # User:* and host
    assert not ok("User:carol", Op.READ, G, "g1", host="10.0.0.2")
    assert ok("User:root", Op.ALTER, C, "kafka-cluster")  # super user, no binding needed
    assert not ok("User:alice", Op.READ, G, "no-acl-at-all")  # allow.everyone.if.no.acl.found=false
    everyone = Authorizer(allow_if_no_acl=True)
    assert everyone.authorize(acls, "User:x", "h", Op.READ, G, "no-acl-at-all")
    assert not everyone.authorize(acls, "User:x", "h", Op.READ, T, "orders")  # ACLs exist: no fallback
    # the wildcard binding is an ACL on every topic, so no topic falls back to allow-everyone
    assert not everyone.authorize(acls, "User:x", "h", Op.READ, T, "no-acl-at-all")


def test_authorizer_config() -> None:
    assert authorizer_from_properties({}) is None
    az = authorizer_from_properties(
        {
            "authorizer.class.name": STANDARD,
            "super.users": "User:a; User:b",
            "allow.everyone.if.no.acl.found": "true",
        }
    )
    assert az is not None and az.super_users == {"User:a", "User:b"} and az.allow_if_no_acl
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        authorizer_from_properties({"authorizer.class.name": "com.example.MyAuthorizer"})
    with pytest.raises(ConfigError, match="super.users"):
        authorizer_from_properties({"authorizer.class.name": STANDARD, "super.users": "admin"})


# -- one broker with an authorizer --------------------------------------------------------------------------


def _props(data_dir: Path, **extra: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "log.dirs": str(data_dir / "logs"),
        "authorizer.class.name": STANDARD,
        "super.users": "User:admin",
        "group.initial.rebalance.delay.ms": "0",
        **extra,
    }


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    broker = Broker(BrokerConfig.from_properties(_props(tmp_path_factory.mktemp("acl")))).start()
    try:
        yield broker
    finally:
        _forget_admins(broker)
        broker.stop()


def _forget_admins(broker: Any) -> None:
    for key in [k for k in _ADMINS if k[0] == id(broker)]:
        del _ADMINS[key]


def _conf(broker: Any, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.listener_bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-pw",
    }


_ADMINS: dict[tuple[int, str], Any] = {}


def _admin(broker: Any, user: str = "admin") -> Any:
    """One AdminClient per broker and user, kept alive (a collected client fails its pending futures)."""
    from confluent_kafka.admin import AdminClient

    key = (id(broker), user)
    if key not in _ADMINS:
        _ADMINS[key] = AdminClient(_conf(broker, user))
    return _ADMINS[key]


def _acl(rt: Any, name: str, principal: str, op: Any, perm: Any = None, pattern: Any = None) -> Any:
    from confluent_kafka.admin import AclBinding as CkBinding
    from confluent_kafka.admin import AclPermissionType, ResourcePatternType

    return CkBinding(
        rt,
        name,
        pattern or ResourcePatternType.LITERAL,
        principal,
        "*",
        op,
        perm or AclPermissionType.ALLOW,
    )


def _add(broker: Any, *bindings: Any) -> None:
    for fut in _admin(broker).create_acls(list(bindings), request_timeout=15).values():
        fut.result()


def _create_topic(broker: Any, name: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import NewTopic

    for fut in _admin(broker).create_topics([NewTopic(name, partitions, 1)], request_timeout=15).values():
        fut.result()


def _produce(broker: Any, user: str, topic: str, n: int = 3) -> list[Any]:
    """Produce n records as ``user``; the delivery errors (None for a delivered record)."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer({**_conf(broker, user), "message.timeout.ms": 10000, "enable.idempotence": False})
    for i in range(n):
        producer.produce(topic, value=f"v{i}".encode(), on_delivery=lambda err, _m: errors.append(err))
    producer.flush(20)
    assert len(errors) == n
    return errors


def test_acl_admin_apis_confluent(acl_broker: Any) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclPermissionType,
        ResourcePatternType,
    )
    from confluent_kafka.admin import (
        AclOperation as CkOp,
    )
    from confluent_kafka.admin import (
        ResourceType as CkType,
    )

    name = f"admin-{uuid.uuid4().hex[:6]}"
    wanted = [
        _acl(CkType.TOPIC, name, "User:alice", CkOp.READ),
        _acl(CkType.TOPIC, name[:4], "User:alice", CkOp.WRITE, pattern=ResourcePatternType.PREFIXED),
        _acl(CkType.GROUP, name, "User:bob", CkOp.READ, AclPermissionType.DENY),
    ]
    _add(acl_broker, *wanted)
    flt = AclBindingFilter(
        CkType.ANY, None, ResourcePatternType.ANY, "User:alice", None, CkOp.ANY, AclPermissionType.ANY
    )
    found = _admin(acl_broker).describe_acls(flt, request_timeout=15).result()
    assert {(b.name, b.operation, b.resource_pattern_type) for b in found} >= {
        (name, CkOp.READ, ResourcePatternType.LITERAL),
        (name[:4], CkOp.WRITE, ResourcePatternType.PREFIXED),
    }
    # MATCH: every binding that applies to the named resource, prefixed ones included
    match = AclBindingFilter(
        CkType.TOPIC, name, ResourcePatternType.MATCH, None, None, CkOp.ANY, AclPermissionType.ANY
    )
    assert len(_admin(acl_broker).describe_acls(match, request_timeout=15).result()) == 2
    # a principal without ALTER on the cluster may not add ACLs
    with pytest.raises(KafkaException) as err:
        for fut in _admin(acl_broker, "alice").create_acls([wanted[0]], request_timeout=15).values():
            fut.result()
    assert err.value.args[0].code() == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    gone_filter = AclBindingFilter(
        CkType.GROUP, name, ResourcePatternType.LITERAL, None, None, CkOp.ANY, AclPermissionType.ANY
    )
    deleted = next(iter(_admin(acl_broker).delete_acls([gone_filter], request_timeout=15).values())).result()
    assert [(b.name, b.principal) for b in deleted] == [(name, "User:bob")]
    left = _admin(acl_broker).describe_acls(gone_filter, request_timeout=15).result()
    assert left == []


def test_acl_admin_apis_kafka_python(acl_broker: Any) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
    )
    from kafka.admin import (
        ResourceType as KpType,
    )

    admin = KafkaAdminClient(
        bootstrap_servers=acl_broker.listener_bootstrap("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="admin",
        sasl_plain_password="admin-pw",
        request_timeout_ms=15000,
    )
    try:
        name = f"kp-{uuid.uuid4().hex[:6]}"
        acl = ACL(
            "User:bob",
            "*",
            ACLOperation.DESCRIBE,
            ACLPermissionType.ALLOW,
            ResourcePattern(KpType.TOPIC, name, ACLResourcePatternType.LITERAL),
        )
        result = admin.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        flt = ACLFilter(
            principal="User:bob",
            host="*",
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePattern(KpType.TOPIC, name, ACLResourcePatternType.LITERAL),
        )
        acls, error = admin.describe_acls(flt)
        assert error.errno == 0 and [a.resource_pattern.resource_name for a in acls] == [name]
        deleted = admin.delete_acls([flt])
        assert len(deleted[0][1]) == 1
        assert admin.describe_acls(flt)[0] == []
    finally:
        admin.close()


def test_produce_needs_write(acl_broker: Any) -> None:
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import ResourceType as CkType

    topic = f"w-{uuid.uuid4().hex[:6]}"
    _create_topic(acl_broker, topic)
    _add(acl_broker, _acl(CkType.TOPIC, topic, "User:alice", CkOp.DESCRIBE))
    errors = _produce(acl_broker, "alice", topic)
    assert {e.code() for e in errors} == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    _add(acl_broker, _acl(CkType.TOPIC, topic, "User:alice", CkOp.WRITE))
    assert _produce(acl_broker, "alice", topic) == [None] * 3


def test_prefixed_allow_and_deny_beats_allow(acl_broker: Any) -> None:
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import AclPermissionType, ResourcePatternType
    from confluent_kafka.admin import ResourceType as CkType

    prefix = f"px{uuid.uuid4().hex[:4]}-"
    open_topic, closed_topic = prefix + "open", prefix + "closed"
    _create_topic(acl_broker, open_topic)
    _create_topic(acl_broker, closed_topic)
    _add(
        acl_broker,
        _acl(CkType.TOPIC, prefix, "User:bob", CkOp.WRITE, pattern=ResourcePatternType.PREFIXED),
        _acl(CkType.TOPIC, closed_topic, "User:bob", CkOp.WRITE, AclPermissionType.DENY),
    )
    assert _produce(acl_broker, "bob", open_topic) == [None] * 3
    errors = _produce(acl_broker, "bob", closed_topic)
    assert {e.code() for e in errors} == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    # the super user needs no binding, and a DENY for others does not touch it
    assert _produce(acl_broker, "admin", closed_topic) == [None] * 3


def test_fetch_and_list_offsets_need_read(acl_broker: Any) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import ResourceType as CkType

    topic = f"r-{uuid.uuid4().hex[:6]}"
    _create_topic(acl_broker, topic)
    assert _produce(acl_broker, "admin", topic) == [None] * 3

    def consume(user: str) -> tuple[list[bytes], set[int]]:
        consumer = Consumer({**_conf(acl_broker, user), "group.id": "unused", "enable.auto.commit": False})
        got: list[bytes] = []
        errors: set[int] = set()
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and len(got) < 3 and not errors:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    errors.add(msg.error().code())
                else:
                    got.append(msg.value())
            try:
                consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            except KafkaException as exc:
                errors.add(exc.args[0].code())
        finally:
            consumer.close()
        return got, errors

    # DESCRIBE (Metadata, ListOffsets) but no READ: the Fetch itself is refused
    _add(
        acl_broker,
        _acl(CkType.TOPIC, topic, "User:bob", CkOp.DESCRIBE),
        _acl(CkType.GROUP, "unused", "User:bob", CkOp.READ),
    )
    got, errors = consume("bob")
    assert got == [] and errors == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    _add(acl_broker, _acl(CkType.TOPIC, topic, "User:bob", CkOp.READ))
    got, errors = consume("bob")
    assert got == [b"v0", b"v1", b"v2"] and not errors


def test_list_offsets_without_describe_raw(acl_broker: Any) -> None:
    """ListOffsets on the PLAINTEXT listener (principal User:ANONYMOUS, no ACL): TOPIC_AUTHORIZATION_FAILED."""
    topic = f"lo-{uuid.uuid4().hex[:6]}"
    _create_topic(acl_broker, topic)
    body = {
        "ReplicaId": -1,
        "IsolationLevel": 0,
        "Topics": [
            {"Name": topic, "Partitions": [{"PartitionIndex": 0, "CurrentLeaderEpoch": -1, "Timestamp": -1}]}
        ],
    }
    with RawConnection(acl_broker.listener_bootstrap("PLAINTEXT")) as conn:
        answer = conn.call(ApiKey.LIST_OFFSETS, 5, body)
    assert answer["Topics"][0]["Partitions"][0]["ErrorCode"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_create_topics_answers_configs_only_with_describe_configs(acl_broker: Any) -> None:
    """CreateTopics v7 as Kafka's controller answers it: with CREATE but without DESCRIBE_CONFIGS on the topic,
    the topic is created but the answer carries TopicConfigErrorCode TOPIC_AUTHORIZATION_FAILED, no partition
    count, replication factor or configs; with DESCRIBE_CONFIGS, every config of the topic as DescribeConfigs
    answers it (found by the Java AdminClient, whose createTopics().config() reads them)."""
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import ResourcePatternType
    from confluent_kafka.admin import ResourceType as CkType

    prefix = f"cfg-{uuid.uuid4().hex[:6]}"
    _add(
        acl_broker,
        _acl(CkType.TOPIC, prefix, "User:ANONYMOUS", CkOp.CREATE, pattern=ResourcePatternType.PREFIXED),
        _acl(CkType.TOPIC, f"{prefix}-seen", "User:ANONYMOUS", CkOp.DESCRIBE_CONFIGS),
    )

    def create(name: str) -> dict[str, Any]:
        body = {
            "Topics": [
                {
                    "Name": name,
                    "NumPartitions": 2,
                    "ReplicationFactor": 1,
                    "Assignments": [],
                    "Configs": [{"Name": "retention.ms", "Value": "3600000"}],
                }
            ],
            "timeoutMs": 15000,
            "validateOnly": False,
        }
        with RawConnection(acl_broker.listener_bootstrap("PLAINTEXT")) as conn:
            answer: dict[str, Any] = conn.call(ApiKey.CREATE_TOPICS, 7, body)["Topics"][0]
        return answer

    hidden = create(f"{prefix}-hidden")
    assert (hidden["ErrorCode"], hidden["TopicConfigErrorCode"]) == (0, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    assert (hidden["NumPartitions"], hidden["ReplicationFactor"], hidden["Configs"]) == (-1, -1, [])
    assert f"{prefix}-hidden" in _admin(acl_broker).list_topics(timeout=10).topics
    seen = create(f"{prefix}-seen")
    assert (seen["ErrorCode"], seen["TopicConfigErrorCode"]) == (0, 0)
    assert (seen["NumPartitions"], seen["ReplicationFactor"]) == (2, 1)
    from broker_runtime.client import KafkaClient

    with KafkaClient(acl_broker.listener_bootstrap("PLAINTEXT")) as client:  # ANONYMOUS may describe -seen
        described = {e.name: e for e in client.admin.describe_config_entries(2, f"{prefix}-seen")}
    assert {c["Name"]: (c["Value"], c["ConfigSource"], c["IsSensitive"]) for c in seen["Configs"]} == {
        e.name: (e.value, e.source, e.sensitive) for e in described.values()
    }
    assert len(seen["Configs"]) > 20 and described["retention.ms"].value == "3600000"


def test_metadata_hides_topics_without_describe(acl_broker: Any) -> None:
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import ResourceType as CkType

    seen, hidden = f"seen-{uuid.uuid4().hex[:6]}", f"hidden-{uuid.uuid4().hex[:6]}"
    _create_topic(acl_broker, seen)
    _create_topic(acl_broker, hidden)
    _add(acl_broker, _acl(CkType.TOPIC, seen, "User:alice", CkOp.READ))  # READ implies DESCRIBE
    topics = _admin(acl_broker, "alice").list_topics(timeout=10).topics
    assert seen in topics and hidden not in topics
    assert hidden in _admin(acl_broker).list_topics(timeout=10).topics
    named = _admin(acl_broker, "alice").list_topics(hidden, timeout=10).topics[hidden]
    assert named.error is not None and named.error.code() == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_a_regex_subscription_resolves_to_the_topics_the_member_may_describe(acl_broker: Any) -> None:
    """KIP-848: the coordinator resolves a member's SubscribedTopicRegex over the topics its principal may DESCRIBE
    (Kafka's ``filterTopicDescribeAuthorizedTopics``): the others are left out, without an error."""
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import ResourceType as CkType

    prefix = f"rx{uuid.uuid4().hex[:6]}"
    seen, hidden, group = f"{prefix}-seen", f"{prefix}-hidden", f"{prefix}-group"
    _create_topic(acl_broker, seen)
    _create_topic(acl_broker, hidden)
    _add(
        acl_broker,
        _acl(CkType.TOPIC, seen, "User:ANONYMOUS", CkOp.READ),  # READ implies DESCRIBE
        _acl(CkType.GROUP, group, "User:ANONYMOUS", CkOp.READ),
    )
    body = {
        "GroupId": group,
        "MemberId": "member-0000000000000000000",
        "MemberEpoch": 0,
        "RebalanceTimeoutMs": 5000,
        "SubscribedTopicNames": None,
        "SubscribedTopicRegex": f"{prefix}-.*",
        "TopicPartitions": [],
    }
    with RawConnection(acl_broker.listener_bootstrap("PLAINTEXT")) as conn:
        answer = conn.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, body)
    assert answer["ErrorCode"] == ErrorCode.NONE, answer
    seen_id = acl_broker.ctx.cluster.view.topics[seen].topic_id
    assert answer["Assignment"]["TopicPartitions"] == [{"TopicId": seen_id, "Partitions": [0]}]


def test_follower_fetch_from_client_refused(acl_broker: Any) -> None:
    """ReplicaId >= 0 on a listener that is not the inter-broker one, without CLUSTER_ACTION: refused."""
    topic = f"ff-{uuid.uuid4().hex[:6]}"
    _create_topic(acl_broker, topic)
    body = fetch_body(topic, 0, 0)
    body["ReplicaId"] = 1
    with RawConnection(acl_broker.listener_bootstrap("PLAINTEXT")) as conn:
        answer = conn.call(ApiKey.FETCH, 11, body)
    assert answer["Responses"][0]["Partitions"][0]["ErrorCode"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # CLUSTER_ACTION on the cluster lets the same principal fetch as a follower (Kafka's rule)
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import ResourceType as CkType

    _add(acl_broker, _acl(CkType.BROKER, "kafka-cluster", "User:ANONYMOUS", CkOp.CLUSTER_ACTION))
    with RawConnection(acl_broker.listener_bootstrap("PLAINTEXT")) as conn:
        answer = conn.call(ApiKey.FETCH, 11, body)
    assert answer["Responses"][0]["Partitions"][0]["ErrorCode"] != ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_a_client_on_the_inter_broker_listener_cannot_act_as_a_broker(acl_broker: Any) -> None:
    """``alice`` (no ACL) logged in on the inter-broker listener: WriteTxnMarkers, OffsetForLeaderEpoch and a
    follower Fetch (ReplicaId >= 0) need CLUSTER_ACTION on the cluster there too (Kafka asks the authorizer on
    every listener), so she cannot commit another producer's open transaction: a read_committed reader still
    sees nothing of it."""
    from confluent_kafka import Producer

    topic = f"ib-{uuid.uuid4().hex[:6]}"
    _create_topic(acl_broker, topic)
    producer = Producer({**_conf(acl_broker, "admin"), "transactional.id": f"tx-{topic}"})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, value=b"still open")
    assert producer.flush(15) == 0
    bootstrap = acl_broker.listener_bootstrap("SASL_PLAINTEXT")
    assert acl_broker.config.inter_broker_listener_name == "SASL_PLAINTEXT"
    partition0 = [{"Name": topic, "PartitionIndexes": [0]}]
    with plain_login(RawConnection(bootstrap), "admin", "admin-pw") as admin:
        described = admin.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"Topics": partition0})
    (active,) = described["Topics"][0]["Partitions"][0]["ActiveProducers"]
    commit = {
        "ProducerId": active["ProducerId"],
        "ProducerEpoch": active["ProducerEpoch"],
        "TransactionResult": True,
        "Topics": partition0,
        "CoordinatorEpoch": active["CoordinatorEpoch"],
    }
    epoch_query = {
        "ReplicaId": 1,
        "Topics": [
            {"Topic": topic, "Partitions": [{"Partition": 0, "CurrentLeaderEpoch": -1, "LeaderEpoch": 0}]}
        ],
    }
    as_follower = {**fetch_body(topic, 0, 0), "ReplicaId": 1}
    with plain_login(RawConnection(bootstrap), "alice", "alice-pw") as alice:
        markers = alice.call(ApiKey.WRITE_TXN_MARKERS, 1, {"Markers": [commit]})
        epochs = alice.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, epoch_query)
        fetched = alice.call(ApiKey.FETCH, 11, as_follower)
    assert markers["Markers"][0]["Topics"][0]["Partitions"] == [
        {"PartitionIndex": 0, "ErrorCode": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    ]
    assert epochs["Topics"][0]["Partitions"][0]["ErrorCode"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    part = fetched["Responses"][0]["Partitions"][0]
    assert part["ErrorCode"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not part["Records"]
    read_committed = {**fetch_body(topic, 0, 0), "IsolationLevel": 1}
    with plain_login(RawConnection(bootstrap), "admin", "admin-pw") as admin:
        part = admin.call(ApiKey.FETCH, 11, read_committed)["Responses"][0]["Partitions"][0]
    assert part["ErrorCode"] == 0 and part["LastStableOffset"] == 0 and not part["Records"]
    producer.abort_transaction(15)


def test_acls_survive_restart(tmp_path: Path) -> None:
    from confluent_kafka.admin import AclBindingFilter, AclPermissionType, ResourcePatternType
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import ResourceType as CkType

    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    config = BrokerConfig.from_properties(_props(tmp_path))
    broker = Broker(config).start()
    try:
        _create_topic(broker, "kept")
        _add(broker, _acl(CkType.TOPIC, "kept", "User:alice", CkOp.WRITE))
    finally:
        _forget_admins(broker)
        broker.stop()
    broker = Broker(config).start()
    try:
        flt = AclBindingFilter(
            CkType.ANY, None, ResourcePatternType.ANY, None, None, CkOp.ANY, AclPermissionType.ANY
        )
        found = _admin(broker).describe_acls(flt, request_timeout=15).result()
        assert [(b.name, b.principal, b.operation) for b in found] == [("kept", "User:alice", CkOp.WRITE)]
        assert _produce(broker, "alice", "kept") == [None] * 3
        assert {e.code() for e in _produce(broker, "bob", "kept")} == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    finally:
        _forget_admins(broker)
        broker.stop()


def test_acl_apis_without_authorizer_answer_security_disabled(tmp_path: Path) -> None:
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    broker = Broker(
        BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)})
    ).start()
    try:
        with RawConnection(broker.bootstrap) as conn:
            answer = conn.call(
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
        assert answer["ErrorCode"] == ErrorCode.SECURITY_DISABLED
    finally:
        broker.stop()


def test_acls_cli_add_list_remove(
    acl_broker: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from broker_runtime.cli import main

    config = tmp_path / "admin.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-pw";\n'
    )
    base = ["acls", "--bootstrap-server", acl_broker.listener_bootstrap("SASL_PLAINTEXT")]
    base += ["--command-config", str(config)]
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    add = [*base, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Write"]
    assert main([*add, "--topic", topic]) == 0
    assert main([*base, "--add", "--deny-principal", "User:bob", "--topic", topic]) == 0
    assert main([*base, "--list", "--topic", topic]) == 0
    out = capsys.readouterr().out
    assert f"name={topic}, patternType=LITERAL" in out
    assert "principal=User:alice, host=*, operation=READ, permissionType=ALLOW" in out
    assert "principal=User:bob, host=*, operation=ALL, permissionType=DENY" in out
    assert main([*base, "--remove", "--topic", topic, "--deny-principal", "User:bob"]) == 0
    capsys.readouterr()
    assert main([*base, "--list", "--topic", topic]) == 0
    out = capsys.readouterr().out
    assert "User:bob" not in out and out.count("User:alice") == 2
    # without the admin's login: User:ANONYMOUS on PLAINTEXT has no ALTER on the cluster
    plain = ["acls", "--bootstrap-server", acl_broker.listener_bootstrap("PLAINTEXT")]
    assert main([*plain, "--add", "--allow-principal", "User:x", "--topic", topic]) == 1
    assert "CLUSTER_AUTHORIZATION_FAILED" in capsys.readouterr().err


def test_connector_planning_names_an_acl_refusal(acl_broker: Any) -> None:
    """The connector's read planning, as ``bob`` without DESCRIBE on the topic: TOPIC_AUTHORIZATION_FAILED, not
    "does not exist" (the same planning Spark runs in the driver; the Spark run itself is in
    tests/connector/test_security_connector.py)."""
    from broker_runtime.client import KafkaClient
    from broker_runtime.errors import KafkaError
    from broker_runtime.security import ClientSecurity
    from spark_kafka_log.common.reader_options import parse_reader_options
    from spark_kafka_log.read.read_plan import selected_partitions

    topic = f"plan-{uuid.uuid4().hex[:6]}"
    _create_topic(acl_broker, topic)
    bootstrap = acl_broker.listener_bootstrap("SASL_PLAINTEXT")
    login = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" '
        'password="bob-pw";',
    }
    options = parse_reader_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            **{f"kafka.{k}": v for k, v in login.items()},
        }
    )
    client = KafkaClient(bootstrap, security=ClientSecurity.from_properties(login))
    with client, pytest.raises(KafkaError, match="TOPIC_AUTHORIZATION_FAILED"):
        selected_partitions(client, options)
