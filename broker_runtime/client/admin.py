"""The admin calls of the client (what the CLI tools and the tests ask): topics, partitions, records, configs,
cluster, ACLs, SCRAM users, log dirs and producers; Kafka's admin client's requests, spoken through the client's
router.

:class:`AdminClient` is a thin facade: it holds no connection or cache of its own, only its
:class:`~broker_runtime.client.router.ClientRouter` (``KafkaClient.admin``). Threading: as its client's, the
thread that owns the client calls it (no locking anywhere).

Routing: cluster-wide changes (CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs,
AlterUserScramCredentials) go to the controller when the metadata names it, else to any broker (CreateTopics is
retried up to ``retries`` times on NOT_CONTROLLER after a metadata refresh); reads (DescribeConfigs,
DescribeCluster, the ACL APIs, DescribeUserScramCredentials) go to any broker; DescribeLogDirs to the broker
asked about; DeleteRecords and DescribeProducers to each partition's leader through the router's leader-retry
driver (DeleteRecords retries leader moves within the retry budget and answers per partition; DescribeProducers
asks once). Errors: a non-zero code where the call has no per-item result to carry it raises
``KafkaError(code, "<what> ...")`` with the broker's message when it gave one. SCRAM passwords are salted here
and never sent.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker_runtime.client.router import (
    REFRESH_ERRORS,
    ClientRouter,
    LeaderRetry,
    by_topic,
    partition_answers,
)
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.protocol.messages import (
    ApiKey,
    alter_configs,
    create_topics,
    describe_configs,
    scram_credentials,
)
from broker_runtime.protocol.topic_partition import TopicPartition
from broker_runtime.security.scram_credentials import salted_password

__all__ = ["AdminClient", "ConfigEntry", "NewTopic"]

#: Bytes of random salt per SCRAM credential the client creates.
SALT_BYTES = 32


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create; -1 partitions/replication factor means the broker's defaults."""

    name: str
    num_partitions: int = create_topics.NO_NUM_PARTITIONS
    replication_factor: int = create_topics.NO_REPLICATION_FACTOR
    configs: Mapping[str, str | None] = field(default_factory=dict)
    assignments: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config of a DescribeConfigs answer; ``source`` is Kafka's ``ConfigSource`` number. A ``sensitive``
    config (a password, a JAAS entry, a key) has ``value`` None, and so has each of its ``synonyms``
    (``(name, value, source)``, highest precedence first)."""

    name: str
    value: str | None
    source: int
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[tuple[str, str | None, int], ...] = ()


class AdminClient:
    """The admin requests of a :class:`~broker_runtime.client.KafkaClient` (``client.admin``); see the module
    docstring."""

    def __init__(self, router: ClientRouter) -> None:
        self._router = router

    def create_topics(
        self,
        topics: Mapping[str, tuple[int, int]] | Sequence[NewTopic],
        *,
        configs: Mapping[str, str | None] | None = None,
        timeout_ms: int = 60000,
        validate_only: bool = False,
    ) -> dict[str, ErrorCode | int]:
        """Create topics on the controller; return each topic's error code (0 = created).

        ``topics`` maps name -> (partitions, replication factor), or is a list of :class:`NewTopic`;
        ``configs`` apply to every topic given as a mapping.
        """
        if isinstance(topics, Mapping):
            new = [NewTopic(n, p, r, dict(configs or {})) for n, (p, r) in topics.items()]
        else:
            new = list(topics)
        request = {
            "Topics": [
                {
                    "Name": t.name,
                    "NumPartitions": t.num_partitions
                    if t.assignments is None
                    else create_topics.NO_NUM_PARTITIONS,
                    "ReplicationFactor": (
                        t.replication_factor if t.assignments is None else create_topics.NO_REPLICATION_FACTOR
                    ),
                    "Assignments": [
                        {"PartitionIndex": i, "BrokerIds": list(ids)}
                        for i, ids in (t.assignments or {}).items()
                    ],
                    "Configs": [{"Name": k, "Value": v} for k, v in t.configs.items()],
                }
                for t in new
            ],
            "timeoutMs": timeout_ms,
            "validateOnly": validate_only,
        }
        router = self._router
        for attempt in range(router.retries + 1):
            _, body = router.controller_connection().request(ApiKey.CREATE_TOPICS, request)
            codes = {t["Name"]: _code(t["ErrorCode"]) for t in body["Topics"]}
            if ErrorCode.NOT_CONTROLLER in codes.values() and attempt < router.retries:
                router.metadata([])
                router.backoff()
                continue
            return codes
        raise AssertionError("unreachable")

    def describe_configs(
        self,
        topics: Mapping[str, Sequence[str] | None] | Sequence[str],
        *,
        resource_type: int = describe_configs.RESOURCE_TOPIC,
    ) -> dict[str, dict[str, str | None]]:
        """Configuration of each named resource (topics by default): name -> {key: value}."""
        wanted = topics if isinstance(topics, Mapping) else dict.fromkeys(topics)
        _, body = self._router.any_connection().request(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "Resources": [
                    {
                        "ResourceType": resource_type,
                        "ResourceName": name,
                        "ConfigurationKeys": None if keys is None else list(keys),
                    }
                    for name, keys in wanted.items()
                ]
            },
        )
        out: dict[str, dict[str, str | None]] = {}
        for r in body["Results"]:
            if r["ErrorCode"]:
                raise KafkaError(
                    r["ErrorCode"], f"describe configs of {r['ResourceName']}: {r['ErrorMessage']}"
                )
            out[r["ResourceName"]] = {c["Name"]: c["Value"] for c in r["Configs"]}
        return out

    def _admin_request(self, api_key: int, request: Mapping[str, Any]) -> dict[str, Any]:
        """A cluster-wide admin request, sent to the controller when known (as Kafka's admin client does),
        else to any broker."""
        _, body = self._router.controller_connection().request(api_key, request)
        return body

    def delete_topics_by_id(
        self, topic_ids: Sequence[uuid.UUID], *, timeout_ms: int = 30000
    ) -> dict[uuid.UUID, KafkaError | None]:
        """Delete topics by topic id (DeleteTopics v6); per id None (deleted) or the broker's error
        (UNKNOWN_TOPIC_ID for an id no topic has, e.g. one of a topic deleted and created again)."""
        version, body = self._router.controller_connection().request(
            ApiKey.DELETE_TOPICS,
            {"Topics": [{"Name": None, "TopicId": i} for i in topic_ids], "TimeoutMs": timeout_ms},
        )
        if version < 6:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"the broker answers DeleteTopics up to v{version}; deletion by topic id needs v6",
            )
        return {
            r["TopicId"]: KafkaError(
                r["ErrorCode"], r.get("ErrorMessage") or f"delete topic id {r['TopicId']}"
            )
            if r["ErrorCode"]
            else None
            for r in body["Responses"]
        }

    def delete_topics(self, names: Sequence[str], *, timeout_ms: int = 30000) -> dict[str, KafkaError | None]:
        """Delete topics; per name None (deleted) or the broker's error."""
        body = self._admin_request(
            ApiKey.DELETE_TOPICS,
            {"TopicNames": list(names), "Topics": [{"Name": n} for n in names], "TimeoutMs": timeout_ms},
        )
        return {
            r["Name"]: KafkaError(r["ErrorCode"], r.get("ErrorMessage") or f"delete topic {r['Name']}")
            if r["ErrorCode"]
            else None
            for r in body["Responses"]
        }

    def create_partitions(
        self, counts: Mapping[str, int], *, validate_only: bool = False, timeout_ms: int = 30000
    ) -> dict[str, KafkaError | None]:
        """Raise each topic's partition count to the given total; per topic None or the broker's error."""
        body = self._admin_request(
            ApiKey.CREATE_PARTITIONS,
            {
                "Topics": [{"Name": n, "Count": c, "Assignments": None} for n, c in counts.items()],
                "TimeoutMs": timeout_ms,
                "ValidateOnly": validate_only,
            },
        )
        return {
            r["Name"]: KafkaError(r["ErrorCode"], r["ErrorMessage"] or f"create partitions of {r['Name']}")
            if r["ErrorCode"]
            else None
            for r in body["Results"]
        }

    def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int = 30000
    ) -> dict[TopicPartition, int | KafkaError]:
        """Move each partition's log start offset to the given offset (-1: the high watermark), on its leader;
        per partition the new log start offset or the error. Leader moves are retried as
        :meth:`~broker_runtime.client.KafkaClient.list_offsets` retries them."""
        result: dict[TopicPartition, int | KafkaError] = {}

        def request(node: int, part: dict[TopicPartition, int]) -> dict[str, Any]:
            _, body = self._router.connection(node).request(
                ApiKey.DELETE_RECORDS,
                {
                    "Topics": [
                        {"Name": t, "Partitions": [{"PartitionIndex": p, "Offset": o} for p, o in parts]}
                        for t, parts in by_topic(part.items()).items()
                    ],
                    "TimeoutMs": timeout_ms,
                },
            )
            return body

        def answer(node: int, body: dict[str, Any], retry: LeaderRetry) -> None:
            for tp, p in partition_answers(body["Topics"]):
                code = p["ErrorCode"]
                if not code:
                    result[tp] = p["LowWatermark"]
                    continue
                err = KafkaError(
                    code, f"delete records of topic {tp[0]} partition {tp[1]} before {offsets.get(tp)}"
                )
                if code in REFRESH_ERRORS and code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    retry.later(tp, err)
                else:
                    result[tp] = err

        result.update(self._router.call_leaders(offsets, request, answer).errors)
        return result

    def alter_configs(
        self,
        resource_type: int,
        name: str,
        set_configs: Mapping[str, str] | None = None,
        delete_configs: Sequence[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        """Set and delete dynamic configs of one topic or broker (IncrementalAlterConfigs SET / DELETE);
        raises KafkaError with the broker's message."""
        entries = [
            {"Name": k, "ConfigOperation": alter_configs.SET, "Value": v}
            for k, v in (set_configs or {}).items()
        ] + [{"Name": k, "ConfigOperation": alter_configs.DELETE, "Value": None} for k in delete_configs]
        body = self._admin_request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            {
                "Resources": [{"ResourceType": resource_type, "ResourceName": name, "Configs": entries}],
                "ValidateOnly": validate_only,
            },
        )
        for r in body["Responses"]:
            if r["ErrorCode"]:
                raise KafkaError(r["ErrorCode"], r["ErrorMessage"] or f"alter configs of {name}")

    def describe_config_entries(
        self, resource_type: int, name: str, *, node: int | None = None
    ) -> list[ConfigEntry]:
        """Every config of one topic or broker with its value, source and synonyms (DescribeConfigs); sent to
        ``node`` when given (a broker's own configs are answered by that broker only, as Kafka's are)."""
        conn = self._router.any_connection() if node is None else self._router.connection(node)
        _, body = conn.request(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "Resources": [
                    {"ResourceType": resource_type, "ResourceName": name, "ConfigurationKeys": None}
                ],
                "IncludeSynonyms": True,
            },
        )
        out: list[ConfigEntry] = []
        for r in body["Results"]:
            if r["ErrorCode"]:
                raise KafkaError(r["ErrorCode"], r["ErrorMessage"] or f"describe configs of {name}")
            out += [
                ConfigEntry(
                    c["Name"],
                    c["Value"],
                    int(c["ConfigSource"]),
                    bool(c["ReadOnly"]),
                    bool(c["IsSensitive"]),
                    tuple((s["Name"], s["Value"], int(s["Source"])) for s in c.get("Synonyms") or ()),
                )
                for c in r["Configs"]
            ]
        return out

    def describe_cluster(self) -> dict[str, Any]:
        """DescribeCluster: ``ClusterId``, ``ControllerId`` and ``Brokers`` (id, host, port, rack)."""
        _, body = self._router.any_connection().request(ApiKey.DESCRIBE_CLUSTER, {})
        if body["ErrorCode"]:
            raise KafkaError(body["ErrorCode"], body["ErrorMessage"] or "describe cluster")
        return body

    def acl_request(self, api_key: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """CreateAcls / DescribeAcls / DeleteAcls (``api_key``) with a request body of Kafka's field names, sent
        to any broker (ACLs are cluster-wide); the response body, its error codes left to the caller."""
        _, answer = self._router.any_connection().request(api_key, dict(body))
        return answer

    def describe_user_scram_credentials(
        self, users: Sequence[str] | None = None
    ) -> dict[str, dict[str, int] | KafkaError]:
        """DescribeUserScramCredentials (any broker): per user ``{mechanism name: iterations}``, or the broker's
        error for that user (RESOURCE_NOT_FOUND: no credential); ``users`` None or empty = every stored user.
        Raises KafkaError for an error of the whole request (CLUSTER_AUTHORIZATION_FAILED)."""
        _, body = self._router.any_connection().request(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
            {"Users": None if not users else [{"Name": u} for u in users]},
        )
        if body["ErrorCode"]:
            raise KafkaError(body["ErrorCode"], body["ErrorMessage"] or "describe user SCRAM credentials")
        out: dict[str, dict[str, int] | KafkaError] = {}
        for r in body["Results"]:
            if r["ErrorCode"]:
                out[r["User"]] = KafkaError(r["ErrorCode"], r["ErrorMessage"] or f"describe user {r['User']}")
            else:
                out[r["User"]] = {
                    scram_credentials.MECHANISM_NAMES.get(c["Mechanism"], str(c["Mechanism"])): c[
                        "Iterations"
                    ]
                    for c in r["CredentialInfos"]
                }
        return out

    def alter_user_scram_credentials(
        self,
        upsertions: Sequence[tuple[str, str, int, str]] = (),
        deletions: Sequence[tuple[str, str]] = (),
    ) -> dict[str, KafkaError | None]:
        """AlterUserScramCredentials (the controller when known, else any broker): each upsertion
        ``(user, mechanism, iterations, password)`` is salted here, as Kafka's admin client does (a random salt,
        Hi(password, salt, iterations)), so the password never leaves this process; each deletion is
        ``(user, mechanism)``. Per user None (done) or the broker's error."""
        body = self._admin_request(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
            {
                "Deletions": [
                    {"Name": user, "Mechanism": scram_credentials.MECHANISM_TYPES.get(mechanism, 0)}
                    for user, mechanism in deletions
                ],
                "Upsertions": [
                    _upsertion(user, mechanism, iterations, password)
                    for user, mechanism, iterations, password in upsertions
                ],
            },
        )
        return {
            r["User"]: KafkaError(r["ErrorCode"], r["ErrorMessage"] or f"alter user {r['User']}")
            if r["ErrorCode"]
            else None
            for r in body["Results"]
        }

    def describe_client_quotas(
        self, components: Sequence[tuple[str, int, str | None]] = (), *, strict: bool = False
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """DescribeClientQuotas (any broker): each filter component is ``(entity type, match type, name)``
        (match 0 exact, 1 the default entity, 2 any); per matching entity ``({type: name or None}, {key:
        value})``. Raises KafkaError for an error of the request (an invalid filter, CLUSTER_AUTHORIZATION_FAILED)."""
        _, body = self._router.any_connection().request(
            ApiKey.DESCRIBE_CLIENT_QUOTAS,
            {
                "Components": [{"EntityType": t, "MatchType": m, "Match": n} for t, m, n in components],
                "Strict": strict,
            },
        )
        if body["ErrorCode"]:
            raise KafkaError(body["ErrorCode"], body["ErrorMessage"] or "describe client quotas")
        return [
            (
                {e["EntityType"]: e["EntityName"] for e in entry["Entity"]},
                {v["Key"]: v["Value"] for v in entry["Values"]},
            )
            for entry in body["Entries"] or ()
        ]

    def alter_client_quotas(
        self,
        alterations: Sequence[tuple[Mapping[str, str | None], Mapping[str, float | None]]],
        *,
        validate_only: bool = False,
    ) -> list[KafkaError | None]:
        """AlterClientQuotas (the controller when known, else any broker): each alteration is ``({entity type:
        name or None for the default}, {key: value, or None to remove it})``; per alteration None (done) or the
        broker's error."""
        body = self._admin_request(
            ApiKey.ALTER_CLIENT_QUOTAS,
            {
                "Entries": [
                    {
                        "Entity": [{"EntityType": t, "EntityName": n} for t, n in entity.items()],
                        "Ops": [
                            {"Key": k, "Value": 0.0 if v is None else float(v), "Remove": v is None}
                            for k, v in ops.items()
                        ],
                    }
                    for entity, ops in alterations
                ],
                "ValidateOnly": validate_only,
            },
        )
        return [
            KafkaError(r["ErrorCode"], r["ErrorMessage"] or "alter client quotas") if r["ErrorCode"] else None
            for r in body["Entries"]
        ]

    def describe_log_dirs(
        self, node: int, topics: Mapping[str, Iterable[int]] | None = None
    ) -> list[dict[str, Any]]:
        """DescribeLogDirs of one broker: per log directory its partitions (all, or those of ``topics``: name ->
        partitions) and their sizes; raises KafkaError on the answer's top-level error (v3+, e.g.
        CLUSTER_AUTHORIZATION_FAILED)."""
        wanted = (
            None
            if topics is None
            else [{"Topic": t, "Partitions": sorted(parts)} for t, parts in sorted(topics.items())]
        )
        _, body = self._router.connection(node).request(ApiKey.DESCRIBE_LOG_DIRS, {"Topics": wanted})
        if body.get("ErrorCode"):
            raise KafkaError(body["ErrorCode"], f"describe log dirs of node {node}")
        results: list[dict[str, Any]] = body["Results"]
        return results

    def describe_producers(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, list[dict[str, Any]]]:
        """DescribeProducers on each partition's leader: its active producers; raises KafkaError."""
        out: dict[TopicPartition, list[dict[str, Any]]] = {}

        def request(node: int, part: dict[TopicPartition, None]) -> dict[str, Any]:
            _, body = self._router.connection(node).request(
                ApiKey.DESCRIBE_PRODUCERS,
                {
                    "Topics": [
                        {"Name": t, "PartitionIndexes": [p for p, _ in parts]}
                        for t, parts in by_topic(part.items()).items()
                    ]
                },
            )
            return body

        def answer(node: int, body: dict[str, Any], retry: LeaderRetry) -> None:
            for tp, p in partition_answers(body["Topics"]):
                if p["ErrorCode"]:
                    raise KafkaError(
                        p["ErrorCode"], p["ErrorMessage"] or f"describe producers of {tp[0]}-{tp[1]}"
                    )
                out[tp] = p["ActiveProducers"]

        # One round: a partition without a leader now, a leader that cannot be reached or a partition error
        # raises it (Kafka's admin client looks the leader up again on NOT_LEADER_OR_FOLLOWER; pylog never did).
        retry = self._router.call_leaders(dict.fromkeys(tps), request, answer, retries=False)
        if retry.errors:
            raise next(iter(retry.errors.values()))
        return out


def _upsertion(user: str, mechanism: str, iterations: int, password: str) -> dict[str, Any]:
    code = scram_credentials.MECHANISM_TYPES.get(mechanism, 0)
    salt = secrets.token_bytes(SALT_BYTES)
    # An unknown mechanism goes out as Kafka's UNKNOWN (0) for the broker to refuse; nothing to salt it with.
    salted = salted_password(mechanism, password, salt, iterations) if code else b""
    return {"Name": user, "Mechanism": code, "Iterations": iterations, "Salt": salt, "SaltedPassword": salted}


def _code(value: int) -> ErrorCode | int:
    try:
        return ErrorCode(value)
    except ValueError:
        return value
