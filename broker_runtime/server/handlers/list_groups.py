"""ListGroups (key 16, v0-5): the groups this broker coordinates, with their protocol type, state and type.

``StatesFilter`` (v4+) keeps groups in the named states (case-insensitive, Kafka's state names);
``TypesFilter`` (v5+) keeps the groups of the named types (``classic``, ``consumer``: KIP-848). A consumer group's
state is Kafka's ``ConsumerGroupState`` (Empty, Assigning, Reconciling, Stable).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, list_groups
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = list_groups.REQUEST
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    coordinator = ctx.group_coordinator
    states = {s.lower() for s in body["StatesFilter"]}
    types = {t.lower() for t in body["TypesFilter"]}
    # DESCRIBE on the cluster lists every group; else only the groups the principal may DESCRIBE (Kafka)
    everything = ctx.authorized_cluster(AclOperation.DESCRIBE)
    groups = [
        {
            "GroupId": g.group_id,
            "ProtocolType": g.protocol_type or "",
            "GroupState": state,
            "GroupType": g.group_type,
        }
        for g in coordinator.list_groups()
        for state in [g.state.value if g.consumer is None else g.consumer.state()]
        if (not states or state.lower() in states)
        and (not types or g.group_type in types)
        and (everything or ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id))
    ]
    return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.NONE, "Groups": groups}
