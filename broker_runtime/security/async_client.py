"""Open an asyncio connection to a broker with a client's security: TLS, then the SASL exchange.

The broker's own outgoing connections (a follower's fetcher, the transaction coordinator's WriteTxnMarkers)
use the inter-broker listener's security (Kafka's ``inter.broker.listener.name`` with
``sasl.mechanism.inter.broker.protocol``). After :func:`open_connection` returns, the stream is authenticated
and the caller speaks Kafka requests on it with a fresh
:class:`~broker_runtime.protocol.client_connection.ClientConnection`. Event-loop code; no shared state.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any

from broker_runtime.errors import BrokerConnectionError, ErrorCode, KafkaError
from broker_runtime.protocol.client_connection import ClientConnection
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.security.client_security import ClientSecurity

__all__ = ["open_connection"]

_RECV_BYTES = 1 << 16


async def open_connection(
    host: str, port: int, security: ClientSecurity | None, *, client_id: str, timeout_s: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect (TLS when the security says so) and log in (SASL); raise ``BrokerConnectionError`` for network
    and TLS failures, ``KafkaError`` for a refused login."""
    address = f"{host}:{port}"
    context = security.ssl_context() if security is not None else None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context, server_hostname=host if context else None),
            timeout_s,
        )
    except TimeoutError as exc:
        raise BrokerConnectionError(address, f"connect timed out after {timeout_s:g} s") from exc
    except ssl.SSLError as exc:
        raise BrokerConnectionError(address, f"TLS handshake failed: {exc.reason or exc}") from exc
    except OSError as exc:
        raise BrokerConnectionError(address, f"cannot connect: {exc.strerror or exc}") from exc
    mechanism = security.sasl_client() if security is not None else None
    if mechanism is None:
        return reader, writer
    state = ClientConnection(client_id)

    async def request(api_key: int, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        _, chunks = state.send_request(api_key, version, body)
        writer.writelines(chunks)
        while True:
            data = await asyncio.wait_for(reader.read(_RECV_BYTES), timeout_s)
            if not data:
                raise BrokerConnectionError(address, "connection closed during SASL authentication")
            responses = state.receive_data(data)
            if responses:
                return responses[-1].body

    try:
        answer = await request(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": mechanism.name})
        if answer["ErrorCode"] != ErrorCode.NONE:
            raise KafkaError(
                answer["ErrorCode"],
                f"broker {address} refused SASL mechanism {mechanism.name} "
                f"(it enables {', '.join(answer['Mechanisms']) or 'none'})",
            )
        token: bytes | None = mechanism.first()
        while token is not None and not mechanism.complete:
            answer = await request(ApiKey.SASL_AUTHENTICATE, 1, {"AuthBytes": token})
            if answer["ErrorCode"] != ErrorCode.NONE:
                raise KafkaError(answer["ErrorCode"], f"broker {address}: {answer['ErrorMessage']}")
            token = mechanism.step(bytes(answer["AuthBytes"]))
    except BaseException:
        writer.close()
        raise
    return reader, writer
