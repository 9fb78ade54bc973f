"""Metadata (key 3, v0-13): every broker of the cluster, and per partition its leader, replicas and ISR.

The answer comes from the cluster store (:mod:`broker_runtime.server.cluster`): a single-node broker reports
itself as the only broker and the leader of every partition (replicas = ISR = [node]); a broker of a cluster
reports the unfenced brokers (a fenced one -- dead, or its session expired -- is left out, as Kafka's
metadata cache leaves it out, so clients do not connect to it) and per partition the assignment, leader, leader
epoch, ISR and offline replicas (fenced or unregistered) recorded in the shared metadata. A partition without a
leader (leader -1: no ISR member is live) answers LEADER_NOT_AVAILABLE; the controller never records a fenced
broker as leader. The file is re-checked (one ``stat``) on every request, so every broker answers the same and
a client may ask any of them. Every topic carries its id (KIP-516). ``__consumer_offsets`` and
``__transaction_state`` are marked internal.

Topics: null (v1+) or an empty list in v0 means all topics. A requested topic that does not exist is created
here when ``auto.create.topics.enable`` is true and the request allows it (AllowAutoTopicCreation, v4+;
earlier versions always allow), with ``num.partitions`` partitions and ``default.replication.factor``
replicas. Creation is synchronous, so the answer already describes the new topic (Kafka answers
LEADER_NOT_AVAILABLE first because its creation is async). Illegal names get INVALID_TOPIC_EXCEPTION, and
so does a null name (a lookup by topic id) in v10-11, whose response cannot carry a null name. v12+ looks a
null-named entry (or one with a non-zero ``TopicId``, whatever its name) up by its ``TopicId`` (Kafka's
``handleTopicMetadataRequest``): a known id is answered as its
topic by name (never auto-created), an unknown one UNKNOWN_TOPIC_ID with a null name, and one the principal may
not DESCRIBE TOPIC_AUTHORIZATION_FAILED with a null name and the id (ids are not secret, names are).
"""

from __future__ import annotations

import uuid
from typing import Any

from broker_runtime.coordinator.group import CONSUMER_OFFSETS_TOPIC
from broker_runtime.coordinator.transaction import TRANSACTION_STATE_TOPIC
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, metadata
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.cluster import ClusterView
from broker_runtime.server.context import BrokerContext, HandlerResult, answer_after_loads
from broker_runtime.server.topics import TopicError, topic_name_error

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle", "may_create"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = metadata.REQUEST
MIN_VERSION = 0
MAX_VERSION = 13

_NO_OPERATIONS = -(2**31)
_ZERO_UUID = uuid.UUID(int=0)
#: The coordinators' topics, marked ``IsInternal`` as Kafka does (regex subscriptions skip them).
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def _topic(
    view: ClusterView, name: str | None, code: int, topic_id: uuid.UUID | None = None
) -> dict[str, Any]:
    """One topic's entry, from the one view of the cluster its answer reads (a single broker's view is built
    from its topics on each read of ``ctx.cluster.view``: a view per topic made an all-topics answer quadratic,
    6.5 s for 1,000 topics)."""
    info = view.topics.get(name) if name is not None and code == ErrorCode.NONE else None

    def offline(replicas: tuple[int, ...]) -> list[int]:
        return [r for r in replicas if r not in view.brokers or view.brokers[r].fenced]

    partitions = [
        {
            "ErrorCode": ErrorCode.NONE if p.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            "PartitionIndex": index,
            "LeaderId": p.leader,
            "LeaderEpoch": p.leader_epoch,
            "ReplicaNodes": list(p.replicas),
            "IsrNodes": list(p.isr),
            "OfflineReplicas": offline(p.replicas),
        }
        for index, p in enumerate(info.partitions if info is not None else ())
    ]
    return {
        "ErrorCode": code,
        "Name": name,
        # the id of a topic answered with an error is not revealed (Kafka answers the zero id then)
        "TopicId": topic_id if topic_id is not None else view.topic_id(name if info is not None else None),
        "IsInternal": name in INTERNAL_TOPICS,
        "Partitions": partitions,
        "TopicAuthorizedOperations": _NO_OPERATIONS,
    }


def _auto_create(ctx: BrokerContext, name: str) -> ErrorCode:
    cfg = ctx.config
    try:
        ctx.cluster.create_topic(name, cfg.num_partitions, cfg.default_replication_factor, {})
    except TopicError as exc:
        if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:  # being created right now: retriable, as in Kafka
            return ErrorCode.LEADER_NOT_AVAILABLE
        return ErrorCode(exc.code)
    ctx.refresh_cluster()
    return ErrorCode.NONE


def may_create(ctx: BrokerContext, name: str) -> bool:
    """CREATE on the cluster or on the topic (Kafka's rule for CreateTopics and auto-creation)."""
    return ctx.authorized_cluster(AclOperation.CREATE) or ctx.authorized(
        AclOperation.CREATE, ResourceType.TOPIC, name
    )


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> HandlerResult:
    version = header.api_version
    requested = body["Topics"]
    allow_auto = ctx.config.auto_create_topics_enable and (version < 4 or body["AllowAutoTopicCreation"])
    ctx.refresh_cluster()  # one stat of the shared file: answers never lag a change already recorded
    view = ctx.cluster.view
    #: (name, error code) of each requested topic, the codes of auto-created ones fixed at creation
    entries: list[tuple[str | None, int]] = []
    #: the ids of entries asked by id and answered without a name (unknown, or not describable)
    asked_ids: dict[int, uuid.UUID] = {}
    created: list[str] = []
    names_of_ids: dict[uuid.UUID, str] | None = None  # the view's ids, made on the first topic asked by id
    if requested is None or (version == 0 and not requested):
        # every topic the principal may DESCRIBE; the others are left out, as Kafka does
        entries = [
            (name, ErrorCode.NONE)
            for name in sorted(view.topics)
            if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        ]
    else:
        for entry in requested:
            name = entry["Name"]
            # v12+: an entry with a topic id is asked by id whatever its name (Kafka's handler ignores the names
            # of a request by ids; Kafka's Java consumer subscribed to a pattern sends the empty name with them)
            by_id = version >= 12 and entry["TopicId"] is not None and entry["TopicId"] != _ZERO_UUID
            if name is None or by_id:
                # v10-11 carry topic ids but answer only by name (the name is not nullable in their response):
                # a null name is an invalid topic there; v12+ looks the id up.
                if version < 12:
                    entries.append(("", ErrorCode.INVALID_TOPIC_EXCEPTION))
                    continue
                topic_id = entry["TopicId"]
                if names_of_ids is None:
                    names_of_ids = view.names_by_id()
                found = names_of_ids.get(topic_id)
                if found is None:
                    asked_ids[len(entries)] = topic_id
                    entries.append((None, ErrorCode.UNKNOWN_TOPIC_ID))
                elif not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, found):
                    asked_ids[len(entries)] = topic_id
                    entries.append((None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                else:
                    entries.append((found, ErrorCode.NONE))
                continue
            if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                entries.append((name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            elif name in view.topics:
                entries.append((name, ErrorCode.NONE))
            elif topic_name_error(name) is not None:
                entries.append((name, ErrorCode.INVALID_TOPIC_EXCEPTION))
            elif allow_auto and not may_create(ctx, name):
                entries.append((name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            elif allow_auto:
                code = _auto_create(ctx, name)
                view = ctx.cluster.view  # the created topic is in the next read (a name asked twice)
                entries.append((name, code))
                if code == ErrorCode.NONE:
                    created.append(name)
            else:
                entries.append((name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))

    listener = ctx.request_session.listener  # the answer may be built later, during another request

    def answer(failures: dict[str, BaseException]) -> dict[str, Any]:
        view = ctx.cluster.view  # once per answer (it may be built later than the request: a fresh one)
        topics = [
            _topic(
                view,
                name,
                ErrorCode.KAFKA_STORAGE_ERROR if name in failures and name in created else code,
                asked_ids.get(i),
            )
            for i, (name, code) in enumerate(entries)
        ]
        brokers = sorted((b for b in view.brokers.values() if not b.fenced), key=lambda b: b.node_id)
        return {
            "ThrottleTimeMs": 0,
            "Brokers": [
                {"NodeId": b.node_id, "Host": host, "Port": port, "Rack": None}
                for b, (host, port) in ((b, ctx.endpoint_of(b, listener)) for b in brokers)
            ],
            "ClusterId": ctx.config.cluster_id,
            "ControllerId": view.controller_id,
            "Topics": topics,
            "ClusterAuthorizedOperations": _NO_OPERATIONS,
            "ErrorCode": ErrorCode.NONE,  # v13+: pylog never asks a client to bootstrap again
        }

    # A topic is answered once this broker's logs of it exist: an auto-created one (single node), and in a
    # cluster the partitions the metadata assigned here (made on the partition-load thread, see TopicManager),
    # so "this broker knows the topic" means "it hosts its replicas".
    names = {name for name, code in entries if name is not None and code == ErrorCode.NONE}
    return answer_after_loads(ctx, sorted(names), answer)
