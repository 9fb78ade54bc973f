"""The records of the ``__consumer_offsets`` topic, in Kafka's format, and the partition a group maps to.

The classic records, told apart by the int16 version that starts the key (the consumer groups' records of
KIP-848 share the topic with key types 3-8, :mod:`.consumer_records`):

* committed offset, key version 1 (0 is read too): ``OffsetCommitKey`` = ``group string, topic string,
  partition int32``; value version 3 (0-3 are read): ``OffsetCommitValue`` = ``offset int64, leaderEpoch int32
  (v3+), metadata string, commitTimestamp int64, expireTimestamp int64 (v1 only)``. A null value (tombstone)
  removes the committed offset (OffsetDelete, expiration, DeleteGroups).
* group metadata, key version 2: ``GroupMetadataKey`` = ``group string``; value version 3 (0-3 are read):
  ``GroupMetadataValue`` = ``protocolType string, generation int32, protocol string?, leader string?,
  currentStateTimestamp int64 (v2+), members [memberId string, groupInstanceId string? (v3+), clientId string,
  clientHost string, rebalanceTimeout int32 (v1+), sessionTimeout int32, subscription bytes, assignment
  bytes]``. A tombstone removes the group.

All strings are int16-length (non-flexible versions). The partition of a group is Kafka's
``abs(groupId.hashCode) % offsets.topic.num.partitions``, so a Kafka tool finds the same partition. Pure
functions: thread-safe.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker_runtime.coordinator.placement import partition_for
from broker_runtime.errors import CorruptRecordError
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = [
    "CONSUMER_OFFSETS_TOPIC",
    "GroupMetadataRecord",
    "MemberRecord",
    "OffsetRecord",
    "decode_key",
    "decode_group_value",
    "decode_offset_value",
    "encode_group_key",
    "encode_group_value",
    "encode_offset_key",
    "encode_offset_value",
    "partition_for",
]

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"

_VERSION = struct.Struct(">h")
_OFFSET_KEY_VERSION = 1
_OFFSET_VALUE_VERSION = 3
_GROUP_KEY_VERSION = 2
_GROUP_VALUE_VERSION = 3

_OFFSET_KEY = Message(
    "OffsetCommitKey",
    api_key=-1,
    versions="0-1",
    flexible="none",
    fields=[
        Field("Group", "string", "0+"),
        Field("Topic", "string", "0+"),
        Field("Partition", "int32", "0+"),
    ],
)
_OFFSET_VALUE = Message(
    "OffsetCommitValue",
    api_key=-1,
    versions="0-3",
    flexible="none",
    fields=[
        Field("Offset", "int64", "0+"),
        Field("LeaderEpoch", "int32", "3+", default=-1),
        Field("Metadata", "string", "0+"),
        Field("CommitTimestamp", "int64", "0+"),
        Field("ExpireTimestamp", "int64", "1", default=-1),
    ],
)
_GROUP_KEY = Message(
    "GroupMetadataKey", api_key=-1, versions="2", flexible="none", fields=[Field("Group", "string", "2")]
)
_GROUP_VALUE = Message(
    "GroupMetadataValue",
    api_key=-1,
    versions="0-3",
    flexible="none",
    fields=[
        Field("ProtocolType", "string", "0+"),
        Field("Generation", "int32", "0+"),
        Field("Protocol", "string", "0+", nullable="0+"),
        Field("Leader", "string", "0+", nullable="0+"),
        Field("CurrentStateTimestamp", "int64", "2+", default=-1),
        Field(
            "Members",
            "[]MemberMetadata",
            "0+",
            fields=[
                Field("MemberId", "string", "0+"),
                Field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
                Field("ClientId", "string", "0+"),
                Field("ClientHost", "string", "0+"),
                Field("RebalanceTimeout", "int32", "1+"),
                Field("SessionTimeout", "int32", "0+"),
                Field("Subscription", "bytes", "0+"),
                Field("Assignment", "bytes", "0+"),
            ],
        ),
    ],
)


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    """One decoded ``OffsetCommitValue``."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    """One decoded ``GroupMetadataValue``."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp_ms: int
    members: tuple[MemberRecord, ...]


def _version(data: bytes | memoryview, what: str) -> int:
    if len(data) < 2:
        raise CorruptRecordError(f"__consumer_offsets {what} of {len(data)} bytes has no version")
    return int(_VERSION.unpack_from(data, 0)[0])


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return _VERSION.pack(_OFFSET_KEY_VERSION) + _OFFSET_KEY.encode(
        {"Group": group, "Topic": topic, "Partition": partition}, _OFFSET_KEY_VERSION
    )


def encode_group_key(group: str) -> bytes:
    return _VERSION.pack(_GROUP_KEY_VERSION) + _GROUP_KEY.encode({"Group": group}, _GROUP_KEY_VERSION)


def decode_key(data: bytes | memoryview) -> tuple[str, str | None, int]:
    """``(group, topic, partition)`` of an offset key, ``(group, None, -1)`` of a group metadata key."""
    version = _version(data, "key")
    if version in (0, 1):
        body = _OFFSET_KEY.decode(data, 2, version)[0]
        return body["Group"], body["Topic"], body["Partition"]
    if version == _GROUP_KEY_VERSION:
        return _GROUP_KEY.decode(data, 2, version)[0]["Group"], None, -1
    raise CorruptRecordError(f"__consumer_offsets key version {version} is unknown (0-2 are read)")


def encode_offset_value(value: OffsetRecord) -> bytes:
    return _VERSION.pack(_OFFSET_VALUE_VERSION) + _OFFSET_VALUE.encode(
        {
            "Offset": value.offset,
            "LeaderEpoch": value.leader_epoch,
            "Metadata": value.metadata,
            "CommitTimestamp": value.commit_timestamp_ms,
        },
        _OFFSET_VALUE_VERSION,
    )


def decode_offset_value(data: bytes | memoryview) -> OffsetRecord:
    version = _version(data, "offset value")
    if not 0 <= version <= 3:
        raise CorruptRecordError(
            f"__consumer_offsets offset value version {version} is unknown (0-3 are read)"
        )
    body = _OFFSET_VALUE.decode(data, 2, version)[0]
    return OffsetRecord(body["Offset"], body["LeaderEpoch"], body["Metadata"], body["CommitTimestamp"])


def encode_group_value(value: GroupMetadataRecord) -> bytes:
    return _VERSION.pack(_GROUP_VALUE_VERSION) + _GROUP_VALUE.encode(
        {
            "ProtocolType": value.protocol_type,
            "Generation": value.generation,
            "Protocol": value.protocol,
            "Leader": value.leader,
            "CurrentStateTimestamp": value.state_timestamp_ms,
            "Members": [
                {
                    "MemberId": m.member_id,
                    "GroupInstanceId": m.group_instance_id,
                    "ClientId": m.client_id,
                    "ClientHost": m.client_host,
                    "RebalanceTimeout": m.rebalance_timeout_ms,
                    "SessionTimeout": m.session_timeout_ms,
                    "Subscription": m.subscription,
                    "Assignment": m.assignment,
                }
                for m in value.members
            ],
        },
        _GROUP_VALUE_VERSION,
    )


def decode_group_value(data: bytes | memoryview) -> GroupMetadataRecord:
    version = _version(data, "group value")
    if not 0 <= version <= 3:
        raise CorruptRecordError(
            f"__consumer_offsets group value version {version} is unknown (0-3 are read)"
        )
    body = _GROUP_VALUE.decode(data, 2, version)[0]
    members = tuple(
        MemberRecord(
            m["MemberId"],
            m["GroupInstanceId"],
            m["ClientId"],
            m["ClientHost"],
            m["RebalanceTimeout"] if version >= 1 else m["SessionTimeout"],
            m["SessionTimeout"],
            bytes(m["Subscription"]),
            bytes(m["Assignment"]),
        )
        for m in body["Members"]
    )
    return GroupMetadataRecord(
        body["ProtocolType"],
        body["Generation"],
        body["Protocol"],
        body["Leader"],
        body["CurrentStateTimestamp"],
        members,
    )
