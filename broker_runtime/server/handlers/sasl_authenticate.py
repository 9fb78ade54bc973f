"""SaslAuthenticate (key 36, v0-2) on a connection that needs no (more) authentication: ILLEGAL_SASL_STATE.

Tokens of a SASL listener's unauthenticated connection are handled by the dispatcher (the connection's
authenticator); one reaching this handler came on a PLAINTEXT/SSL listener or after the login (Kafka's answer
is the same error).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, sasl_authenticate
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = sasl_authenticate.REQUEST
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "ErrorCode": ErrorCode.ILLEGAL_SASL_STATE,
        "ErrorMessage": f"no SASL authentication is expected on listener {ctx.request_session.listener} now",
        "AuthBytes": b"",
        "SessionLifetimeMs": 0,
    }
