"""SaslHandshake (key 17, v0-1) on a connection that needs no (more) authentication: ILLEGAL_SASL_STATE.

The handshake of a SASL listener's unauthenticated connection is answered by the dispatcher with the
connection's authenticator; a handshake reaching this handler came on a PLAINTEXT/SSL listener or after the
login, which Kafka answers with ILLEGAL_SASL_STATE too.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, sasl_handshake
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = sasl_handshake.REQUEST
MIN_VERSION = 0
MAX_VERSION = 1


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    return {"ErrorCode": ErrorCode.ILLEGAL_SASL_STATE, "Mechanisms": []}
