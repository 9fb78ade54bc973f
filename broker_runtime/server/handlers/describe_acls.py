"""DescribeAcls (key 29, v0-3): the ACL bindings matching one filter (DESCRIBE on the cluster).

Without an authorizer: SECURITY_DISABLED; without DESCRIBE on the cluster: CLUSTER_AUTHORIZATION_FAILED; a
filter with UNKNOWN values: INVALID_REQUEST. Bindings are grouped by resource pattern (type, name, pattern
type), as Kafka answers. Filter semantics: :class:`broker_runtime.security.acl.AclBindingFilter`.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, acls
from broker_runtime.security.acl import (
    AclBindingFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.handlers.create_acls import enum_or_unknown

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "acl_filter", "handle"]

REQUEST = acls.DESCRIBE_REQUEST
MIN_VERSION = 0
MAX_VERSION = 3


def acl_filter(f: dict[str, Any]) -> AclBindingFilter:
    """A DescribeAcls request body or DeleteAcls filter as an :class:`AclBindingFilter`."""
    return AclBindingFilter(
        enum_or_unknown(ResourceType, f["ResourceTypeFilter"]),
        f["ResourceNameFilter"],
        enum_or_unknown(PatternType, f["PatternTypeFilter"]),
        f["PrincipalFilter"],
        f["HostFilter"],
        enum_or_unknown(AclOperation, f["Operation"]),
        enum_or_unknown(AclPermission, f["PermissionType"]),
    )


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    def fail(code: ErrorCode, message: str) -> dict[str, Any]:
        return {"ThrottleTimeMs": 0, "ErrorCode": code, "ErrorMessage": message, "Resources": []}

    if ctx.authorizer is None:
        return fail(ErrorCode.SECURITY_DISABLED, "No authorizer is configured on the broker")
    if not ctx.authorized_cluster(AclOperation.DESCRIBE):
        return fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE on the cluster is required")
    flt = acl_filter(body)
    problem = flt.problem()
    if problem is not None:
        return fail(ErrorCode.INVALID_REQUEST, problem)
    ctx.refresh_cluster()
    grouped: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for b in ctx.cluster.view.acls:
        if flt.matches(b):
            grouped.setdefault((b.resource_type, b.name, b.pattern), []).append(
                {
                    "Principal": b.principal,
                    "Host": b.host,
                    "Operation": b.operation,
                    "PermissionType": b.permission,
                }
            )
    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": ErrorCode.NONE,
        "ErrorMessage": None,
        "Resources": [
            {"ResourceType": rt, "ResourceName": name, "PatternType": pattern, "Acls": rows}
            for (rt, name, pattern), rows in grouped.items()
        ],
    }
