"""AlterConfigs (API key 33) and IncrementalAlterConfigs (API key 44): change topic and broker configs.

AlterConfigs versions 0-2 (flexible from 2) replaces a resource's whole set of dynamic configs: keys not named
are removed. IncrementalAlterConfigs versions 0-1 (flexible from 1) applies one operation per key
(:data:`SET`, :data:`DELETE`, :data:`APPEND`, :data:`SUBTRACT`; the last two for list-valued keys). Both answer
one result per resource. Resource types are DescribeConfigs' (2 topic, 4 broker). Definitions mirror Kafka's
AlterConfigs*.json / IncrementalAlterConfigs*.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = [
    "ALTER_API_KEY",
    "ALTER_REQUEST",
    "ALTER_RESPONSE",
    "APPEND",
    "DELETE",
    "INCREMENTAL_API_KEY",
    "INCREMENTAL_REQUEST",
    "INCREMENTAL_RESPONSE",
    "SET",
    "SUBTRACT",
]

ALTER_API_KEY = ApiKey.ALTER_CONFIGS
INCREMENTAL_API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
#: IncrementalAlterConfigs ``ConfigOperation`` values (Kafka's ``AlterConfigOp.OpType``).
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _response(name: str, api_key: int, versions: str, flexible: str) -> Message:
    return Message(
        name,
        api_key=api_key,
        versions=versions,
        flexible=flexible,
        fields=[
            Field("ThrottleTimeMs", "int32", "0+"),
            Field(
                "Responses",
                "[]AlterConfigsResourceResponse",
                "0+",
                fields=[
                    Field("ErrorCode", "int16", "0+"),
                    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
                    Field("ResourceType", "int8", "0+"),
                    Field("ResourceName", "string", "0+"),
                ],
            ),
        ],
    )


ALTER_REQUEST = Message(
    "AlterConfigsRequest",
    api_key=ALTER_API_KEY,
    versions="0-2",
    flexible="2+",
    fields=[
        Field(
            "Resources",
            "[]AlterConfigsResource",
            "0+",
            fields=[
                Field("ResourceType", "int8", "0+"),
                Field("ResourceName", "string", "0+"),
                Field(
                    "Configs",
                    "[]AlterableConfig",
                    "0+",
                    fields=[Field("Name", "string", "0+"), Field("Value", "string", "0+", nullable="0+")],
                ),
            ],
        ),
        Field("ValidateOnly", "bool", "0+"),
    ],
)
ALTER_RESPONSE = _response("AlterConfigsResponse", ALTER_API_KEY, "0-2", "2+")

INCREMENTAL_REQUEST = Message(
    "IncrementalAlterConfigsRequest",
    api_key=INCREMENTAL_API_KEY,
    versions="0-1",
    flexible="1+",
    fields=[
        Field(
            "Resources",
            "[]AlterConfigsResource",
            "0+",
            fields=[
                Field("ResourceType", "int8", "0+"),
                Field("ResourceName", "string", "0+"),
                Field(
                    "Configs",
                    "[]AlterableConfig",
                    "0+",
                    fields=[
                        Field("Name", "string", "0+"),
                        Field("ConfigOperation", "int8", "0+"),
                        Field("Value", "string", "0+", nullable="0+"),
                    ],
                ),
            ],
        ),
        Field("ValidateOnly", "bool", "0+"),
    ],
)
INCREMENTAL_RESPONSE = _response("IncrementalAlterConfigsResponse", INCREMENTAL_API_KEY, "0-1", "1+")
