"""OffsetCommit (key 8, v0-9): store a group's consumed positions in ``__consumer_offsets``.

Thin: see :meth:`~broker_runtime.coordinator.group.GroupCoordinator.commit_offsets` (answered once the records are
appended and flushed). ``RetentionTimeMs`` (v2-4) is ignored: ``offsets.retention.minutes`` rules, as in Kafka from
v5. Without a group coordinator every partition answers NOT_COORDINATOR. In a cluster a group of a
``__consumer_offsets`` partition this node does not lead answers NOT_COORDINATOR, and the answer waits for the
replication of what the request wrote (:mod:`broker_runtime.server.groups`). v9 is v8 on the wire (KIP-848 made it
the consumer group protocol's first version); for a classic group it differs, as in Kafka, only in a commit with a
generation into a group that does not exist: GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from broker_runtime.coordinator.group import Committer, GroupCoordinator
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, offset_commit
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.groups import answer_after_group_write

__all__ = [
    "MAX_VERSION",
    "MIN_VERSION",
    "REQUEST",
    "commit_and_answer",
    "handle",
    "partition_errors",
    "replaced",
    "requested_offsets",
]

REQUEST = offset_commit.REQUEST
MIN_VERSION = 0
MAX_VERSION = 9


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    wanted = requested_offsets(body)
    # Kafka: a group without READ fails every partition; a topic without READ fails its own partitions and the
    # others are committed.
    refused = refused_offsets(ctx, body["GroupId"], wanted)
    if header.api_version >= 1:
        committer = Committer(body["GenerationIdOrMemberEpoch"], body["MemberId"], body["GroupInstanceId"])
    else:
        committer = Committer(group_instance_id=body["GroupInstanceId"])

    def commit(coordinator: GroupCoordinator, offsets: Offsets) -> dict[tuple[str, int], ErrorCode]:
        errors = coordinator.commit_offsets(body["GroupId"], committer, offsets)
        if header.api_version >= 9:
            return errors
        return {
            tp: ErrorCode.ILLEGAL_GENERATION if code == ErrorCode.GROUP_ID_NOT_FOUND else code
            for tp, code in errors.items()
        }

    return commit_and_answer(ctx, body, refused, commit)


Offsets = dict[tuple[str, int], tuple[int, int, str | None]]


def commit_and_answer(
    ctx: BrokerContext,
    body: dict[str, Any],
    refused: dict[tuple[str, int], ErrorCode],
    commit: Callable[[GroupCoordinator, Offsets], dict[tuple[str, int], ErrorCode]],
) -> Any:
    """The answer of an (Txn)OffsetCommit: the partitions not ``refused`` go to ``commit`` (unless none is left),
    and the answer waits for the replication of what it wrote."""
    coordinator = ctx.group_coordinator
    wanted = {tp: v for tp, v in requested_offsets(body).items() if tp not in refused}
    if refused and not wanted:  # every partition refused: nothing reaches the coordinator
        errors: dict[tuple[str, int], ErrorCode] = {}
    else:
        coordinator.take_appended()
        errors = commit(coordinator, wanted)
    return answer_after_group_write(
        ctx,
        lambda failed: {
            "ThrottleTimeMs": 0,
            "Topics": partition_errors(body["Topics"], {**replaced(errors, failed), **refused}),
        },
    )


def refused_offsets(
    ctx: BrokerContext, group_id: str, wanted: Mapping[tuple[str, int], Any]
) -> dict[tuple[str, int], ErrorCode]:
    """The partitions of an (Txn)OffsetCommit this principal may not commit, with their error: READ on the
    group (GROUP_AUTHORIZATION_FAILED for all) and READ on each topic (TOPIC_AUTHORIZATION_FAILED)."""
    if ctx.authorizer is None:
        return {}
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, group_id):
        return dict.fromkeys(wanted, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    denied = {t for t, _ in wanted if not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, t)}
    return {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in wanted if tp[0] in denied}


def replaced(
    errors: dict[tuple[str, int], ErrorCode], failed: ErrorCode | None
) -> dict[tuple[str, int], ErrorCode]:
    """``errors`` with every accepted partition's NONE replaced by ``failed`` (the write was not replicated)."""
    if failed is None:
        return errors
    return {tp: failed if code == ErrorCode.NONE else code for tp, code in errors.items()}


def requested_offsets(body: dict[str, Any]) -> Offsets:
    """(topic, partition) -> (offset, leader epoch, metadata) of an OffsetCommit or TxnOffsetCommit request."""
    return {
        (t["Name"], p["PartitionIndex"]): (
            p["CommittedOffset"],
            p["CommittedLeaderEpoch"],
            p["CommittedMetadata"],
        )
        for t in body["Topics"]
        for p in t["Partitions"]
    }


def partition_errors(
    topics: list[dict[str, Any]], errors: Mapping[tuple[str, int], int]
) -> list[dict[str, Any]]:
    """The per-topic, per-partition error codes of an offset answer, in the request's order."""
    return [
        {
            "Name": t["Name"],
            "Partitions": [
                {"PartitionIndex": p["PartitionIndex"], "ErrorCode": errors[(t["Name"], p["PartitionIndex"])]}
                for p in t["Partitions"]
            ],
        }
        for t in topics
    ]
