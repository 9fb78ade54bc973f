"""ElectLeaders (API key 43): elect the preferred (0) or, with unclean election, any live (1) replica as leader.

Versions 0-2; flexible from 2. ``ElectionType`` exists from v1 (v0 is always preferred); ``TopicPartitions``
null means every partition; the response has a top-level ``ErrorCode`` from v1. Definitions mirror Kafka's
ElectLeadersRequest.json / ElectLeadersResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "ELECTION_PREFERRED", "ELECTION_UNCLEAN", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.ELECT_LEADERS
#: ``ElectionType`` values (Kafka's ``ElectionType``).
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1

REQUEST = Message(
    "ElectLeadersRequest",
    api_key=API_KEY,
    versions="0-2",
    flexible="2+",
    fields=[
        Field("ElectionType", "int8", "1+", default=ELECTION_PREFERRED),
        Field(
            "TopicPartitions",
            "[]TopicPartitions",
            "0+",
            nullable="0+",
            fields=[
                Field("Topic", "string", "0+"),
                Field("Partitions", "[]int32", "0+"),
            ],
        ),
        Field("TimeoutMs", "int32", "0+", default=60000),
    ],
)

RESPONSE = Message(
    "ElectLeadersResponse",
    api_key=API_KEY,
    versions="0-2",
    flexible="2+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field("ErrorCode", "int16", "1+", default=0),
        Field(
            "ReplicaElectionResults",
            "[]ReplicaElectionResult",
            "0+",
            fields=[
                Field("Topic", "string", "0+"),
                Field(
                    "PartitionResult",
                    "[]PartitionResult",
                    "0+",
                    fields=[
                        Field("PartitionId", "int32", "0+"),
                        Field("ErrorCode", "int16", "0+"),
                        Field("ErrorMessage", "string", "0+", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)
