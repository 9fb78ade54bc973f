"""One blocking TCP connection to one Kafka-protocol broker, with in-order request pipelining.

The protocol state (correlation ids, the FIFO of requests awaiting an answer, framing with a bound on the
response size, decoding in order) is a sans-IO :class:`~broker_runtime.protocol.client_connection.ClientConnection`,
one per socket; this class only does the blocking socket I/O around it. Responses arrive in request order, so
reading the answer to request N decodes (and keeps) the answers to every earlier request first.

Version negotiation: the first request on a new connection is ApiVersions (v3, or the version the broker
names when it answers UNSUPPORTED_VERSION); afterwards every API is spoken at
``min(pylog's max, broker's max)``, refused when that is below either side's minimum or below the
caller's floor for that API (``min_versions``, e.g. Metadata v4 for AllowAutoTopicCreation); ``max_versions``
caps an API below pylog's max (versions meant for broker-to-broker use or with other semantics).

Security (the client's :class:`~broker_runtime.security.ClientSecurity`): on SSL / SASL_SSL the socket is
wrapped in TLS before the first byte (the server name is ``host`` for SNI and, with
``ssl.endpoint.identification.algorithm=https``, for the certificate check); on SASL_PLAINTEXT / SASL_SSL the
connection authenticates right after ApiVersions (SaslHandshake v1, then SaslAuthenticate rounds, KIP-152).
When the broker grants a session lifetime (KIP-368, its ``connections.max.reauth.ms``) the connection logs in
again on the same socket at a random 85-95 % of it, before the next request it sends after that moment: it first
reads the answers of the requests in flight (kept for :meth:`BrokerConnection.receive`), since no other request
may be pending during the exchange.
A TLS failure raises ``BrokerConnectionError`` naming the cause (certificate, host name); a refused login
raises ``KafkaError`` SASL_AUTHENTICATION_FAILED (or UNSUPPORTED_SASL_MECHANISM) with the broker's message.

Failures: every socket error, timeout or closed stream closes the connection and raises
:class:`~broker_runtime.errors.BrokerConnectionError` (a :class:`~broker_runtime.errors.KafkaError` with code
NETWORK_EXCEPTION) naming ``host:port``; requests still in flight on it are lost (answers already read stay
receivable).
Every close bumps :attr:`BrokerConnection.generation`, so a caller holding a correlation id from an
earlier generation learns that its answer will never come (:meth:`BrokerConnection.receive`). Bytes that
do not decode or a response frame above :data:`MAX_RESPONSE_BYTES` raise ``ProtocolError`` and close the
connection too; a response with an unexpected correlation id closes it with ``BrokerConnectionError``.

Not thread-safe: a connection belongs to one thread (the owning :class:`KafkaClient`).
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import time
from collections.abc import Mapping
from typing import Any

from broker_runtime.errors import (
    BrokerConnectionError,
    CorrelationIdMismatchError,
    ErrorCode,
    KafkaError,
    ProtocolError,
)
from broker_runtime.protocol.client_connection import ClientConnection
from broker_runtime.protocol.messages import API_KEYS, ApiKey
from broker_runtime.security import ClientSecurity
from broker_runtime.security.sasl_client import handshake_and_authenticate, reauthenticate_after_s

__all__ = ["MAX_RESPONSE_BYTES", "BrokerConnection"]

_RECV_BYTES = 1 << 16
#: The largest response frame accepted. Responses (fetches) may be large; refuse only absurd sizes.
MAX_RESPONSE_BYTES = 1 << 30


class BrokerConnection:
    """A lazily connected, version-negotiating, pipelining connection to one broker."""

    __slots__ = (
        "host",
        "port",
        "client_id",
        "timeout_s",
        "node_id",
        "_sock",
        "_state",
        "_done",
        "broker_versions",
        "_versions",
        "min_versions",
        "max_versions",
        "generation",
        "security",
        "_reauth_at",
    )

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str,
        timeout_s: float,
        node_id: int | None = None,
        min_versions: Mapping[int, int] | None = None,
        max_versions: Mapping[int, int] | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.node_id = node_id
        self._sock: socket.socket | None = None
        self._state = ClientConnection(client_id, max_frame_bytes=MAX_RESPONSE_BYTES)
        #: Answers read but not yet claimed by :meth:`receive`, by correlation id.
        self._done: dict[int, dict[str, Any]] = {}
        #: The broker's advertised ranges, api key -> (min, max); filled on connect.
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._versions: dict[int, int] = {}
        #: The lowest version the caller accepts per api key (on top of pylog's own minimum).
        self.min_versions: dict[int, int] = dict(min_versions or {})
        #: The highest version the caller speaks per api key (below pylog's own maximum).
        self.max_versions: dict[int, int] = dict(max_versions or {})
        #: Bumped by every :meth:`close`: requests sent in an earlier generation are unanswered forever.
        self.generation = 0
        self.security = security or ClientSecurity()
        #: ``time.monotonic()`` at which the SASL session is renewed (KIP-368); None: it does not expire.
        self._reauth_at: float | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def in_flight(self) -> int:
        return self._state.in_flight

    def __repr__(self) -> str:
        return f"BrokerConnection({self.address}, node={self.node_id}, connected={self.connected})"

    # --- connection lifecycle ----------------------------------------------------------------------------

    def connect(self) -> None:
        """Open the socket and negotiate API versions (no-op when connected)."""
        if self._sock is not None:
            return
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except OSError as e:
            raise BrokerConnectionError(self.address, f"cannot connect: {e.strerror or e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self.timeout_s)
        context = self.security.ssl_context()
        if context is not None:
            try:
                sock = context.wrap_socket(sock, server_hostname=self.host)
            except (ssl.SSLError, ssl.CertificateError, OSError) as e:
                with contextlib.suppress(OSError):
                    sock.close()
                raise BrokerConnectionError(self.address, f"TLS handshake failed: {_describe(e)}") from e
        self._sock = sock
        self._state.reset()
        try:
            self._negotiate()
            self._login()
        except BaseException:
            self.close()
            raise

    def _login(self) -> None:
        self._reauth_at = None
        mechanism = self.security.sasl_client()
        if mechanism is None:
            return
        lifetime_ms = handshake_and_authenticate(
            self._request_at, self.broker_versions, mechanism, self.address
        )
        after_s = reauthenticate_after_s(lifetime_ms)
        self._reauth_at = None if after_s is None else time.monotonic() + after_s

    def _reauthenticate(self) -> None:
        """Drain the requests in flight, then log in again on this socket (see the module docstring)."""
        self._reauth_at = None
        try:
            while self._state.in_flight:
                for response in self._read_responses():
                    self._done[response.correlation_id] = response.body
            self._login()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the socket; unanswered requests are lost, answers already read stay in :meth:`receive`."""
        sock, self._sock = self._sock, None
        self._reauth_at = None
        self._state.reset()
        self.generation += 1
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _negotiate(self) -> None:
        version = API_KEYS[ApiKey.API_VERSIONS].max_version
        body = {"ClientSoftwareName": "pylog", "ClientSoftwareVersion": "0.1.0"}
        for _ in range(2):
            corr = self._send(ApiKey.API_VERSIONS, version, body, expect_response=True)
            answer = self._receive(corr)
            if answer["ErrorCode"] == ErrorCode.UNSUPPORTED_VERSION:
                theirs = {k["ApiKey"]: k["MaxVersion"] for k in answer["ApiKeys"]}
                version = min(theirs.get(ApiKey.API_VERSIONS, 0), version)
                continue
            if answer["ErrorCode"] != ErrorCode.NONE:
                raise KafkaError(answer["ErrorCode"], f"ApiVersions v{version} from broker {self.address}")
            self.broker_versions = {
                k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in answer["ApiKeys"]
            }
            self._versions = {}
            return
        raise KafkaError(
            ErrorCode.UNSUPPORTED_VERSION, f"broker {self.address} refuses every ApiVersions version"
        )

    def _request_at(self, api_key: int, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._receive(self._send(api_key, version, body, expect_response=True))

    def version_for(self, api_key: int) -> int:
        """The version to speak for ``api_key``: min(ours, the broker's max); refused if below either min."""
        version = self._versions.get(api_key)
        if version is not None:
            return version
        self.connect()
        spec = API_KEYS[api_key]
        theirs = self.broker_versions.get(api_key)
        if theirs is None:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"broker {self.address} does not support {spec.name} (key {api_key})",
            )
        our_max = min(spec.max_version, self.max_versions.get(api_key, spec.max_version))
        version = min(our_max, theirs[1])
        ours = max(spec.min_version, self.min_versions.get(api_key, 0))
        if version < max(ours, theirs[0]):
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"broker {self.address} speaks {spec.name} {theirs[0]}-{theirs[1]}, pylog {ours}-{our_max}",
            )
        self._versions[api_key] = version
        return version

    # --- requests ----------------------------------------------------------------------------------------

    def send(self, api_key: int, body: Mapping[str, Any], *, expect_response: bool = True) -> tuple[int, int]:
        """Send a request at the negotiated version; return ``(correlation id, version)``."""
        version = self.version_for(api_key)
        return self._send(api_key, version, body, expect_response=expect_response), version

    def request(self, api_key: int, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """Send a request and wait for its response; return ``(version, response body)``."""
        corr, version = self.send(api_key, body)
        return version, self._receive(corr)

    def receive(self, correlation_id: int, generation: int | None = None) -> dict[str, Any]:
        """Wait for the response to an earlier :meth:`send` (reading the ones before it first).

        With the ``generation`` the request was sent in: raise :class:`BrokerConnectionError` when the
        connection closed since then and the answer had not been read (it will never arrive).
        """
        done = self._done.pop(correlation_id, None)
        if done is not None:
            return done
        if generation is not None and generation != self.generation:
            raise BrokerConnectionError(
                self.address, f"the connection closed before the answer to request {correlation_id} arrived"
            )
        return self._receive(correlation_id)

    def answered(self, correlation_id: int, generation: int | None = None) -> bool:
        """True when :meth:`receive` of ``correlation_id`` would not wait: its answer was read, or the bytes in
        the socket's receive buffer complete it (read here without blocking), or it can never come (closed).

        A socket error while reading closes the connection as :meth:`receive` would; it then answers True and
        :meth:`receive` raises the error (the generation changed). Used by pipelining callers to collect the
        answers already there between sends instead of only when the pipeline is full.
        """
        if correlation_id in self._done:
            return True
        if generation is not None and generation != self.generation:
            return True
        sock = self._sock
        if sock is None or not self._state.is_pending(correlation_id):
            return True
        while True:
            pending = sock.pending() if isinstance(sock, ssl.SSLSocket) else 0
            if not pending and not select.select([sock], [], [], 0)[0]:
                return False
            try:
                for response in self._read_responses():
                    self._done[response.correlation_id] = response.body
            except (BrokerConnectionError, ProtocolError):
                return True  # closed: receive() raises
            if correlation_id in self._done:
                return True

    def _send(self, api_key: int, version: int, body: Mapping[str, Any], *, expect_response: bool) -> int:
        if self._sock is None:
            self.connect()
        elif self._reauth_at is not None and time.monotonic() >= self._reauth_at:
            self._reauthenticate()
        sock = self._sock
        assert sock is not None
        corr, chunks = self._state.send_request(api_key, version, body, expect_response=expect_response)
        try:
            sock.sendall(b"".join(chunks))
        except OSError as e:
            self.close()
            raise BrokerConnectionError(self.address, f"send failed: {_describe(e)}") from e
        return corr

    def _receive(self, correlation_id: int) -> dict[str, Any]:
        done = self._done.pop(correlation_id, None)
        if done is not None:
            return done
        if not self._state.is_pending(correlation_id):
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"no request with correlation id {correlation_id} is awaiting an answer on {self.address}",
            )
        while True:
            for response in self._read_responses():
                self._done[response.correlation_id] = response.body
            done = self._done.pop(correlation_id, None)
            if done is not None:
                return done

    def _read_responses(self) -> list[Any]:
        """Read from the socket until at least one response is complete; return those completed."""
        while True:
            sock = self._sock
            if sock is None:
                raise BrokerConnectionError(self.address, "connection is closed")
            try:
                data = sock.recv(_RECV_BYTES)
            except OSError as e:
                self.close()
                raise BrokerConnectionError(self.address, f"receive failed: {_describe(e)}") from e
            if not data:
                self.close()
                raise BrokerConnectionError(self.address, "connection closed by the broker")
            try:
                responses = self._state.receive_data(data)
            except CorrelationIdMismatchError as e:
                self.close()
                raise BrokerConnectionError(self.address, str(e)) from e
            except ProtocolError as e:
                self.close()
                raise ProtocolError(f"broker {self.address}: {e}") from e
            if responses:
                return responses


def _describe(e: OSError) -> str:
    if isinstance(e, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"certificate verification failed: {e.verify_message or e}"
    if isinstance(e, ssl.SSLError):
        return f"TLS error: {e.reason or e}"
    return e.strerror or str(e) or type(e).__name__
