"""SaslAuthenticate (API key 36): one SASL token each way, wrapped in a Kafka request (KIP-152).

Versions 0-2, flexible from 2; v1 adds ``SessionLifetimeMs`` (KIP-368). Definitions mirror Kafka's
SaslAuthenticateRequest.json / SaslAuthenticateResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.SASL_AUTHENTICATE

REQUEST = Message(
    "SaslAuthenticateRequest",
    api_key=API_KEY,
    versions="0-2",
    flexible="2+",
    fields=[Field("AuthBytes", "bytes", "0+")],
)

RESPONSE = Message(
    "SaslAuthenticateResponse",
    api_key=API_KEY,
    versions="0-2",
    flexible="2+",
    fields=[
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        Field("AuthBytes", "bytes", "0+"),
        Field("SessionLifetimeMs", "int64", "1+"),
    ],
)
