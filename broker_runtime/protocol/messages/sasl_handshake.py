"""SaslHandshake (API key 17): the client names the SASL mechanism it will use on a SASL listener.

Versions 0-1, never flexible. Definitions mirror Kafka's SaslHandshakeRequest.json / SaslHandshakeResponse.json:
v0 is followed by raw SASL tokens (4-byte size prefix, no Kafka header); v1 by SaslAuthenticate requests
(KIP-152). The answer lists the mechanisms the listener has enabled. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.SASL_HANDSHAKE

REQUEST = Message(
    "SaslHandshakeRequest",
    api_key=API_KEY,
    versions="0-1",
    flexible="none",
    fields=[Field("Mechanism", "string", "0+")],
)

RESPONSE = Message(
    "SaslHandshakeResponse",
    api_key=API_KEY,
    versions="0-1",
    flexible="none",
    fields=[Field("ErrorCode", "int16", "0+"), Field("Mechanisms", "[]string", "0+")],
)
