"""DeleteTopics (API key 20): delete topics by name (v0-5) or by name or topic id (v6).

Versions 0-6; flexible from 4. v0-5 carry ``TopicNames``; v6 carries ``Topics`` (name or id, name nullable).
The response carries an ``ErrorMessage`` from v5 and the topic id from v6. Definitions mirror Kafka's
DeleteTopicsRequest.json / DeleteTopicsResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.DELETE_TOPICS

REQUEST = Message(
    "DeleteTopicsRequest",
    api_key=API_KEY,
    versions="0-6",
    flexible="4+",
    fields=[
        Field(
            "Topics",
            "[]DeleteTopicState",
            "6+",
            fields=[
                Field("Name", "string", "6+", nullable="6+", default=None),
                Field("TopicId", "uuid", "6+"),
            ],
        ),
        Field("TopicNames", "[]string", "0-5"),
        Field("TimeoutMs", "int32", "0+", default=30000),
    ],
)

RESPONSE = Message(
    "DeleteTopicsResponse",
    api_key=API_KEY,
    versions="0-6",
    flexible="4+",
    fields=[
        Field("ThrottleTimeMs", "int32", "1+"),
        Field(
            "Responses",
            "[]DeletableTopicResult",
            "0+",
            fields=[
                Field("Name", "string", "0+", nullable="6+"),
                Field("TopicId", "uuid", "6+"),
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "5+", nullable="5+", default=None),
            ],
        ),
    ],
)
