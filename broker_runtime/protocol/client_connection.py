"""The client side of one Kafka-protocol connection, sans-IO: requests out, responses in, no sockets.

Protocol facts this relies on (Kafka's ``NetworkClient``/``InFlightRequests``): a broker answers the requests
of one connection strictly in the order they were sent, each response echoing the request's int32
correlation id; a Produce request with ``Acks`` 0 gets no response at all. A response carries no API key or
version, so decoding it needs the pending request's.

:class:`ClientConnection` owns exactly that state, after h11's idea: the caller does the I/O and this object
the bookkeeping::

    chunks = conn.send_request(api_key, version, body)   # assigns the correlation id; the caller writes chunks
    for response in conn.receive_data(data):              # whatever recv() returned, in any chunking
        ...                                               # Response(correlation_id, api_key, version, body)

Invariants: correlation ids count up from 1 and wrap to 0 after ``2**31 - 1`` (int32, never negative); the
pending FIFO holds ``(correlation id, api key, version)`` of every request that expects an answer, oldest
first; responses are decoded and handed out in arrival order, and a response whose correlation id is not the
oldest pending one's raises :class:`~broker_runtime.errors.CorrelationIdMismatchError` (a
``ProtocolError``: the stream is out of step). A
frame whose size prefix exceeds ``max_frame_bytes`` raises ``ProtocolError`` naming the size and the bound
before any buffer for it is allocated; so does a frame arriving when no request is pending. After any
``ProtocolError`` the state is unusable (:attr:`broken`) until :meth:`ClientConnection.reset`: the caller
closes the socket, and resets the state for its next socket. A reset forgets the pending requests and any
partial frame but keeps counting correlation ids, so an id is not reused by the next socket of the same owner
(an answer kept from an earlier socket cannot be mistaken for a new one's).

Not thread-safe: one instance per socket, used by the code that owns that socket.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any, NamedTuple

from broker_runtime.errors import CorrelationIdMismatchError, ProtocolError
from broker_runtime.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from broker_runtime.protocol.messages import decode_response, encode_request_chunks

__all__ = ["ClientConnection", "PendingRequest", "Response"]

#: Correlation ids are int32 and never negative: after this one the next is 0.
_MAX_CORRELATION_ID = 0x7FFFFFFF


class PendingRequest(NamedTuple):
    """A request written (or about to be) whose response has not been decoded yet."""

    correlation_id: int
    api_key: int
    api_version: int


class Response(NamedTuple):
    """One decoded response, with the request it answers."""

    correlation_id: int
    api_key: int
    api_version: int
    body: dict[str, Any]


class ClientConnection:
    """Correlation ids, the pending FIFO, response framing and decoding of one connection; see the module."""

    __slots__ = ("client_id", "max_frame_bytes", "_decoder", "_pending", "_next_correlation_id", "broken")

    def __init__(self, client_id: str | None, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.client_id = client_id
        self.max_frame_bytes = max_frame_bytes
        self._decoder = FrameDecoder(max_frame_bytes)
        self._pending: collections.deque[PendingRequest] = collections.deque()
        self._next_correlation_id = 1
        #: Set by the first ProtocolError: the byte stream cannot be trusted any more.
        self.broken = False

    @property
    def in_flight(self) -> int:
        """Requests awaiting a response."""
        return len(self._pending)

    def is_pending(self, correlation_id: int) -> bool:
        return any(p.correlation_id == correlation_id for p in self._pending)

    @property
    def buffered(self) -> int:
        """Bytes received that do not complete a frame yet."""
        return self._decoder.buffered

    def reset(self) -> None:
        """The socket closed: forget pending requests and buffered bytes; correlation ids keep counting."""
        self._decoder = FrameDecoder(self.max_frame_bytes)
        self._pending.clear()
        self.broken = False

    def send_request(
        self, api_key: int, api_version: int, body: Mapping[str, Any], *, expect_response: bool = True
    ) -> tuple[int, list[Any]]:
        """Encode a request with the next correlation id; return ``(correlation id, chunks to write)``.

        The chunks (size prefix first) go to the socket in order. With ``expect_response`` false (Produce
        with acks 0) the request is not remembered as pending.
        """
        self._check_usable()
        corr = self._next_correlation_id
        chunks = encode_request_chunks(api_key, api_version, corr, self.client_id, body)
        self._next_correlation_id = 0 if corr == _MAX_CORRELATION_ID else corr + 1
        if expect_response:
            self._pending.append(PendingRequest(corr, api_key, api_version))
        return corr, chunks

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Response]:
        """Consume bytes read from the socket; return the responses they completed, in order."""
        self._check_usable()
        try:
            frames = self._decoder.feed(data)
            return [self._decode(frame) for frame in frames]
        except ProtocolError:
            self.broken = True
            raise

    def _decode(self, frame: bytes | bytearray | memoryview) -> Response:
        if not self._pending:
            raise ProtocolError(f"received a response frame of {len(frame)} bytes but no request is pending")
        expected = self._pending[0]
        corr, body = decode_response(expected.api_key, expected.api_version, frame)
        if corr != expected.correlation_id:
            raise CorrelationIdMismatchError(
                f"response correlation id {corr} does not match the expected {expected.correlation_id}"
            )
        self._pending.popleft()
        return Response(corr, expected.api_key, expected.api_version, body)

    def _check_usable(self) -> None:
        if self.broken:
            raise ProtocolError("the connection's byte stream is out of step after an earlier protocol error")
