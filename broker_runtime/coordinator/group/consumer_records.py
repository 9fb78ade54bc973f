"""The ``__consumer_offsets`` records of consumer groups (KIP-848), in Kafka 4.4's format, and the diff that
decides which of them a change of the group writes.

Record format (Kafka's ``CoordinatorRecordSerde``): the key starts with an int16 *record type* (Kafka's
``apiKey`` of the ``coordinator-key`` schema; the classic records' key versions 0-2 are the types below 3), then
the key struct at version 0, not flexible (int16-length strings); the value starts with an int16 version (0),
then the value struct, flexible (compact strings and arrays, tagged fields). A null value (tombstone) removes the
key. The types, each keyed by ``GroupId`` (and ``MemberId`` for the member records):

* 3 ``ConsumerGroupMetadata``: ``Epoch int32`` (the group epoch), tagged ``MetadataHash int64`` (tag 0, KIP-1101)
  and ``CreationTimeMs int64`` (tag 1, not written: pylog has no ``to_start_time`` reset).
* 4 ``ConsumerGroupPartitionMetadata``: not written since Kafka 4.1 (the hash replaced it); its tombstone is part of
  a group's deletion, as Kafka writes it; a record of it is read and ignored.
* 5 ``ConsumerGroupMemberMetadata``: ``InstanceId string?, RackId string?, ClientId, ClientHost,
  SubscribedTopicNames []string, SubscribedTopicRegex string?, RebalanceTimeoutMs int32, ServerAssignor string?``
  (tagged ``ClassicMemberMetadata`` never written: pylog's consumer-group members all speak the consumer protocol).
* 6 ``ConsumerGroupTargetAssignmentMetadata``: ``AssignmentEpoch int32`` (tagged ``AssignmentTimestamp`` not
  written).
* 7 ``ConsumerGroupTargetAssignmentMember``: ``TopicPartitions [TopicId uuid, Partitions []int32]``.
* 8 ``ConsumerGroupCurrentMemberAssignment``: ``MemberEpoch int32, PreviousMemberEpoch int32, State int8
  (Kafka's MemberState: 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS), AssignedPartitions,
  PartitionsPendingRevocation`` (both ``[TopicId, Partitions]``).
* 16 ``ConsumerGroupRegularExpression``, keyed by ``GroupId`` and ``RegularExpression``: ``Topics []string`` (what
  the expression resolved to), ``Version int64`` (pylog: :func:`.regex.topics_fingerprint` of the topics scanned;
  Kafka: its metadata image's offset), ``Timestamp int64`` (when it was resolved).

Topics are named by id in the records (KIP-516) and by name in the coordinator (:mod:`.consumer_state`): a
topic without an id is left out of what is written (it is not assigned anyway); an id that names no topic at
replay (the topic was deleted) is dropped. ``MetadataHash`` is pylog's own hash of the subscribed topics'
partition counts (Kafka's is of its topic image; either side treats a different hash as "the topics changed"
and bumps the group epoch once).

What a change writes (:func:`group_records` and :func:`diff`): the coordinator keeps, per group, the value last
written under each key (``ConsumerGroupState.written``, filled by the replay too); a change appends exactly the
records whose value differs, and a tombstone for each key no longer there (a member fenced or gone: its current
assignment, target assignment and member metadata, in Kafka's order), so a heartbeat that changes nothing writes
nothing. Pure functions: thread-safe.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker_runtime.coordinator.group.consumer_state import (
    Assignment,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
)
from broker_runtime.errors import CorruptRecordError
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = [
    "CONSUMER_RECORD_TYPES",
    "GROUP_METADATA",
    "CURRENT_ASSIGNMENT",
    "MEMBER_METADATA",
    "PARTITION_METADATA",
    "REGULAR_EXPRESSION",
    "TARGET_MEMBER",
    "TARGET_METADATA",
    "ConsumerRecord",
    "decode",
    "deletion",
    "diff",
    "group_key",
    "group_records",
    "metadata_hash",
    "record_type",
]

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
REGULAR_EXPRESSION = 16
CONSUMER_RECORD_TYPES = frozenset((*range(GROUP_METADATA, CURRENT_ASSIGNMENT + 1), REGULAR_EXPRESSION))

_VERSION = struct.Struct(">h")
_VALUE_VERSION = 0

#: Kafka's MemberState byte values.
_STATE_VALUE = {
    MemberState.STABLE: 0,
    MemberState.UNREVOKED_PARTITIONS: 1,
    MemberState.UNRELEASED_PARTITIONS: 2,
}
_STATE_OF = {v: k for k, v in _STATE_VALUE.items()}


def _key(name: str, with_member: bool, second: str = "MemberId") -> Message:
    fields = [Field("GroupId", "string", "0")]
    if with_member:
        fields.append(Field(second, "string", "0"))
    return Message(name, api_key=-1, versions="0", flexible="none", fields=fields)


def _topic_partitions(name: str) -> Field:
    return Field(
        name,
        "[]TopicPartitions",
        "0+",
        fields=[Field("TopicId", "uuid", "0+"), Field("Partitions", "[]int32", "0+")],
    )


_KEYS = {
    GROUP_METADATA: _key("ConsumerGroupMetadataKey", False),
    PARTITION_METADATA: _key("ConsumerGroupPartitionMetadataKey", False),
    MEMBER_METADATA: _key("ConsumerGroupMemberMetadataKey", True),
    TARGET_METADATA: _key("ConsumerGroupTargetAssignmentMetadataKey", False),
    TARGET_MEMBER: _key("ConsumerGroupTargetAssignmentMemberKey", True),
    CURRENT_ASSIGNMENT: _key("ConsumerGroupCurrentMemberAssignmentKey", True),
    REGULAR_EXPRESSION: _key("ConsumerGroupRegularExpressionKey", True, "RegularExpression"),
}

_VALUES = {
    GROUP_METADATA: Message(
        "ConsumerGroupMetadataValue",
        api_key=-1,
        versions="0",
        flexible="0+",
        fields=[
            Field("Epoch", "int32", "0+"),
            Field("MetadataHash", "int64", "0+", tag=0, tagged="0+", default=0),
            Field("CreationTimeMs", "int64", "0+", tag=1, tagged="0+", default=-1),
        ],
    ),
    MEMBER_METADATA: Message(
        "ConsumerGroupMemberMetadataValue",
        api_key=-1,
        versions="0",
        flexible="0+",
        fields=[
            Field("InstanceId", "string", "0+", nullable="0+"),
            Field("RackId", "string", "0+", nullable="0+"),
            Field("ClientId", "string", "0+"),
            Field("ClientHost", "string", "0+"),
            Field("SubscribedTopicNames", "[]string", "0+"),
            Field("SubscribedTopicRegex", "string", "0+", nullable="0+"),
            Field("RebalanceTimeoutMs", "int32", "0+", default=-1),
            Field("ServerAssignor", "string", "0+", nullable="0+"),
        ],
    ),
    TARGET_METADATA: Message(
        "ConsumerGroupTargetAssignmentMetadataValue",
        api_key=-1,
        versions="0",
        flexible="0+",
        fields=[
            Field("AssignmentEpoch", "int32", "0+"),
            Field("AssignmentTimestamp", "int64", "0+", tag=0, tagged="0+", default=0),
        ],
    ),
    TARGET_MEMBER: Message(
        "ConsumerGroupTargetAssignmentMemberValue",
        api_key=-1,
        versions="0",
        flexible="0+",
        fields=[_topic_partitions("TopicPartitions")],
    ),
    CURRENT_ASSIGNMENT: Message(
        "ConsumerGroupCurrentMemberAssignmentValue",
        api_key=-1,
        versions="0",
        flexible="0+",
        fields=[
            Field("MemberEpoch", "int32", "0+"),
            Field("PreviousMemberEpoch", "int32", "0+"),
            Field("State", "int8", "0+"),
            _topic_partitions("AssignedPartitions"),
            _topic_partitions("PartitionsPendingRevocation"),
        ],
    ),
    REGULAR_EXPRESSION: Message(
        "ConsumerGroupRegularExpressionValue",
        api_key=-1,
        versions="0",
        flexible="0+",
        fields=[
            Field("Topics", "[]string", "0+"),
            Field("Version", "int64", "0+"),
            Field("Timestamp", "int64", "0+"),
        ],
    ),
}


def record_type(key: bytes | memoryview) -> int:
    """The int16 that starts every ``__consumer_offsets`` key (a classic key's version, else a record type)."""
    if len(key) < 2:
        raise CorruptRecordError(f"__consumer_offsets key of {len(key)} bytes has no version")
    return int(_VERSION.unpack_from(key, 0)[0])


def _encode_key(kind: int, group_id: str, member_id: str | None = None) -> bytes:
    body: dict[str, Any] = {"GroupId": group_id}
    if member_id is not None:
        body["RegularExpression" if kind == REGULAR_EXPRESSION else "MemberId"] = member_id
    return _VERSION.pack(kind) + _KEYS[kind].encode(body, 0)


def group_key(kind: int, group_id: str) -> bytes:
    """The key of one of the group-level records (GROUP_METADATA, PARTITION_METADATA, TARGET_METADATA)."""
    return _encode_key(kind, group_id)


def _encode_value(kind: int, body: dict[str, Any]) -> bytes:
    return _VERSION.pack(_VALUE_VERSION) + _VALUES[kind].encode(body, _VALUE_VERSION)


def metadata_hash(subscription_metadata: Mapping[str, int]) -> int:
    """pylog's ``MetadataHash``: 0 for no topic, else a signed int64 of the sorted (topic, partition count)."""
    if not subscription_metadata:
        return 0
    text = "\n".join(f"{t}\t{n}" for t, n in sorted(subscription_metadata.items()))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def _by_id(assignment: Assignment, ids: Mapping[str, uuid.UUID]) -> list[dict[str, Any]]:
    return [
        {"TopicId": ids[t], "Partitions": sorted(ps)}
        for t, ps in sorted(assignment.items())
        if ps and t in ids
    ]


def _member_records(
    group_id: str, m: ConsumerMember, target: Assignment, ids: Mapping[str, uuid.UUID]
) -> list[tuple[int, bytes, bytes]]:
    meta = {
        "InstanceId": m.instance_id,
        "RackId": m.rack_id,
        "ClientId": m.client_id,
        "ClientHost": m.client_host,
        "SubscribedTopicNames": sorted(m.subscribed_topics),
        "SubscribedTopicRegex": m.subscribed_regex,
        "RebalanceTimeoutMs": m.rebalance_timeout_ms,
        "ServerAssignor": m.server_assignor,
    }
    current = {
        "MemberEpoch": m.member_epoch,
        "PreviousMemberEpoch": m.previous_member_epoch,
        "State": _STATE_VALUE[m.state],
        "AssignedPartitions": _by_id(m.assigned, ids),
        "PartitionsPendingRevocation": _by_id(m.pending_revocation, ids),
    }
    return [
        (
            MEMBER_METADATA,
            _encode_key(MEMBER_METADATA, group_id, m.member_id),
            _encode_value(MEMBER_METADATA, meta),
        ),
        (
            TARGET_MEMBER,
            _encode_key(TARGET_MEMBER, group_id, m.member_id),
            _encode_value(TARGET_MEMBER, {"TopicPartitions": _by_id(target, ids)}),
        ),
        (
            CURRENT_ASSIGNMENT,
            _encode_key(CURRENT_ASSIGNMENT, group_id, m.member_id),
            _encode_value(CURRENT_ASSIGNMENT, current),
        ),
    ]


#: The order records of one change are written in (Kafka's: a member's subscription, the group epoch, the target
#: assignment, its epoch, the current assignments); tombstones come first, current assignment first.
_WRITE_ORDER = (
    MEMBER_METADATA,
    REGULAR_EXPRESSION,
    GROUP_METADATA,
    TARGET_MEMBER,
    TARGET_METADATA,
    CURRENT_ASSIGNMENT,
)
_TOMBSTONE_ORDER = (
    CURRENT_ASSIGNMENT,
    REGULAR_EXPRESSION,
    TARGET_MEMBER,
    TARGET_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    GROUP_METADATA,
)


def group_records(group_id: str, cg: ConsumerGroupState, ids: Mapping[str, uuid.UUID]) -> dict[bytes, bytes]:
    """Every record that describes the group now, key -> value, in write order."""
    found: list[tuple[int, bytes, bytes]] = [
        (
            GROUP_METADATA,
            group_key(GROUP_METADATA, group_id),
            _encode_value(
                GROUP_METADATA,
                {"Epoch": cg.group_epoch, "MetadataHash": metadata_hash(cg.subscription_metadata)},
            ),
        ),
        (
            TARGET_METADATA,
            group_key(TARGET_METADATA, group_id),
            _encode_value(TARGET_METADATA, {"AssignmentEpoch": cg.assignment_epoch}),
        ),
    ]
    for m in cg.members.values():
        found.extend(_member_records(group_id, m, cg.target.get(m.member_id, {}), ids))
    for regex, resolved in sorted(cg.resolved_regexes.items()):
        found.append(
            (
                REGULAR_EXPRESSION,
                _encode_key(REGULAR_EXPRESSION, group_id, regex),
                _encode_value(
                    REGULAR_EXPRESSION,
                    {
                        "Topics": sorted(resolved.topics),
                        "Version": resolved.version,
                        "Timestamp": resolved.timestamp_ms,
                    },
                ),
            )
        )
    found.sort(key=lambda r: _WRITE_ORDER.index(r[0]))
    return {key: value for _, key, value in found}


def diff(written: Mapping[bytes, bytes], now: Mapping[bytes, bytes]) -> list[tuple[bytes, bytes | None]]:
    """The records that take the log from ``written`` to ``now``: tombstones of the keys gone, then the values
    that changed."""
    gone = [k for k in written if k not in now]
    gone.sort(key=lambda k: _TOMBSTONE_ORDER.index(record_type(k)))
    out: list[tuple[bytes, bytes | None]] = [(k, None) for k in gone]
    out.extend((k, v) for k, v in now.items() if written.get(k) != v)
    return out


def deletion(group_id: str, written: Mapping[bytes, bytes]) -> list[tuple[bytes, bytes | None]]:
    """The tombstones that delete a consumer group (Kafka's ``ConsumerGroup.createGroupTombstoneRecords``): every
    record written, the partition metadata of the versions before 4.1, and the group epoch last."""
    return diff(
        {**written, group_key(PARTITION_METADATA, group_id): b"", group_key(GROUP_METADATA, group_id): b""},
        {},
    )


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One decoded consumer-group record: its type, group, member (member records; the regular expression of
    a REGULAR_EXPRESSION record) and value (None: a tombstone; else the value struct as a dict, topic ids
    replaced by names, unknown ids dropped)."""

    kind: int
    group_id: str
    member_id: str | None
    value: dict[str, Any] | None


def _by_name(entries: list[dict[str, Any]], names: Mapping[uuid.UUID, str]) -> Assignment:
    found: dict[str, frozenset[int]] = {}
    for tp in entries:
        name = names.get(tp["TopicId"])
        if name is not None and tp["Partitions"]:
            found[name] = found.get(name, frozenset()) | frozenset(tp["Partitions"])
    return found


def decode(
    key: bytes | memoryview, value: bytes | memoryview | None, names: Mapping[uuid.UUID, str]
) -> ConsumerRecord:
    """Decode one record whose :func:`record_type` is in :data:`CONSUMER_RECORD_TYPES`."""
    kind = record_type(key)
    body = _KEYS[kind].decode(key, 2, 0)[0]
    member_id = body.get("RegularExpression" if kind == REGULAR_EXPRESSION else "MemberId")
    if value is None or kind == PARTITION_METADATA:
        return ConsumerRecord(kind, body["GroupId"], member_id, None if value is None else {})
    version = record_type(value)
    if version != _VALUE_VERSION:
        raise CorruptRecordError(
            f"__consumer_offsets {_VALUES[kind].name} version {version} is unknown (0 is read)"
        )
    decoded = _VALUES[kind].decode(value, 2, version)[0]
    if kind == TARGET_MEMBER:
        decoded["TopicPartitions"] = _by_name(decoded["TopicPartitions"], names)
    elif kind == CURRENT_ASSIGNMENT:
        decoded["AssignedPartitions"] = _by_name(decoded["AssignedPartitions"], names)
        decoded["PartitionsPendingRevocation"] = _by_name(decoded["PartitionsPendingRevocation"], names)
        state = _STATE_OF.get(decoded["State"])
        if state is None:
            raise CorruptRecordError(
                f"__consumer_offsets member {member_id!r} of group {body['GroupId']!r} has member state "
                f"{decoded['State']}, unknown to pylog (0-2 are read)"
            )
        decoded["State"] = state
    return ConsumerRecord(kind, body["GroupId"], member_id, decoded)
