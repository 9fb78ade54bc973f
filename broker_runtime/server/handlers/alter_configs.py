"""AlterConfigs (key 33, v0-2): replace the dynamic configs of topics and brokers; also the shared engine of
IncrementalAlterConfigs (key 44, :mod:`.incremental_alter_configs`).

Resources (Kafka's ``ConfigAdminManager`` rules, first failure wins per resource):
  * a resource named twice in one request                          -> INVALID_REQUEST
  * a key named twice for one resource                             -> INVALID_REQUEST
  * type other than topic (2) or broker (4)                        -> INVALID_REQUEST
  * topic: illegal name -> INVALID_TOPIC_EXCEPTION; unknown -> UNKNOWN_TOPIC_OR_PARTITION; the new set is
    checked as CreateTopics checks configs (unknown key, bad value, compression)      -> INVALID_CONFIG
  * broker: name ``""`` (every broker's defaults) or a registered node id, else       -> INVALID_REQUEST;
    a key that is not dynamic here (see :mod:`broker_runtime.server.dynamic_config`) -> INVALID_REQUEST;
    a bad value                                                                      -> INVALID_CONFIG
  * AlterConfigs: a null value                                                        -> INVALID_REQUEST
  * Incremental: APPEND / SUBTRACT on a key that is not declared a LIST (``cleanup.policy``,
    ``log.cleanup.policy``, the replication throttles) -> INVALID_CONFIG; an unknown operation -> INVALID_REQUEST

AlterConfigs replaces the resource's whole dynamic set (keys not named go back to their defaults);
IncrementalAlterConfigs applies SET / DELETE / APPEND / SUBTRACT per key to the current set (APPEND and SUBTRACT
start from the current value, or the key's declared default). ``ValidateOnly`` checks and changes nothing.
Changes are persisted in the cluster metadata and applied to the open logs before the answer (other brokers:
within the metadata poll interval).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from broker_runtime.configdef import ConfigType
from broker_runtime.errors import ConfigError, ErrorCode
from broker_runtime.protocol.messages import RequestHeader, alter_configs, describe_configs
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.config import BROKER_CONFIGS
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.dynamic_config import (
    DEFAULT_BROKER_RESOURCE,
    check_broker_configs,
    refused_dynamic,
)
from broker_runtime.server.topics import TopicError, topic_name_error
from broker_runtime.storage.config import ACCEPTED_TOPIC_CONFIGS, TOPIC_CONFIGS

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "alter", "handle"]

REQUEST = alter_configs.ALTER_REQUEST
MIN_VERSION = 0
MAX_VERSION = 2

TOPIC = describe_configs.RESOURCE_TOPIC
BROKER = describe_configs.RESOURCE_BROKER
#: The alterable keys declared LIST (APPEND / SUBTRACT apply) and the default each starts from.
LIST_DEFAULTS: dict[str, str] = {
    key.name: key.default or ""
    for key in (*TOPIC_CONFIGS, *ACCEPTED_TOPIC_CONFIGS, *BROKER_CONFIGS)
    if key.type == ConfigType.LIST and key.dynamic
}

#: (current dynamic configs of the resource, the request's config entries) -> the new dynamic configs.
Change = Callable[[Mapping[str, str], list[dict[str, Any]]], dict[str, str]]


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def replace_all(current: Mapping[str, str], entries: list[dict[str, Any]]) -> dict[str, str]:
    """AlterConfigs: the entries are the new set."""
    out: dict[str, str] = {}
    for entry in entries:
        if entry["Value"] is None:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {entry['Name']}")
        out[entry["Name"]] = entry["Value"]
    return out


def _alter_topic(
    ctx: BrokerContext, name: str, change: Change, entries: list[dict[str, Any]], validate: bool
) -> None:
    problem = topic_name_error(name)
    if problem is not None:
        raise _Refused(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    count = ctx.topics.partition_count(name)
    if count is None:
        raise _Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
    new = change(ctx.topics.overrides(name), entries)
    ctx.topics.check_config(name, count, new)
    if not validate:
        ctx.cluster.set_topic_configs(name, new)
        ctx.refresh_cluster()


def _alter_broker(
    ctx: BrokerContext, name: str, change: Change, entries: list[dict[str, Any]], validate: bool
) -> None:
    view = ctx.cluster.view
    if name != DEFAULT_BROKER_RESOURCE and not (name.isdigit() and int(name) in view.brokers):
        raise _Refused(
            ErrorCode.INVALID_REQUEST,
            f"broker {name!r} is not a registered node id (registered: {sorted(view.brokers)}), nor '' for the "
            "cluster-wide defaults",
        )
    dynamic = {k: dict(v) for k, v in view.broker_configs.items()}
    new = change(dynamic.get(name, {}), entries)
    cfg = ctx.config
    refused = refused_dynamic(new, name, [x.name for x in cfg.listeners])
    if refused is not None:
        raise _Refused(ErrorCode.INVALID_REQUEST, refused)
    try:
        check_broker_configs(
            cfg.storage_properties(), dynamic, name, new, node_id=cfg.node_id, listeners=cfg.listeners
        )
    except ConfigError as exc:  # Kafka answers INVALID_REQUEST here too (its KAFKA-13609)
        raise _Refused(ErrorCode.INVALID_REQUEST, str(exc)) from None
    if not validate:
        ctx.cluster.set_broker_configs(name, new)
        ctx.refresh_cluster()
        # Naming a listener's key store reloads its files even when the value is unchanged (Kafka's
        # reloadUpdatedFilesWithoutConfigChange): the way to rotate a certificate written over the same file.
        ctx.apply_broker_configs([e["Name"] for e in entries])


def alter(ctx: BrokerContext, body: dict[str, Any], change: Change) -> dict[str, Any]:
    """Apply ``change`` to every resource of an (Incremental)AlterConfigs request; the response body."""
    validate = bool(body["ValidateOnly"])
    seen = Counter((r["ResourceType"], r["ResourceName"]) for r in body["Resources"])
    ctx.refresh_cluster()
    responses: list[dict[str, Any]] = []
    for res in body["Resources"]:
        rtype, rname, entries = res["ResourceType"], res["ResourceName"], res["Configs"]
        out: dict[str, Any] = {
            "ErrorCode": ErrorCode.NONE,
            "ErrorMessage": None,
            "ResourceType": rtype,
            "ResourceName": rname,
        }
        try:
            if seen[(rtype, rname)] > 1:
                raise _Refused(
                    ErrorCode.INVALID_REQUEST, f"Duplicate resource {rname!r} of type {rtype} in request"
                )
            dupes = sorted(k for k, n in Counter(e["Name"] for e in entries).items() if n > 1)
            if dupes:
                raise _Refused(
                    ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {', '.join(dupes)}"
                )
            if rtype == TOPIC and not ctx.authorized(AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, rname):
                raise _Refused(
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"ALTER_CONFIGS on topic {rname} is not allowed"
                )
            if rtype == BROKER and not ctx.authorized_cluster(AclOperation.ALTER_CONFIGS):
                raise _Refused(
                    ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "ALTER_CONFIGS on the cluster is not allowed"
                )
            if rtype == TOPIC:
                _alter_topic(ctx, rname, change, entries, validate)
            elif rtype == BROKER:
                _alter_broker(ctx, rname, change, entries, validate)
            else:
                raise _Refused(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")
        except _Refused as exc:
            out.update(ErrorCode=exc.code, ErrorMessage=exc.message)
        except TopicError as exc:
            out.update(ErrorCode=exc.code, ErrorMessage=exc.detail)
        responses.append(out)
    return {"ThrottleTimeMs": 0, "Responses": responses}


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    return alter(ctx, body, replace_all)
