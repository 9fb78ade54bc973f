"""AlterClientQuotas (key 49, v0-1): set and remove client quotas of users, client ids, their defaults and IPs.

Authorized as Kafka's ``ControllerApis``: ALTER_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED for
every entry. Each entry is checked as Kafka's ``ClientQuotaControlManager`` checks it
(:func:`~broker_runtime.server.client_quotas.alteration_problem`: INVALID_REQUEST naming the entity, key or
value); an entity named twice in one request answers INVALID_REQUEST for each of its entries. The valid entries
are written together in one change of the cluster metadata (Kafka's atomic controller result: entries that
failed change nothing, the others all apply), unless ``ValidateOnly``; an entity left without keys is removed.
The new quotas apply to this broker before the answer (other brokers of a cluster: when they see the change),
and one INFO line says who changed which entities. A metadata write that times out answers REQUEST_TIMED_OUT for
every valid entry.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, client_quotas
from broker_runtime.security.acl import AclOperation
from broker_runtime.server.client_quotas import (
    Entity,
    QuotaMap,
    alteration_problem,
    altered,
    entity_of,
    entity_text,
)
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.topics import TopicError

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = client_quotas.ALTER_REQUEST
MIN_VERSION = 0
MAX_VERSION = 1

_log = logging.getLogger(__name__)


def _pairs(entry: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(e["EntityType"], e["EntityName"]) for e in entry["Entity"]]


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    entries: list[dict[str, Any]] = body["Entries"]
    results: list[dict[str, Any]] = [
        {"ErrorCode": ErrorCode.NONE, "ErrorMessage": None, "Entity": entry["Entity"]} for entry in entries
    ]

    def fail(index: int, code: ErrorCode | int, message: str) -> None:
        results[index].update(ErrorCode=code, ErrorMessage=message)

    if not ctx.authorized_cluster(AclOperation.ALTER_CONFIGS):
        for i in range(len(entries)):
            fail(i, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "ALTER_CONFIGS on the cluster is required")
        return {"ThrottleTimeMs": 0, "Entries": results}
    named = Counter(entity_of(_pairs(entry)) for entry in entries)
    changes: dict[Entity, list[dict[str, Any]]] = {}
    valid: list[int] = []
    for i, entry in enumerate(entries):
        pairs = _pairs(entry)
        problem = alteration_problem(pairs, entry["Ops"])
        entity = entity_of(pairs)
        if problem is None and named[entity] > 1:
            problem = ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {entity_text(entity)}"
        if problem is not None:
            fail(i, *problem)
            continue
        changes[entity] = entry["Ops"]
        valid.append(i)
    if changes and not body["ValidateOnly"]:

        def change(current: QuotaMap) -> dict[Entity, dict[str, float]]:
            out = {entity: dict(values) for entity, values in current.items()}
            for entity, ops in changes.items():
                out[entity] = altered(out.get(entity, {}), ops)
            return {entity: values for entity, values in out.items() if values}

        try:
            ctx.cluster.update_client_quotas(change)
        except TopicError as exc:
            for i in valid:
                fail(i, exc.code, exc.detail)
            return {"ThrottleTimeMs": 0, "Entries": results}
        ctx.apply_broker_configs()
        _log.info(
            "client quotas changed by %s: %s",
            ctx.request_session.principal,
            "; ".join(
                f"{entity_text(e)}: "
                + ", ".join(f"{o['Key']}={'<removed>' if o['Remove'] else o['Value']}" for o in ops)
                for e, ops in changes.items()
            ),
        )
    return {"ThrottleTimeMs": 0, "Entries": results}
