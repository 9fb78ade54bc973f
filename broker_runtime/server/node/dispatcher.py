"""Request dispatch: decode a frame, route it to the handler of its API key, encode the answer.

Bad input, decided here (Kafka's ``SocketServer``/``RequestContext`` behaviour):
  * malformed or truncated header or body (``ProtocolError``): log one line, close the connection;
  * an unknown API key, or a version outside the advertised range: log one line, close the connection
    (Kafka cannot even parse such a request, so it cannot answer it);
  * except ApiVersions of an unknown (newer) version: answered with a v0 body carrying UNSUPPORTED_VERSION and
    the ApiVersions range, so the client can retry with a version we speak (KIP-511).

Authentication (Kafka's ``SaslServerAuthenticator``): on a connection whose session is not authenticated yet
(a SASL listener) only ApiVersions, SaslHandshake and SaslAuthenticate are served; any other request closes
the connection with one WARNING line (Kafka: "Unexpected Kafka request of type X during SASL handshake").
A refused mechanism or login is answered (UNSUPPORTED_SASL_MECHANISM / SASL_AUTHENTICATION_FAILED with the
reason) and the connection is closed after the answer. After SaslHandshake v0 the client's frames are raw SASL
tokens, answered as raw frames.

Session lifetime (KIP-368, ``connections.max.reauth.ms``; state in
:class:`~broker_runtime.security.sasl_server.SaslServerAuthenticator`): a request arriving on a connection whose
SASL session has expired closes the connection without an answer (one INFO line; counted as
``expired-connections-killed-count`` in the metrics), as Kafka's ``SocketServer`` does; a SaslHandshake before
that starts a re-authentication on the same connection. While a request is handled, ``ctx.request_session`` is the connection's
:class:`~broker_runtime.server.session.Session` (principal and listener, for Metadata's endpoints and the
authorizer: ``BrokerContext.authorized``; each handler asks it what Kafka's ``KafkaApis`` asks).

Responses are encoded as a list of chunks (size prefix first), so fetched record buffers are written to the
socket without being copied into one response buffer, and a Fetch answer's records left in their segment file
(a :class:`~broker_runtime.storage.file_handle.FileSlice`) stay one chunk the connection sends with ``sendfile``.
Event-loop thread only.

Client quotas (Kafka's ``KafkaApis`` with its quota managers, KIP-219; :mod:`~broker_runtime.server.quota_manager`):
while some quota is set, each request of an authenticated connection is recorded: a Produce's request size in
the producer byte rate and the handler's time in the request percentage as soon as the handler returned (so the
mute stops a pipelining client's next frames, as Kafka reads a channel's next request only once the previous one
was answered), a consumer Fetch's response bytes in the consumer byte rate when its answer is ready (follower
fetches and WriteTxnMarkers are exempt from all of it, as Kafka's cluster actions). The largest throttle time they give is answered in ``ThrottleTimeMs`` (every response that has
the field), and the connection is muted for that long (:meth:`~broker_runtime.server.network.Connection.throttle`;
an acks=0 produce is muted without an answer). A throttled Fetch is answered without records and its bytes are
taken back from the rate, as Kafka answers it. Kafka delays the answer instead of sending it at once to clients
of request versions older than KIP-219; pylog answers every version at once and mutes the connection, which holds
such a client back the same way (it cannot send its next request meanwhile).

With metrics on (``ctx.metrics``), each handled request gets a
:class:`~broker_runtime.server.metrics.RequestTiming` left on the connection (``connection.request_timing``),
which the connection completes when the answer is handed to the socket. Kafka's request names label it
(``Produce``, ``FetchConsumer`` / ``FetchFollower``, ``ApiVersions``, ...).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from broker_runtime.errors import ErrorCode, ProtocolError, UnsupportedVersionError
from broker_runtime.protocol.messages import ApiKey, RequestHeader, decode_request, encode_response_chunks
from broker_runtime.security.sasl_server import AUTHENTICATE, HANDSHAKE
from broker_runtime.server.context import CLOSE_CONNECTION, BrokerContext
from broker_runtime.server.handlers import api_versions, handler_table, supported_versions
from broker_runtime.server.metrics import RequestTiming
from broker_runtime.server.network import CLOSE, Connection, RespondThenClose
from broker_runtime.server.quota_manager import NANOS_TO_PERCENT, user_of
from broker_runtime.server.session import Session

__all__ = ["Dispatcher"]

_log = logging.getLogger(__name__)

#: Kafka's request names (``ApiKeys.name``), as RequestMetrics labels them: PRODUCE -> Produce.
_REQUEST_NAMES: dict[int, str] = {
    int(key): "".join(part.capitalize() for part in key.name.split("_")) for key in ApiKey
}


class Dispatcher:
    """Callable ``(frame, connection) -> response``, the :class:`~broker_runtime.server.network.RequestHandler`."""

    def __init__(self, ctx: BrokerContext) -> None:
        self._ctx = ctx
        self._handlers = handler_table()
        self._versions = supported_versions()
        self._auth_delay_s = ctx.config.connection_failed_authentication_delay_ms / 1000

    def __call__(self, frame: memoryview, connection: Connection) -> Any:
        session = connection.session
        auth = session.authenticator
        if auth is not None and not auth.complete and auth.raw_tokens:
            return self._raw_token(frame, connection)
        try:
            header, body = decode_request(frame)
        except UnsupportedVersionError as exc:
            bad: RequestHeader | None = getattr(exc, "header", None)
            if bad is not None and bad.api_key == ApiKey.API_VERSIONS:
                _log.info(
                    "client %r at %s sent ApiVersions v%d; answering UNSUPPORTED_VERSION",
                    bad.client_id,
                    connection.peer,
                    bad.api_version,
                )
                return encode_response_chunks(
                    ApiKey.API_VERSIONS, 0, bad.correlation_id, api_versions.unsupported_version_body()
                )
            _log.warning("closing connection %s: unsupported request: %s", connection.peer, exc)
            return CLOSE
        except ProtocolError as exc:
            _log.warning("closing connection %s: malformed request: %s", connection.peer, exc)
            return CLOSE
        handler = self._handlers.get(header.api_key)
        lo, hi = self._versions.get(header.api_key, (0, -1))
        if handler is None or not lo <= header.api_version <= hi:
            _log.warning(
                "closing connection %s: API key %d version %d is not served (client %r)",
                connection.peer,
                header.api_key,
                header.api_version,
                header.client_id,
            )
            return CLOSE
        if auth is not None and auth.session_expires_at is not None and auth.complete:
            now = time.monotonic()
            if auth.session_expired(now):
                return self._expired(header, connection, now)
            if header.api_key == ApiKey.SASL_HANDSHAKE and auth.begin_reauthentication(now):
                _log.debug("connection %s: %s re-authenticates", connection.peer, session.principal)
        if not session.authenticated:
            return self._authenticate(header, body, connection)
        self._ctx.request_session = session
        metrics = self._ctx.metrics
        quotas = self._ctx.client_quotas
        metered = quotas.produce.enabled or quotas.fetch.enabled or quotas.request.enabled
        if metrics is None and not metered:
            result = handler(self._ctx, header, body)
            if isinstance(result, asyncio.Future):
                return self._encode_later(header, result)
            return self._encode(header, result)
        timing: RequestTiming | None = None
        if metrics is not None:
            name = _REQUEST_NAMES[header.api_key]
            if header.api_key == ApiKey.FETCH:
                name = "FetchFollower" if body.get("ReplicaId", -1) >= 0 else "FetchConsumer"
            timing = metrics.request_started(name, header.api_version, connection.received_ns)
        started = time.monotonic_ns()
        result = handler(self._ctx, header, body)
        handled = time.monotonic_ns()
        finish = self._quotas(header, body, len(frame), handled - started, connection) if metered else None
        if timing is not None:
            timing.local_done = timing.resolved = handled
            connection.request_timing = timing
        if isinstance(result, asyncio.Future):
            return self._encode_later(header, result, timing, finish)
        if finish is not None:
            result = finish(result)
        if timing is not None:
            timing.result = result
        return self._encode(header, result)

    def _quotas(
        self, header: RequestHeader, body: dict[str, Any], size: int, handled_ns: int, connection: Connection
    ) -> Callable[[Any], Any]:
        """Record a request in the client quotas and throttle it (see the module docstring): the produce bytes
        and the handling time now, so a pipelining client's next frames wait behind the mute (Kafka reads a
        channel's next request only after the previous one was answered); a consumer fetch's bytes once its
        answer is ready. Returns what sets ``ThrottleTimeMs`` (and empties a throttled fetch) on the answer."""
        quotas = self._ctx.client_quotas
        user, client_id = user_of(connection.session.principal), header.client_id or ""
        key = header.api_key
        follower = key == ApiKey.FETCH and body.get("ReplicaId", -1) >= 0
        now = quotas.now_ms()
        produced = quotas.produce.record(user, client_id, size, now) if key == ApiKey.PRODUCE else 0
        request = 0
        if not (follower or key == ApiKey.WRITE_TXN_MARKERS):
            request = quotas.request.record(user, client_id, handled_ns * NANOS_TO_PERCENT, now)
        if produced or request:
            sensors = quotas.produce if produced >= request else quotas.request
            sensors.throttled(user, client_id, max(produced, request), now)
            connection.throttle(max(produced, request) / 1000)
        consumer_fetch = key == ApiKey.FETCH and not follower

        def finish(result: Any) -> Any:
            if not isinstance(result, dict):  # acks=0 (muted without an answer), a closed connection
                return result
            throttle = max(produced, request)
            if consumer_fetch and quotas.fetch.enabled:
                at, fetched = quotas.now_ms(), _fetched_bytes(result)
                fetch_throttle = quotas.fetch.record(user, client_id, fetched, at)
                if fetch_throttle or throttle:
                    # Kafka's throttled fetch: its bytes taken back, answered without partitions
                    quotas.fetch.unrecord(user, client_id, fetched, at)
                    result = {**result, "Responses": []}
                if fetch_throttle > throttle:
                    quotas.fetch.throttled(user, client_id, fetch_throttle, at)
                    connection.throttle(fetch_throttle / 1000)
                    throttle = fetch_throttle
            if throttle and "ThrottleTimeMs" in result:
                result["ThrottleTimeMs"] = throttle
            return result

        return finish

    def _authenticate(self, header: RequestHeader, body: dict[str, Any], connection: Connection) -> Any:
        """A request on a connection that has not authenticated yet (see the module docstring)."""
        session: Session = connection.session
        auth = session.authenticator
        assert auth is not None
        key = header.api_key
        if key == ApiKey.API_VERSIONS and auth.state == HANDSHAKE:
            self._ctx.request_session = session
            return self._encode(header, self._handlers[key](self._ctx, header, body))
        if key == ApiKey.SASL_HANDSHAKE and auth.state == HANDSHAKE:
            code = auth.handshake(body["Mechanism"], header.api_version)
            answer = self._encode(header, {"ErrorCode": code, "Mechanisms": list(auth.enabled)})
            if code != ErrorCode.NONE:
                return RespondThenClose(
                    answer,
                    delay_s=self._auth_delay_s,
                    reason=f"SASL mechanism {body['Mechanism']!r} is not enabled on listener {session.listener} "
                    f"(enabled: {', '.join(auth.enabled)})",
                )
            return answer
        if key == ApiKey.SASL_AUTHENTICATE and auth.state == AUTHENTICATE and not auth.raw_tokens:
            step = auth.authenticate(bytes(body["AuthBytes"]))
            answer = self._encode(
                header,
                {
                    "ErrorCode": step.error_code,
                    # "" when there is no error, as Kafka's SaslServerAuthenticator answers (never null).
                    "ErrorMessage": step.error_message if step.error_message is not None else "",
                    "AuthBytes": step.challenge,
                    "SessionLifetimeMs": auth.session_lifetime_ms if step.complete else 0,
                },
            )
            if step.error_code != ErrorCode.NONE:
                return RespondThenClose(
                    answer,
                    f"SASL/{auth.mechanism} authentication failed: {step.error_message}",
                    self._auth_delay_s,
                )
            if step.complete:
                self._authenticated(connection)
            return answer
        stage = "handshake" if auth.state == HANDSHAKE else "authentication"
        name = ApiKey(key).name if key in ApiKey._value2member_map_ else str(key)
        _log.warning(
            "closing connection %s: unexpected request %s during SASL %s on listener %s (client %r)",
            connection.peer,
            name,
            stage,
            session.listener,
            header.client_id,
        )
        return CLOSE

    def _expired(self, header: RequestHeader, connection: Connection, now: float) -> Any:
        """A request on a connection whose SASL session expired: close it unanswered (Kafka's behaviour)."""
        session = connection.session
        auth = session.authenticator
        assert auth is not None and auth.session_expires_at is not None
        name = (
            ApiKey(header.api_key).name
            if header.api_key in ApiKey._value2member_map_
            else str(header.api_key)
        )
        _log.info(
            "closing connection %s on listener %s: the SASL session of %s expired %d ms ago (session lifetime "
            "%d ms, connections.max.reauth.ms) and the client sent %s without re-authenticating (client %r)",
            connection.peer,
            session.listener,
            session.principal,
            int((now - auth.session_expires_at) * 1000),
            auth.session_lifetime_ms,
            name,
            header.client_id,
        )
        if self._ctx.metrics is not None:
            self._ctx.metrics.expired_connection_killed(session.listener)
        return CLOSE

    def _raw_token(self, frame: memoryview, connection: Connection) -> Any:
        """A raw SASL token after SaslHandshake v0: answered as a raw frame (size prefix and bytes)."""
        auth = connection.session.authenticator
        assert auth is not None
        step = auth.authenticate(bytes(frame))
        if step.error_code != ErrorCode.NONE:
            _log.warning(
                "closing connection %s: SASL/%s authentication failed: %s",
                connection.peer,
                auth.mechanism,
                step.error_message,
            )
            return CLOSE
        if step.complete:
            self._authenticated(connection)
        return [len(step.challenge).to_bytes(4, "big"), step.challenge]

    @staticmethod
    def _authenticated(connection: Connection) -> None:
        session = connection.session
        auth = session.authenticator
        assert auth is not None and auth.principal is not None
        session.principal = auth.principal
        _log.info(
            "connection %s on listener %s authenticated as %s (SASL/%s)",
            connection.peer,
            session.listener,
            session.principal,
            auth.mechanism,
        )

    def _encode(self, header: RequestHeader, result: Any) -> Any:
        if result is None or result is CLOSE_CONNECTION:
            return result
        return encode_response_chunks(header.api_key, header.api_version, header.correlation_id, result)

    def _encode_later(
        self,
        header: RequestHeader,
        pending: asyncio.Future[Any],
        timing: RequestTiming | None = None,
        finish: Callable[[Any], Any] | None = None,
    ) -> asyncio.Future[Any]:
        encoded: asyncio.Future[Any] = self._ctx.loop.create_future()

        def done(fut: asyncio.Future[Any]) -> None:
            if timing is not None:
                timing.resolved = time.monotonic_ns()
                if not fut.cancelled() and fut.exception() is None:
                    timing.result = fut.result()
            if encoded.done():
                return
            if fut.cancelled():
                encoded.cancel()
                return
            exc = fut.exception()
            if exc is not None:
                encoded.set_exception(exc)
                return
            try:
                result = fut.result()
                encoded.set_result(self._encode(header, result if finish is None else finish(result)))
            except Exception as err:  # encoding bug: surfaces as one closed connection
                encoded.set_exception(err)

        pending.add_done_callback(done)

        def abandon(fut: asyncio.Future[Any]) -> None:
            # The connection dropped the encoded future: resolve the handler's so its operation finishes.
            if fut.cancelled() and not pending.done():
                pending.cancel()

        encoded.add_done_callback(abandon)
        return encoded


def _fetched_bytes(result: dict[str, Any]) -> int:
    """The record bytes of a Fetch answer (what the consumer byte rate counts)."""
    return sum(
        len(p["Records"])
        for t in result.get("Responses") or ()
        for p in t["Partitions"]
        if p.get("Records") is not None
    )
