"""CreateAcls (key 30, v0-3): add ACL bindings (ALTER on the cluster).

Without an authorizer every creation answers SECURITY_DISABLED (as Kafka). A caller without ALTER on the
cluster gets CLUSTER_AUTHORIZATION_FAILED for each. A binding Kafka would refuse (unknown or ANY enum values,
a PREFIXED ``*``, a cluster resource not named ``kafka-cluster``, a principal without ``Type:``) answers
INVALID_REQUEST with the reason; the valid ones of the same request are stored in one write (an existing
equal binding is kept once). The write is durable before the answer (see :mod:`broker_runtime.server.cluster`).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, acls
from broker_runtime.security.acl import (
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.topics import TopicError

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "enum_or_unknown", "handle"]

REQUEST = acls.CREATE_REQUEST
MIN_VERSION = 0
MAX_VERSION = 3


def enum_or_unknown(kind: Any, value: int) -> Any:
    """``kind(value)``, or ``kind.UNKNOWN`` for a value Kafka's enum does not have."""
    try:
        return kind(value)
    except ValueError:
        return kind.UNKNOWN


def _binding(c: dict[str, Any]) -> AclBinding:
    return AclBinding(
        enum_or_unknown(ResourceType, c["ResourceType"]),
        c["ResourceName"],
        enum_or_unknown(PatternType, c["ResourcePatternType"]),
        c["Principal"],
        c["Host"],
        enum_or_unknown(AclOperation, c["Operation"]),
        enum_or_unknown(AclPermission, c["PermissionType"]),
    )


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    creations = body["Creations"]

    def all_fail(code: int, message: str) -> dict[str, Any]:
        return {
            "ThrottleTimeMs": 0,
            "Results": [{"ErrorCode": code, "ErrorMessage": message} for _ in creations],
        }

    if ctx.authorizer is None:
        return all_fail(ErrorCode.SECURITY_DISABLED, "No authorizer is configured on the broker")
    if not ctx.authorized_cluster(AclOperation.ALTER):
        return all_fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "ALTER on the cluster is required")
    results: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for c in creations:
        b = _binding(c)
        problem = b.problem()
        if problem is not None:
            results.append({"ErrorCode": ErrorCode.INVALID_REQUEST, "ErrorMessage": problem})
        else:
            valid.append(b)
            results.append({"ErrorCode": ErrorCode.NONE, "ErrorMessage": None})

    def add(current: tuple[AclBinding, ...]) -> tuple[AclBinding, ...]:
        out = list(current)
        for b in valid:
            if b not in out:
                out.append(b)
        return tuple(out)

    if valid:
        try:
            ctx.cluster.update_acls(add)
        except (TopicError, OSError) as exc:
            code = exc.code if isinstance(exc, TopicError) else ErrorCode.UNKNOWN_SERVER_ERROR
            return all_fail(code, f"ACLs not stored: {exc}")
    return {"ThrottleTimeMs": 0, "Results": results}
