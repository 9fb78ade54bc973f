"""The client's consumer-group calls, what kafka-consumer-groups asks: list, describe, committed offsets, an
admin's offset commit, delete.

:class:`GroupClient` is a thin facade over its client's :class:`~broker_runtime.client.router.ClientRouter`
(``KafkaClient.groups``), with no state of its own: each call finds the group's coordinator (FindCoordinator,
key type group) and asks it, finding it again while it moves or loads (COORDINATOR_NOT_AVAILABLE,
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) within the client's retry budget; ListGroups asks every broker
of the metadata, as each answers only for the groups it coordinates. It is not a group member (no JoinGroup,
no heartbeats). Threading: as its client's, the thread that owns the client calls it. Errors: ``KafkaError``
with the coordinator's code, naming the group (and the partition for per-partition codes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from broker_runtime.client.router import (
    COORDINATOR_ERRORS,
    ClientRouter,
    RetryBudget,
    by_topic,
    partition_answers,
)
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.protocol.messages import ApiKey, find_coordinator
from broker_runtime.protocol.topic_partition import TopicPartition

__all__ = ["GroupClient"]


class GroupClient:
    """The consumer-group requests of a :class:`~broker_runtime.client.KafkaClient` (``client.groups``); see the
    module docstring."""

    def __init__(self, router: ClientRouter) -> None:
        self._router = router

    def _group_request(
        self, group: str, api_key: int, body: Callable[[int], Mapping[str, Any]]
    ) -> dict[str, Any]:
        """One request to ``group``'s coordinator, found again while it moves or loads (within the budget)."""
        budget = RetryBudget(self._router)
        while True:
            node = self._router.find_coordinator(group, find_coordinator.KEY_TYPE_GROUP, f"group {group!r}")
            conn = self._router.connection(node)
            _, answer = conn.request(api_key, body(conn.version_for(api_key)))
            codes = [g.get("ErrorCode", 0) for g in answer.get("Groups", [answer])]
            codes += [answer.get("ErrorCode", 0)]
            if not any(code in COORDINATOR_ERRORS for code in codes):
                return answer
            if not budget.another_attempt():
                code = next(c for c in codes if c in COORDINATOR_ERRORS)
                raise KafkaError(code, f"group {group!r}: its coordinator did not answer")
            self._router.backoff()

    def list_groups(self) -> list[dict[str, Any]]:
        """Every group of every broker (ListGroups asks one broker for the groups it coordinates):
        ``GroupId``, ``ProtocolType`` and (v4+) ``GroupState`` per group."""
        groups: dict[str, dict[str, Any]] = {}
        for node in sorted(self._router.metadata([]).brokers):
            _, answer = self._router.connection(node).request(
                ApiKey.LIST_GROUPS, {"StatesFilter": [], "TypesFilter": []}
            )
            if answer["ErrorCode"]:
                raise KafkaError(answer["ErrorCode"], f"list groups of node {node}")
            for group in answer["Groups"]:
                groups[group["GroupId"]] = group
        return [groups[name] for name in sorted(groups)]

    def describe_group(self, group: str) -> dict[str, Any]:
        """DescribeGroups of one group: ``GroupState``, ``ProtocolType``, ``ProtocolData`` and ``Members``."""
        answer = self._group_request(group, ApiKey.DESCRIBE_GROUPS, lambda v: {"Groups": [group]})
        described: dict[str, Any] = answer["Groups"][0]
        if described["ErrorCode"]:
            raise KafkaError(described["ErrorCode"], f"describe group {group!r}")
        return described

    def committed_offsets(self, group: str) -> dict[TopicPartition, int]:
        """Every offset ``group`` committed (OffsetFetch v2+ with null topics): ``(topic, partition) -> offset``."""

        def body(version: int) -> dict[str, Any]:
            if version < 2:
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION, "OffsetFetch v2+ is needed to list a group's offsets"
                )
            return {"GroupId": group, "Topics": None, "Groups": [{"GroupId": group, "Topics": None}]}

        answer = self._group_request(group, ApiKey.OFFSET_FETCH, body)
        found = answer["Groups"][0] if "Groups" in answer and answer["Groups"] else answer
        if found["ErrorCode"]:
            raise KafkaError(found["ErrorCode"], f"fetch the committed offsets of group {group!r}")
        out: dict[TopicPartition, int] = {}
        for tp, p in partition_answers(found["Topics"]):
            if p["ErrorCode"]:
                raise KafkaError(p["ErrorCode"], f"committed offset of {tp[0]}-{tp[1]}")
            if p["CommittedOffset"] >= 0:
                out[tp] = p["CommittedOffset"]
        return out

    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` for ``group`` as an admin does (no member, generation -1: the coordinator accepts
        it only while the group has no active members)."""
        answer = self._group_request(
            group,
            ApiKey.OFFSET_COMMIT,
            lambda v: {
                "GroupId": group,
                "GenerationIdOrMemberEpoch": -1,
                "MemberId": "",
                "Topics": [
                    {
                        "Name": topic,
                        "Partitions": [
                            {"PartitionIndex": p, "CommittedOffset": o, "CommittedMetadata": ""}
                            for p, o in parts
                        ],
                    }
                    for topic, parts in by_topic(sorted(offsets.items())).items()
                ],
            },
        )
        for tp, p in partition_answers(answer["Topics"]):
            if p["ErrorCode"]:
                raise KafkaError(p["ErrorCode"], f"commit offsets of group {group!r} for {tp[0]}-{tp[1]}")

    def delete_group(self, group: str) -> None:
        """DeleteGroups of one group (refused with NON_EMPTY_GROUP while it has members)."""
        answer = self._group_request(group, ApiKey.DELETE_GROUPS, lambda v: {"GroupsNames": [group]})
        result = answer["Results"][0]
        if result["ErrorCode"]:
            raise KafkaError(result["ErrorCode"], f"delete group {group!r}")
