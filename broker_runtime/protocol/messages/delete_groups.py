"""DeleteGroups (API key 42): remove groups without members, with their committed offsets.

Versions 0-2; flexible from 2. Definitions mirror Kafka's DeleteGroupsRequest.json / DeleteGroupsResponse.json.
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
    versions="0-2",
    flexible="2+",
    fields=[Field("GroupsNames", "[]string", "0+")],
)

RESPONSE = Message(
    "DeleteGroupsResponse",
    api_key=API_KEY,
    versions="0-2",
    flexible="2+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Results",
            "[]DeletableGroupResult",
            "0+",
            fields=[Field("GroupId", "string", "0+"), Field("ErrorCode", "int16", "0+")],
        ),
    ],
)
