"""Client quotas, the model: entities, quota keys, the checks of AlterClientQuotas, the matching of
DescribeClientQuotas, and which quota applies to a (user, client id) pair.

An entity (Kafka's ``ClientQuotaEntity``) is a tuple of ``(type, name)`` pairs sorted by type, the name None for
the type's default entity (``--entity-default``). Allowed combinations and their keys (Kafka's ``QuotaConfig``
and ``ClientQuotaControlManager``):

=================================  ====================================================================
entity                             keys
=================================  ====================================================================
user / user+client-id / client-id  ``producer_byte_rate``, ``consumer_byte_rate`` (bytes/s, whole numbers),
                                   ``request_percentage`` (percent of one request-handling thread)
ip                                 ``connection_creation_rate`` (connections/s, a whole number)
=================================  ====================================================================

``controller_mutation_rate`` (Kafka's KIP-599 throttle of CreateTopics / CreatePartitions / DeleteTopics) is
refused, naming why: pylog does not enforce it, and a quota accepted but not kept is silent degradation. An ip
entity's name must be an IP address literal (Kafka also resolves host names; pylog does not resolve names on
the event loop).

The quotas persist with the cluster metadata (:class:`~broker_runtime.controller.ClusterMetadata`
``client_quotas``; a single node keeps them in ``client-quotas.json`` in its first log directory), as JSON rows
``{"entity": [["user", "alice"], ["client-id", null]], "quotas": {"producer_byte_rate": 1048576.0}}``
(:func:`to_rows` / :func:`from_rows`).

Which quota applies (Kafka's ``ClientQuotaManager.DefaultQuotaCallback``), most specific first::

    user + client-id, user + default client-id, user,
    default user + client-id, default user + default client-id, default user,
    client-id, default client-id

The first entity of that order that has the key sets the limit; the rate is then measured per the matched
entity's pair (Kafka's metric tags): clients sharing a user quota share one rate (:func:`resolve`).

Pure functions and immutable values; safe anywhere.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping
from typing import Any

from broker_runtime.errors import ConfigError, ErrorCode

__all__ = [
    "CLIENT_ID",
    "CONNECTION_CREATION_RATE",
    "CONSUMER_BYTE_RATE",
    "IP",
    "PRODUCER_BYTE_RATE",
    "REQUEST_PERCENTAGE",
    "USER",
    "Entity",
    "QuotaMap",
    "alteration_problem",
    "altered",
    "describe",
    "entity_of",
    "entity_text",
    "from_rows",
    "resolve",
    "to_rows",
]

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONNECTION_CREATION_RATE = "connection_creation_rate"
_CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

#: Key -> must the value be a whole number (Kafka's LONG / INT quota configs)?
_CLIENT_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False}
_IP_KEYS = {CONNECTION_CREATION_RATE: True}

#: ``((type, name-or-None), ...)`` sorted by type.
Entity = tuple[tuple[str, str | None], ...]
#: Every entity's quotas: entity -> key -> value.
QuotaMap = Mapping[Entity, Mapping[str, float]]

Problem = tuple[ErrorCode, str]


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity of ``(type, name)`` pairs (a repeated type: the last one; :func:`alteration_problem` refuses
    it first)."""
    return tuple(sorted(dict(pairs).items()))


def entity_text(entity: Entity) -> str:
    """``user alice, client-id <default>``: for logs and messages."""
    return ", ".join(f"{t} {'<default>' if n is None else n}" for t, n in entity) or "<empty entity>"


def _entity_problem(pairs: list[tuple[str, str | None]]) -> Problem | None:
    if not pairs:
        return ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity"
    seen: set[str] = set()
    for kind, name in pairs:
        if kind in seen:
            return (
                ErrorCode.INVALID_REQUEST,
                f"Invalid empty client quota entity, duplicate entity entry {kind}",
            )
        seen.add(kind)
        if kind not in (USER, CLIENT_ID, IP):
            return ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {kind}"
        if name is not None and not name:
            return ErrorCode.INVALID_REQUEST, f"Empty {kind} not supported"
    if IP in seen and len(seen) > 1:
        return ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity"
    if IP in seen:
        name = dict(pairs)[IP]
        if name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                return (
                    ErrorCode.INVALID_REQUEST,
                    f"{name} is not a valid IP (pylog takes IP address literals, it does not resolve host names)",
                )
    return None


def alteration_problem(pairs: list[tuple[str, str | None]], ops: list[dict[str, Any]]) -> Problem | None:
    """What AlterClientQuotas refuses in one entry (Kafka's ``ClientQuotaControlManager`` checks): the entity,
    a key named twice, a key the entity type does not have, a value that is not greater than 0 (Kafka 4's check),
    not finite (inf, nan) or must be whole and is not; None: valid."""
    problem = _entity_problem(pairs)
    if problem is not None:
        return problem
    keys = _IP_KEYS if any(kind == IP for kind, _ in pairs) else _CLIENT_KEYS
    named: set[str] = set()
    for op in ops:
        key = op["Key"]
        if key in named:
            return (
                ErrorCode.INVALID_REQUEST,
                f"Duplicate quota key {key} not updating quota for this entity {entity_text(entity_of(pairs))}",
            )
        named.add(key)
        if op["Remove"]:
            continue
        if key == _CONTROLLER_MUTATION_RATE and keys is _CLIENT_KEYS:
            return (
                ErrorCode.INVALID_REQUEST,
                f"{key} is not enforced by pylog (no controller mutation quota): refused rather than kept "
                "unenforced",
            )
        whole = keys.get(key)
        if whole is None:
            return ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}"
        value = float(op["Value"])
        if value <= 0:  # Kafka's ClientQuotaControlManager.validateQuotaKeyValue, -inf included
            return ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0"
        if not math.isfinite(
            value
        ):  # round(inf) raises; inf would be stored and written as JSON's "Infinity"
            return ErrorCode.INVALID_REQUEST, f"Quota {key} must be a finite number, not {value}"
        if whole and abs(round(value) - value) > 1e-6:
            kind = "an Integer" if key == CONNECTION_CREATION_RATE else "a Long"
            return ErrorCode.INVALID_REQUEST, f"Configuration {key} must be {kind} value"
    return None


def altered(current: Mapping[str, float], ops: list[dict[str, Any]]) -> dict[str, float]:
    """The entity's quotas after ``ops`` (checked by :func:`alteration_problem`): set, or removed with
    ``Remove`` (removing an absent key changes nothing)."""
    out = dict(current)
    for op in ops:
        if op["Remove"]:
            out.pop(op["Key"], None)
        else:
            out[op["Key"]] = float(op["Value"])
    return out


def describe(quotas: QuotaMap, components: list[dict[str, Any]], strict: bool) -> list[dict[str, Any]]:
    """The DescribeClientQuotas entries of the entities matching a valid filter (Kafka's
    ``ClientQuotasImage.describe``): each component must match (MATCH_EXACT: that name; MATCH_DEFAULT: the
    default entity; MATCH_SPECIFIED: the type present, any name, the default included); ``strict``: the entity
    has no other types. No component: every entity, or none when strict."""
    wanted = [(c["EntityType"], c["MatchType"], c["Match"]) for c in components]
    out: list[dict[str, Any]] = []
    for entity, values in sorted(quotas.items(), key=lambda kv: _sort_key(kv[0])):
        names = dict(entity)
        if not wanted:
            if strict:
                return []
        elif strict and len(names) != len(wanted):
            continue
        ok = True
        for kind, match, name in wanted:
            if kind not in names:
                ok = False
            elif match == 0:
                ok = names[kind] == name
            elif match == 1:
                ok = names[kind] is None
            if not ok:
                break
        if ok:
            out.append(
                {
                    "Entity": [{"EntityType": t, "EntityName": n} for t, n in entity],
                    "Values": [{"Key": k, "Value": float(v)} for k, v in sorted(values.items())],
                }
            )
    return out


def _sort_key(entity: Entity) -> tuple[tuple[str, int, str], ...]:
    return tuple((t, 0 if n is None else 1, n or "") for t, n in entity)


def resolve(quotas: QuotaMap, key: str, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
    """The quota of ``key`` for a client: ``((user tag, client-id tag), limit)`` of the most specific entity
    that sets it (the order in the module docstring; a tag is "" where the entity does not name that type), or
    None when no entity sets it (no limit)."""
    order: list[tuple[Entity, tuple[str, str]]] = [
        (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
        (((CLIENT_ID, None), (USER, user)), (user, client_id)),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
        (((CLIENT_ID, None), (USER, None)), (user, client_id)),
        (((USER, None),), (user, "")),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, None),), ("", client_id)),
    ]
    for entity, tags in order:
        values = quotas.get(entity)
        if values is not None and key in values:
            return tags, float(values[key])
    return None


def to_rows(quotas: QuotaMap) -> list[dict[str, Any]]:
    """The JSON rows of ``quotas`` (see the module docstring), in a stable order."""
    return [
        {"entity": [[t, n] for t, n in entity], "quotas": dict(sorted(values.items()))}
        for entity, values in sorted(quotas.items(), key=lambda kv: _sort_key(kv[0]))
        if values
    ]


def from_rows(rows: Any, where: object) -> dict[Entity, dict[str, float]]:
    """Parse :func:`to_rows`' rows; ConfigError naming ``where`` when they cannot be read."""
    try:
        out: dict[Entity, dict[str, float]] = {}
        for row in rows or ():
            entity = entity_of((str(t), None if n is None else str(n)) for t, n in row["entity"])
            out[entity] = {str(k): float(v) for k, v in row["quotas"].items()}
        return out
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{where}: unreadable client quotas ({exc!r})") from None
