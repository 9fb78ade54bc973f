"""DescribeClientQuotas (key 48, v0-1): the client quotas (set by AlterClientQuotas) matching a filter.

The entities of this broker's latest cluster view matching the filter, with their keys and values, matched as
Kafka's ``ClientQuotasImage.describe`` matches them (:func:`~broker_runtime.server.client_quotas.describe`).
Authorized as Kafka's ``KafkaApis``: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
The filter is validated as Kafka's ``ClientQuotasImage.describe`` validates it: an empty or repeated entity type, a match type other than 0-2, a name with MATCH_DEFAULT / MATCH_SPECIFIED or
none with MATCH_EXACT, and ``ip`` together with ``user`` or ``client-id`` answer INVALID_REQUEST; an entity type
other than ``user``, ``client-id`` and ``ip`` UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, client_quotas
from broker_runtime.security.acl import AclOperation
from broker_runtime.server.client_quotas import describe
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = client_quotas.DESCRIBE_REQUEST
MIN_VERSION = 0
MAX_VERSION = 1


def _filter_problem(components: list[dict[str, Any]]) -> tuple[ErrorCode, str] | None:
    seen: set[str] = set()
    for c in components:
        kind, match, name = c["EntityType"], c["MatchType"], c["Match"]
        if not kind:
            return ErrorCode.INVALID_REQUEST, "Invalid empty entity type."
        if kind in seen:
            return (
                ErrorCode.INVALID_REQUEST,
                f"Entity type {kind} cannot appear more than once in the filter.",
            )
        seen.add(kind)
        if kind not in client_quotas.ENTITY_TYPES:
            return ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}"
        if match == client_quotas.MATCH_EXACT and name is None:
            return (
                ErrorCode.INVALID_REQUEST,
                "Request specified MATCH_TYPE_EXACT, but set match string to null.",
            )
        if match in (client_quotas.MATCH_DEFAULT, client_quotas.MATCH_SPECIFIED) and name is not None:
            which = "MATCH_TYPE_DEFAULT" if match == client_quotas.MATCH_DEFAULT else "MATCH_TYPE_SPECIFIED"
            return ErrorCode.INVALID_REQUEST, f"Request specified {which}, but also specified a match string."
        if match not in (
            client_quotas.MATCH_EXACT,
            client_quotas.MATCH_DEFAULT,
            client_quotas.MATCH_SPECIFIED,
        ):
            return ErrorCode.INVALID_REQUEST, f"Unknown match type {match}"
    if "ip" in seen and seen & {"user", "client-id"}:
        return (
            ErrorCode.INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component should not be used with user or "
            "clientId filter component.",
        )
    return None


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    def fail(code: ErrorCode, message: str) -> dict[str, Any]:
        return {"ThrottleTimeMs": 0, "ErrorCode": code, "ErrorMessage": message, "Entries": None}

    if not ctx.authorized_cluster(AclOperation.DESCRIBE_CONFIGS):
        return fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE_CONFIGS on the cluster is required")
    problem = _filter_problem(body["Components"])
    if problem is not None:
        return fail(*problem)
    entries = describe(ctx.cluster.view.client_quotas, body["Components"], bool(body["Strict"]))
    return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.NONE, "ErrorMessage": None, "Entries": entries}
