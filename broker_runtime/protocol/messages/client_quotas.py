"""DescribeClientQuotas (API key 48): the client quotas matching a filter; AlterClientQuotas (API key 49): set
and remove client quotas.

Versions 0-1 of both; flexible from 1. A filter component names an entity type (``user``, ``client-id``,
``ip``) and a match type (:data:`MATCH_EXACT` with a name, :data:`MATCH_DEFAULT` and :data:`MATCH_SPECIFIED`
without one). An entity is a list of (type, name) pairs, a null name meaning the type's default entity; an
alteration's op sets ``Key`` to ``Value`` or, with ``Remove``, removes it. Definitions mirror Kafka's
DescribeClientQuotasRequest.json / DescribeClientQuotasResponse.json / AlterClientQuotasRequest.json /
AlterClientQuotasResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = [
    "ALTER_REQUEST",
    "ALTER_RESPONSE",
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

_ENTITY = Field(
    "Entity",
    "[]EntityData",
    "0+",
    fields=[
        Field("EntityType", "string", "0+"),
        Field("EntityName", "string", "0+", nullable="0+", default=None),
    ],
)

ALTER_REQUEST = Message(
    "AlterClientQuotasRequest",
    api_key=ApiKey.ALTER_CLIENT_QUOTAS,
    versions="0-1",
    flexible="1+",
    fields=[
        Field(
            "Entries",
            "[]EntryData",
            "0+",
            fields=[
                _ENTITY,
                Field(
                    "Ops",
                    "[]OpData",
                    "0+",
                    fields=[
                        Field("Key", "string", "0+"),
                        Field("Value", "float64", "0+"),
                        Field("Remove", "bool", "0+"),
                    ],
                ),
            ],
        ),
        Field("ValidateOnly", "bool", "0+"),
    ],
)

ALTER_RESPONSE = Message(
    "AlterClientQuotasResponse",
    api_key=ApiKey.ALTER_CLIENT_QUOTAS,
    versions="0-1",
    flexible="1+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Entries",
            "[]EntryData",
            "0+",
            fields=[
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
                _ENTITY,
            ],
        ),
    ],
)
