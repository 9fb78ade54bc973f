"""IncrementalAlterConfigs (key 44, v0-1): SET / DELETE / APPEND / SUBTRACT per key on the dynamic configs of
topics and brokers. Checks, persistence and application are AlterConfigs' (:mod:`.alter_configs`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader
from broker_runtime.protocol.messages import alter_configs as messages
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.handlers.alter_configs import LIST_DEFAULTS, _Refused, alter

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = messages.INCREMENTAL_REQUEST
MIN_VERSION = 0
MAX_VERSION = 1


def _items(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def apply_ops(current: Mapping[str, str], entries: list[dict[str, Any]]) -> dict[str, str]:
    """The dynamic set after each entry's operation (Kafka's ``ConfigAdminManager.prepareIncrementalConfigs``)."""
    out = dict(current)
    for entry in entries:
        name, op, value = entry["Name"], entry["ConfigOperation"], entry["Value"]
        if op == messages.SET:
            if value is None:
                raise _Refused(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}")
            out[name] = value
        elif op == messages.DELETE:
            out.pop(name, None)
        elif op in (messages.APPEND, messages.SUBTRACT):
            if name not in LIST_DEFAULTS:
                verb = "append" if op == messages.APPEND else "subtract"
                raise _Refused(
                    ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}"
                )
            items = _items(out.get(name, LIST_DEFAULTS[name]))
            if op == messages.APPEND:
                items += [v for v in _items(value) if v not in items]
            else:
                items = [v for v in items if v not in _items(value)]
            out[name] = ",".join(items)
        else:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op} for {name}")
    return out


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    return alter(ctx, body, apply_ops)
