"""Open an asyncio connection to a broker with a client's security: TLS, then the SASL exchange.

The broker's own outgoing connections (a follower's fetcher, the transaction coordinator's WriteTxnMarkers)
use the inter-broker listener's security (Kafka's ``inter.broker.listener.name`` with
``sasl.mechanism.inter.broker.protocol``). After :func:`open_connection` returns, the stream is authenticated
and the caller speaks Kafka requests on it with a fresh
:class:`~broker_runtime.protocol.client_connection.ClientConnection`.

Session lifetime (KIP-368): :func:`open_connection` also returns the SASL session lifetime the broker granted
(SaslAuthenticate v1's SessionLifetimeMs; 0: none). A caller keeping the connection longer must call
:func:`reauthenticate` (SaslHandshake + SaslAuthenticate again, with no request of its own in flight) before it
ends, as Kafka's clients do at 85-95 % of it
(:func:`~broker_runtime.security.sasl_client.reauthenticate_after_s` picks that moment). Event-loop
code; no shared state.
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

__all__ = ["open_connection", "reauthenticate", "round_trip"]

_RECV_BYTES = 1 << 16


async def open_connection(
    host: str, port: int, security: ClientSecurity | None, *, client_id: str, timeout_s: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    """Connect (TLS when the security says so) and log in (SASL); return the streams and the session lifetime
    in ms (0: none). Raise ``BrokerConnectionError`` for network and TLS failures, ``KafkaError`` for a refused
    login."""
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
    try:
        lifetime_ms = await _login(
            reader, writer, security, address, client_id=client_id, timeout_s=timeout_s
        )
    except BaseException:
        writer.close()
        raise
    return reader, writer, lifetime_ms


async def round_trip(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    state: ClientConnection,
    api_key: int,
    version: int,
    body: Mapping[str, Any],
    *,
    address: str,
) -> dict[str, Any]:
    """Send one request on an open connection (``state`` its protocol state) and read until its answer is
    complete; the answer's body. The caller bounds the time (``asyncio.wait_for``). Raises ``BrokerConnectionError``
    when the broker closes the connection first."""
    _, chunks = state.send_request(api_key, version, body)
    writer.writelines(chunks)
    await writer.drain()
    while True:
        data = await reader.read(_RECV_BYTES)
        if not data:
            raise BrokerConnectionError(address, "connection closed before the answer")
        responses = state.receive_data(data)
        if responses:
            answer: dict[str, Any] = responses[-1].body
            return answer


async def reauthenticate(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    security: ClientSecurity | None,
    address: str,
    *,
    client_id: str,
    timeout_s: float,
) -> int:
    """Log in again on an authenticated connection (KIP-368); the new session lifetime in ms. The caller must
    have no request in flight. Raises as :func:`open_connection` (the caller closes the connection)."""
    return await _login(reader, writer, security, address, client_id=client_id, timeout_s=timeout_s)


async def _login(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    security: ClientSecurity | None,
    address: str,
    *,
    client_id: str,
    timeout_s: float,
) -> int:
    mechanism = security.sasl_client() if security is not None else None
    if mechanism is None:
        return 0
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

    answer = await request(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": mechanism.name})
    if answer["ErrorCode"] != ErrorCode.NONE:
        raise KafkaError(
            answer["ErrorCode"],
            f"broker {address} refused SASL mechanism {mechanism.name} "
            f"(it enables {', '.join(answer['Mechanisms']) or 'none'})",
        )
    lifetime_ms = 0
    token: bytes | None = mechanism.first()
    while token is not None and not mechanism.complete:
        answer = await request(ApiKey.SASL_AUTHENTICATE, 1, {"AuthBytes": token})
        if answer["ErrorCode"] != ErrorCode.NONE:
            raise KafkaError(answer["ErrorCode"], f"broker {address}: {answer['ErrorMessage']}")
        lifetime_ms = int(answer.get("SessionLifetimeMs", 0))
        token = mechanism.step(bytes(answer["AuthBytes"]))
    return lifetime_ms
