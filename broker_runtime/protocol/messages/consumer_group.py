"""ConsumerGroupHeartbeat (API key 68) and ConsumerGroupDescribe (API key 69): the consumer group protocol of
KIP-848 (server-side assignment, member epochs).

Both flexible from v0. ConsumerGroupHeartbeat v0-1 (v1: ``SubscribedTopicRegex``; the client makes its member id,
KIP-1082); ConsumerGroupDescribe v0-1 (v1: the member's ``MemberType``, KIP-1099). Topics are named by topic id
in the heartbeat, by id and name in the description. Definitions mirror Kafka's ConsumerGroupHeartbeatRequest.json /
ConsumerGroupHeartbeatResponse.json / ConsumerGroupDescribeRequest.json / ConsumerGroupDescribeResponse.json.
Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["DESCRIBE_REQUEST", "DESCRIBE_RESPONSE", "HEARTBEAT_REQUEST", "HEARTBEAT_RESPONSE"]


def _topic_partitions(*, named: bool = False) -> list[Field]:
    fields = [Field("TopicId", "uuid", "0+")]
    if named:
        fields.append(Field("TopicName", "string", "0+"))
    fields.append(Field("Partitions", "[]int32", "0+"))
    return fields


HEARTBEAT_REQUEST = Message(
    "ConsumerGroupHeartbeatRequest",
    api_key=ApiKey.CONSUMER_GROUP_HEARTBEAT,
    versions="0-1",
    flexible="0+",
    fields=[
        Field("GroupId", "string", "0+"),
        Field("MemberId", "string", "0+"),
        Field("MemberEpoch", "int32", "0+"),
        Field("InstanceId", "string", "0+", nullable="0+", default=None),
        Field("RackId", "string", "0+", nullable="0+", default=None),
        Field("RebalanceTimeoutMs", "int32", "0+", default=-1),
        Field("SubscribedTopicNames", "[]string", "0+", nullable="0+", default=None),
        Field("SubscribedTopicRegex", "string", "1+", nullable="1+", default=None),
        Field("ServerAssignor", "string", "0+", nullable="0+", default=None),
        Field(
            "TopicPartitions",
            "[]TopicPartitions",
            "0+",
            nullable="0+",
            default=None,
            fields=_topic_partitions(),
        ),
    ],
)

HEARTBEAT_RESPONSE = Message(
    "ConsumerGroupHeartbeatResponse",
    api_key=ApiKey.CONSUMER_GROUP_HEARTBEAT,
    versions="0-1",
    flexible="0+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        Field("MemberId", "string", "0+", nullable="0+", default=None),
        Field("MemberEpoch", "int32", "0+"),
        Field("HeartbeatIntervalMs", "int32", "0+"),
        Field(
            "Assignment",
            "Assignment",
            "0+",
            nullable="0+",
            default=None,
            fields=[Field("TopicPartitions", "[]TopicPartitions", "0+", fields=_topic_partitions())],
        ),
    ],
)

_ASSIGNMENT = [
    Field("TopicPartitions", "[]TopicPartitions", "0+", fields=_topic_partitions(named=True)),
]

DESCRIBE_REQUEST = Message(
    "ConsumerGroupDescribeRequest",
    api_key=ApiKey.CONSUMER_GROUP_DESCRIBE,
    versions="0-1",
    flexible="0+",
    fields=[
        Field("GroupIds", "[]string", "0+"),
        Field("IncludeAuthorizedOperations", "bool", "0+"),
    ],
)

DESCRIBE_RESPONSE = Message(
    "ConsumerGroupDescribeResponse",
    api_key=ApiKey.CONSUMER_GROUP_DESCRIBE,
    versions="0-1",
    flexible="0+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Groups",
            "[]DescribedGroup",
            "0+",
            fields=[
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
                Field("GroupId", "string", "0+"),
                Field("GroupState", "string", "0+", default=""),
                Field("GroupEpoch", "int32", "0+"),
                Field("AssignmentEpoch", "int32", "0+"),
                Field("AssignorName", "string", "0+", default=""),
                Field(
                    "Members",
                    "[]Member",
                    "0+",
                    fields=[
                        Field("MemberId", "string", "0+"),
                        Field("InstanceId", "string", "0+", nullable="0+", default=None),
                        Field("RackId", "string", "0+", nullable="0+", default=None),
                        Field("MemberEpoch", "int32", "0+"),
                        Field("ClientId", "string", "0+"),
                        Field("ClientHost", "string", "0+"),
                        Field("SubscribedTopicNames", "[]string", "0+"),
                        Field("SubscribedTopicRegex", "string", "0+", nullable="0+", default=None),
                        Field("Assignment", "Assignment", "0+", fields=_ASSIGNMENT),
                        Field("TargetAssignment", "Assignment", "0+", fields=_ASSIGNMENT),
                        Field("MemberType", "int8", "1+", default=-1),
                    ],
                ),
                Field("AuthorizedOperations", "int32", "0+", default=-(2**31)),
            ],
        ),
    ],
)
