"""DeleteAcls (key 31, v0-3): remove the ACL bindings matching each filter (ALTER on the cluster).

Without an authorizer every filter answers SECURITY_DISABLED; without ALTER on the cluster
CLUSTER_AUTHORIZATION_FAILED; a filter with UNKNOWN values INVALID_REQUEST. The matching bindings of all
filters are removed in one durable write; each filter's answer lists the bindings it matched (a binding matched
by two filters is listed under both, as Kafka does).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, acls
from broker_runtime.security.acl import AclBinding, AclBindingFilter, AclOperation
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.handlers.describe_acls import acl_filter
from broker_runtime.server.topics import TopicError

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = acls.DELETE_REQUEST
MIN_VERSION = 0
MAX_VERSION = 3


def _row(b: AclBinding) -> dict[str, Any]:
    return {
        "ErrorCode": ErrorCode.NONE,
        "ErrorMessage": None,
        "ResourceType": b.resource_type,
        "ResourceName": b.name,
        "PatternType": b.pattern,
        "Principal": b.principal,
        "Host": b.host,
        "Operation": b.operation,
        "PermissionType": b.permission,
    }


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    filters = body["Filters"]

    def all_fail(code: int, message: str) -> dict[str, Any]:
        return {
            "ThrottleTimeMs": 0,
            "FilterResults": [
                {"ErrorCode": code, "ErrorMessage": message, "MatchingAcls": []} for _ in filters
            ],
        }

    if ctx.authorizer is None:
        return all_fail(ErrorCode.SECURITY_DISABLED, "No authorizer is configured on the broker")
    if not ctx.authorized_cluster(AclOperation.ALTER):
        return all_fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "ALTER on the cluster is required")
    parsed: list[AclBindingFilter | str] = []
    for f in filters:
        one = acl_filter(f)
        problem = one.problem()
        parsed.append(problem if problem is not None else one)
    matched: list[list[AclBinding]] = [[] for _ in filters]

    def remove(current: tuple[AclBinding, ...]) -> tuple[AclBinding, ...]:
        for i, flt in enumerate(parsed):
            matched[i] = [] if isinstance(flt, str) else [b for b in current if flt.matches(b)]
        gone = {b for rows in matched for b in rows}
        return tuple(b for b in current if b not in gone)

    try:
        ctx.cluster.update_acls(remove)
    except (TopicError, OSError) as exc:
        code = exc.code if isinstance(exc, TopicError) else ErrorCode.UNKNOWN_SERVER_ERROR
        return all_fail(code, f"ACLs not deleted: {exc}")
    results: list[dict[str, Any]] = []
    for flt, rows in zip(parsed, matched, strict=True):
        if isinstance(flt, str):
            results.append({"ErrorCode": ErrorCode.INVALID_REQUEST, "ErrorMessage": flt, "MatchingAcls": []})
        else:
            results.append(
                {"ErrorCode": ErrorCode.NONE, "ErrorMessage": None, "MatchingAcls": [_row(b) for b in rows]}
            )
    return {"ThrottleTimeMs": 0, "FilterResults": results}
