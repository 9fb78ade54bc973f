"""FindCoordinator (key 10, v0-4): answered, but this broker coordinates no groups or transactions yet.

Why advertise it at all: librdkafka enables LZ4 compression only when the broker advertises FindCoordinator
(its feature map ties LZ4 to the API that shipped with Kafka 0.8.2). Every lookup is answered with
COORDINATOR_NOT_AVAILABLE and a message, so group-based clients back off instead of failing hard; clients that
use ``assign()`` never need a coordinator.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, find_coordinator
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = find_coordinator.REQUEST
MIN_VERSION = 0
MAX_VERSION = 4

_MESSAGE = "this broker has no group or transaction coordinator; use assign() with explicit offsets"


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    if header.api_version >= 4:
        return {
            "ThrottleTimeMs": 0,
            "Coordinators": [
                {
                    "Key": key,
                    "NodeId": -1,
                    "Host": "",
                    "Port": -1,
                    "ErrorCode": code,
                    "ErrorMessage": _MESSAGE,
                }
                for key in body["CoordinatorKeys"]
            ],
        }
    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": code,
        "ErrorMessage": _MESSAGE,
        "NodeId": -1,
        "Host": "",
        "Port": -1,
    }
