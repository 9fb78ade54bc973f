"""DescribeConfigs (API key 32): the configuration of topics (resource type 2) and brokers (4).

Versions 0-4; flexible from 4. ``ConfigurationKeys`` null means all keys. ``IsDefault`` exists only in v0;
v1+ carries ``ConfigSource`` and, when asked, ``Synonyms``; v3+ adds ``ConfigType`` and ``Documentation``.
Definitions mirror Kafka's DescribeConfigsRequest.json / DescribeConfigsResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

import enum

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESOURCE_BROKER", "RESOURCE_TOPIC", "RESPONSE", "ConfigSource"]

API_KEY = ApiKey.DESCRIBE_CONFIGS
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


class ConfigSource(enum.IntEnum):
    """Where a config value comes from (the response's ``ConfigSource``), named as Kafka's admin client and
    ``kafka-configs`` name them; DescribeConfigs lists a value's sources highest precedence first."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


REQUEST = Message(
    "DescribeConfigsRequest",
    api_key=API_KEY,
    versions="0-4",
    flexible="4+",
    fields=[
        Field(
            "Resources",
            "[]DescribeConfigsResource",
            "0+",
            fields=[
                Field("ResourceType", "int8", "0+"),
                Field("ResourceName", "string", "0+"),
                Field("ConfigurationKeys", "[]string", "0+", nullable="0+"),
            ],
        ),
        Field("IncludeSynonyms", "bool", "1+", default=False),
        Field("IncludeDocumentation", "bool", "3+", default=False),
    ],
)

RESPONSE = Message(
    "DescribeConfigsResponse",
    api_key=API_KEY,
    versions="0-4",
    flexible="4+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Results",
            "[]DescribeConfigsResult",
            "0+",
            fields=[
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "0+", nullable="0+"),
                Field("ResourceType", "int8", "0+"),
                Field("ResourceName", "string", "0+"),
                Field(
                    "Configs",
                    "[]DescribeConfigsResourceResult",
                    "0+",
                    fields=[
                        Field("Name", "string", "0+"),
                        Field("Value", "string", "0+", nullable="0+"),
                        Field("ReadOnly", "bool", "0+"),
                        Field("IsDefault", "bool", "0"),
                        Field("ConfigSource", "int8", "1+", default=-1),
                        Field("IsSensitive", "bool", "0+"),
                        Field(
                            "Synonyms",
                            "[]DescribeConfigsSynonym",
                            "1+",
                            fields=[
                                Field("Name", "string", "1+"),
                                Field("Value", "string", "1+", nullable="0+"),
                                Field("Source", "int8", "1+"),
                            ],
                        ),
                        Field("ConfigType", "int8", "3+", default=0),
                        Field("Documentation", "string", "3+", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)
