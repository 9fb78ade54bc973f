"""DescribeClientQuotas (API key 48): the client quotas matching a filter.

Versions 0-1; flexible from 1. A filter component names an entity type (``user``, ``client-id``, ``ip``) and a
match type (:data:`MATCH_EXACT` with a name, :data:`MATCH_DEFAULT` and :data:`MATCH_SPECIFIED` without one).
Definitions mirror Kafka's DescribeClientQuotasRequest.json / DescribeClientQuotasResponse.json. Immutable;
thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = [
    "DESCRIBE_REQUEST",
    "DESCRIBE_RESPONSE",
    "ENTITY_TYPES",
    "MATCH_DEFAULT",
    "MATCH_EXACT",
    "MATCH_SPECIFIED",
]

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
#: Kafka's ``ClientQuotaEntity`` types.
ENTITY_TYPES = ("user", "client-id", "ip")

DESCRIBE_REQUEST = Message(
    "DescribeClientQuotasRequest",
    api_key=ApiKey.DESCRIBE_CLIENT_QUOTAS,
    versions="0-1",
    flexible="1+",
    fields=[
        Field(
            "Components",
            "[]ComponentData",
            "0+",
            fields=[
                Field("EntityType", "string", "0+"),
                Field("MatchType", "int8", "0+"),
                Field("Match", "string", "0+", nullable="0+", default=None),
            ],
        ),
        Field("Strict", "bool", "0+"),
    ],
)

DESCRIBE_RESPONSE = Message(
    "DescribeClientQuotasResponse",
    api_key=ApiKey.DESCRIBE_CLIENT_QUOTAS,
    versions="0-1",
    flexible="1+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        Field(
            "Entries",
            "[]EntryData",
            "0+",
            nullable="0+",
            fields=[
                Field(
                    "Entity",
                    "[]EntityData",
                    "0+",
                    fields=[
                        Field("EntityType", "string", "0+"),
                        Field("EntityName", "string", "0+", nullable="0+", default=None),
                    ],
                ),
                Field(
                    "Values",
                    "[]ValueData",
                    "0+",
                    fields=[Field("Key", "string", "0+"), Field("Value", "float64", "0+")],
                ),
            ],
        ),
    ],
)
