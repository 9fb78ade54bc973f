"""OffsetDelete (key 47, v0): remove a group's committed offsets of some partitions (KIP-496).

Thin: see :meth:`~broker_runtime.coordinator.group.GroupCoordinator.delete_offsets` (GROUP_ID_NOT_FOUND,
GROUP_SUBSCRIBED_TO_TOPIC per partition of a topic the members consume). Without a group coordinator the answer is
NOT_COORDINATOR. In a cluster a group of a ``__consumer_offsets`` partition this node does not lead answers
NOT_COORDINATOR, and the answer waits for the replication of what the request wrote
(:mod:`broker_runtime.server.groups`).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, offset_delete
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.groups import answer_after_group_write
from broker_runtime.server.handlers.offset_commit import partition_errors

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = offset_delete.REQUEST
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    coordinator = ctx.group_coordinator
    wanted = [(t["Name"], p["PartitionIndex"]) for t in body["Topics"] for p in t["Partitions"]]
    errors: dict[tuple[str, int], ErrorCode] = {}
    refused = {t for t, _ in wanted if not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, t)}
    wanted = [tp for tp in wanted if tp[0] not in refused]
    if not ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, body["GroupId"]):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        coordinator.take_appended()
        code, errors = coordinator.delete_offsets(body["GroupId"], wanted)

    def answer(failed: ErrorCode | None) -> dict[str, Any]:
        final = failed or code
        if final != ErrorCode.NONE:
            return {"ErrorCode": final, "ThrottleTimeMs": 0, "Topics": []}
        return {
            "ErrorCode": ErrorCode.NONE,
            "ThrottleTimeMs": 0,
            "Topics": partition_errors(
                body["Topics"],
                {
                    **errors,
                    **{
                        (t["Name"], p["PartitionIndex"]): ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        for t in body["Topics"]
                        if t["Name"] in refused
                        for p in t["Partitions"]
                    },
                },
            ),
        }

    return answer_after_group_write(ctx, answer)
