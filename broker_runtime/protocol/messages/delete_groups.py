"""DeleteGroups (API key 42): remove groups without members, with their committed offsets.

Versions 0-3; flexible from 2; v3 adds a per-group ``ErrorMessage``. Definitions mirror Kafka's DeleteGroupsRequest.json / DeleteGroupsResponse.json.
Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.DELETE_GROUPS

REQUEST = Message(
    "DeleteGroupsRequest",
    api_key=API_KEY,
    versions="0-3",
    flexible="2+",
    fields=[Field("GroupsNames", "[]string", "0+")],
)

RESPONSE = Message(
    "DeleteGroupsResponse",
    api_key=API_KEY,
    versions="0-3",
    flexible="2+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Results",
            "[]DeletableGroupResult",
            "0+",
            fields=[
                Field("GroupId", "string", "0+"),
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "3+", nullable="3+", default=None),
            ],
        ),
    ],
)
