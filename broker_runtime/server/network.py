"""The listener and its connections: asyncio, one event-loop thread, one :class:`Connection` per client socket.

Design (Kafka's ``SocketServer`` processor, single-threaded):
  * bytes arrive in :meth:`Connection.buffer_updated` (plain sockets: an ``asyncio.BufferedProtocol`` whose
    ``get_buffer`` hands asyncio the decoder's next buffer, so the kernel writes a large request straight into the
    frame's own buffer: the broker's :class:`~broker_runtime.protocol.framing.FramePool`, see
    :mod:`broker_runtime.protocol.framing`) or :meth:`Connection.data_received` (TLS), and the
    :class:`~broker_runtime.protocol.framing.FrameDecoder` cuts them into frames (int32 size prefix stripped;
    frames above ``socket.request.max.bytes`` are refused);
  * before login (Kafka's ``SaslServerAuthenticator``, CVE-2022-34917): on a SASL listener, while the session is
    not authenticated (a new connection, or one re-authenticating after its SaslHandshake), a size prefix above
    ``sasl.server.max.receive.size`` closes the connection at once with one WARNING line, before a byte of the
    body is kept; an unauthenticated client thus holds at most that much buffered. The bound is chosen per read
    from the session's state: a client that pipelined a frame right behind its last SASL token, in the same
    read, has it judged by the pre-login bound (Kafka reads one receive at a time there and would use
    ``socket.request.max.bytes``; clients wait for the login's answer before sending anything else);
  * frames are handed to the dispatcher one at a time, in arrival order. A request the dispatcher cannot
    answer at once (a delayed fetch, an acks=-1 produce waiting for replication) returns an
    ``asyncio.Future``; unlike Kafka, which mutes a channel while a request is in flight, the connection goes
    on with the next frames (so a pipelining producer keeps many acks=-1 requests parked at once, costing
    memory, not threads), but responses are written strictly in request order: each request gets a slot in
    a FIFO and a slot is written only when it and every slot before it are resolved;
  * the responses resolved while one batch of frames is processed are written with ONE ``writelines`` at
    the end of the batch (or once :data:`WRITE_COALESCE_BYTES` are pending): a pipelining producer whose
    frames arrive several per read gets one ``send`` system call (and one wake-up on its side) per read,
    not one per request;
  * backpressure: frames stop being dispatched while :data:`MAX_IN_FLIGHT` requests await their answers (parked
    ones -- delayed fetches, acks=-1 produces -- included); reading pauses while ``queued.max.requests``
    (default :data:`QUEUED_MAX_REQUESTS`) frames wait to be dispatched, or while the transport's write buffer
    is above its high-water mark (a slow consumer), and resumes when both drain. The frames of the read that
    reached the bound are kept (a frame cannot be un-read). Kafka's ``queued.max.requests`` bounds the requests
    waiting for its handler threads, in one queue all connections share; pylog handles a request on the loop as
    soon as its connection may dispatch it, so requests wait only behind their own connection's in-flight
    limit, and the bound applies per connection. Parked requests are not counted (in Kafka they wait in a
    purgatory, not in that queue);
  * admission and idleness (Kafka's ``ConnectionQuotas`` and idle expiry, kept in :mod:`.connection_quotas`):
    ``admit`` is asked once the TCP socket is accepted, before any TLS handshake (Kafka's acceptor counts a
    connection there too), and may refuse it (the socket is closed at once, no handshake is started);
    :attr:`Connection.last_active` (monotonic seconds) moves on every read and write, and
    :meth:`Connection.idle_seconds` is 0 while a request is in flight. A socket still in its TLS handshake is
    counted and expires as idle like any other (it has read nothing into the connection yet); a handshake that
    fails or exceeds :data:`TLS_HANDSHAKE_TIMEOUT_S` ends the connection like a lost one (counted out, one
    INFO line);
  * client quotas (KIP-219): when a quota throttles a client, the dispatcher answers at once with the throttle
    time in ``ThrottleTimeMs`` and mutes the connection for that long (:meth:`Connection.throttle`): nothing is
    read or dispatched meanwhile (requests already dispatched still complete and are answered), as Kafka mutes a
    throttled channel after its response; a refused connection may be held open, unread, before its close
    (``refused_close_delay_s``: a connection over its ``connection_creation_rate``);
  * bad input (garbage, truncated or oversized frames, unknown API key or version) is the dispatcher's to judge:
    it answers an error or tells the connection to close. Either way exactly that one connection is affected
    and one log line says why.

Zero copy (sendfile): a response chunk may be a :class:`~broker_runtime.storage.file_handle.FileSlice` (a Fetch
answer's records left in their segment file, see :mod:`.handlers.fetch`). On a plain socket the connection sends
it with ``loop.sendfile`` (``os.sendfile``: page cache to socket, never through Python); on a TLS transport it
reads the slice and writes the bytes (the record bytes must pass through the TLS engine), as Kafka does. While a
sendfile is under way nothing else may be written to the transport (asyncio refuses it), so once a slice is
among the chunks to write, every later chunk of the connection goes to a FIFO backlog that one sender task
drains: bytes with ``write``, slices with ``sendfile``, strictly in order; the task ends when the backlog is
empty. Meanwhile no new frame is dispatched (the answers are in flight, as while the write buffer is full;
reading goes on up to ``queued.max.requests``); :meth:`Connection.close` lets the backlog drain before closing
the socket, so answers resolved before a close still leave. A slice whose file got shorter before it was sent
(a truncated active segment) sends fewer bytes than its frame announced: the connection is closed with a
WARNING line saying so and counted through the connection's ``on_short_send`` hook (the broker's
``pylog_network_sendfile_short_sends_total``; the client sees a dropped connection and retries, as with Kafka's
"truncated during write"). ``os.sendfile`` handles partial writes itself (asyncio resumes it when the socket is writable again).

Request timing (metrics): each frame keeps the monotonic time of the read that completed it; while the handler
runs, :attr:`Connection.received_ns` holds it. A handler may leave an object with a ``sent(now_ns)`` method in
:attr:`Connection.request_timing`; the connection calls it when that request's answer is handed to the
transport (or dropped: acks=0, a refused request).

Each connection carries a :class:`~broker_runtime.server.session.Session` (its listener, security protocol
and principal) set when its listener accepted it. On SSL listeners the listener accepts plain TCP and
:meth:`Connection.connection_made`, once admitted, upgrades the socket with ``loop.start_tls`` (server side);
the connection carries frames once the handshake has ended, and ``on_made`` reads the client certificate's
principal then. Decrypted bytes asyncio hands over before ``start_tls`` returns (sent by the client right
behind its last handshake message) are kept and fed to the decoder first.
TLS connections are :class:`TlsConnection`, an ``asyncio.BufferedProtocol``: asyncio's SSL transport then
decrypts into the connection's own buffer (sized from the encrypted bytes pending, kept and reused) instead of
allocating a 256 KiB ``bytes`` per ``SSLObject.read`` and joining the pieces; the decrypted bytes are copied
once into an immutable ``bytes`` for the frame decoder (which hands out zero-copy views of it).
:class:`RespondThenClose` lets the dispatcher answer a refused login and then close, a little later.

Thread-safety: every method runs on the event-loop thread; nothing here is shared with other threads.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import deque
from collections.abc import Callable
from typing import IO, Any, Protocol, cast

from broker_runtime.errors import ProtocolError, StorageError
from broker_runtime.protocol.framing import FrameDecoder, FramePool
from broker_runtime.server.session import Session
from broker_runtime.storage.file_handle import FileSlice

__all__ = [
    "CLOSE",
    "RespondThenClose",
    "MAX_IN_FLIGHT",
    "QUEUED_MAX_REQUESTS",
    "WRITE_COALESCE_BYTES",
    "Connection",
    "RequestHandler",
    "TlsConnection",
    "Response",
    "SENDFILE_MIN_BYTES",
]

_log = logging.getLogger(__name__)

#: Default frames of one connection waiting to be dispatched before reading pauses (``queued.max.requests``).
QUEUED_MAX_REQUESTS = 500
#: Dispatched requests of one connection whose responses are not written yet (pending futures included).
MAX_IN_FLIGHT = 2048
#: Resolved response bytes gathered before they are handed to the transport even mid-batch.
WRITE_COALESCE_BYTES = 256 * 1024
#: The smallest decrypt buffer a TLS connection hands asyncio (it grows to the largest read asked, <= 256 KiB).
TLS_READ_BUFFER_MIN = 16 * 1024
#: The TLS handshake of an accepted socket must end within this (asyncio's default; the connection is counted
#: meanwhile and ``connections.max.idle.ms`` closes it sooner when smaller).
TLS_HANDSHAKE_TIMEOUT_S = 60.0
#: Smallest record range a Fetch answer leaves in its file for ``sendfile`` (smaller ones are read: one copy of
#: a few KiB costs less than the sender task's extra turns through the event loop).
SENDFILE_MIN_BYTES = 16 * 1024


class _Close:
    """Sentinel: the request cannot be answered; close the connection (reason already logged)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "CLOSE"


CLOSE = _Close()


class RespondThenClose:
    """A response to write, after which the connection is closed ``delay_s`` later (a refused login: Kafka
    answers, then closes after ``connection.failed.authentication.delay.ms``); nothing more is read meanwhile."""

    __slots__ = ("chunks", "reason", "delay_s")

    def __init__(self, chunks: Any, reason: str, delay_s: float = 0.0) -> None:
        self.chunks = chunks
        self.reason = reason
        self.delay_s = delay_s


#: What the dispatcher returns for one frame: bytes (or a list of chunks, bytes-like or :class:`FileSlice`) to
#: send, None (no response, e.g. acks=0), CLOSE, or a future that later resolves to one of those.
Response = Any


class RequestHandler(Protocol):
    def __call__(self, frame: memoryview, connection: Connection) -> Any: ...


class Connection(asyncio.BufferedProtocol):
    """One client socket: framing, in-order request processing, response writing."""

    def __init__(
        self,
        handler: RequestHandler,
        max_frame_bytes: int,
        on_close: Callable[[Connection], None] | None = None,
        *,
        session: Session | None = None,
        on_made: Callable[[Connection, asyncio.Transport], None] | None = None,
        admit: Callable[[Connection], bool] | None = None,
        queued_max_requests: int = QUEUED_MAX_REQUESTS,
        on_short_send: Callable[[Connection], None] | None = None,
        prelogin_max_frame_bytes: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        frame_pool: FramePool | None = None,
    ) -> None:
        self._handler = handler
        #: The read buffers this connection reads into (see "Reads" in the module docstring): the broker's,
        #: shared by its connections (one event loop), or one of its own.
        self._pool = frame_pool if frame_pool is not None else FramePool(max_kept=1)
        #: Called (loop thread) when a sendfile sent fewer bytes than its slice (the file shrank); the
        #: connection is then closed and the cause logged at WARNING. The broker counts it for the metrics.
        self._on_short_send = on_short_send
        #: Listener, security protocol and principal of this connection (see :mod:`.session`).
        self.session = session or Session("PLAINTEXT", "PLAINTEXT")
        self._on_made = on_made
        self._decoder = FrameDecoder(max_frame_bytes, "socket.request.max.bytes")
        #: ``socket.request.max.bytes``, and ``sasl.server.max.receive.size`` (None: no SASL listener), the
        #: bound of a frame whose size prefix arrives while :attr:`session` is not authenticated.
        self._max_frame_bytes = max_frame_bytes
        self._prelogin_max_frame_bytes = prelogin_max_frame_bytes
        self._on_close = on_close
        self._admit = admit
        self._max_queued = queued_max_requests
        #: ``time.monotonic()`` of the last read or write (idle expiry, ``connections.max.idle.ms``).
        self.last_active = time.monotonic()
        #: Frames not yet dispatched, each with the monotonic time (ns) of the read that completed it.
        self._queue: deque[tuple[memoryview, int]] = deque()
        self._transport: asyncio.Transport | None = None
        #: Response slots in request order: a future (pending or done) or an already known result.
        self._slots: deque[Any] = deque()
        #: Beside each slot: the handler's request timing (or None), completed when the slot is written.
        self._timings: deque[Any] = deque()
        #: Arrival time (monotonic ns) of the frame being handled; see the module docstring.
        self.received_ns = 0
        #: Set by the handler while it handles a frame; see the module docstring.
        self.request_timing: Any = None
        #: Response chunks resolved but not yet handed to the transport (see :meth:`_write_out`).
        self._out: list[Any] = []
        self._out_bytes = 0
        #: True while ``_out`` holds a :class:`FileSlice`.
        self._out_slices = False
        #: Chunks waiting for the sender task (see "Zero copy" in the module docstring), and the task.
        self._backlog: deque[Any] = deque()
        self._sender: asyncio.Task[None] | None = None
        #: A close asked for while the sender runs: its ``delay_s``, applied once the backlog is sent.
        self._close_after_send: float | None = None
        #: Whether slices may be sent with ``sendfile`` (a plain socket); else they are read and written.
        self._sendfile = True
        self._write_paused = False
        self._read_paused = False
        self._closing = False
        self._join_writes = False
        self.peer = "?"
        self.peer_host = "?"
        #: TLS listeners: the server context the accepted TCP socket is upgraded with (see "Admission").
        self._ssl_context = ssl_context
        #: While the TLS handshake runs: the handshake task, and plaintext that arrived before it returned.
        self._handshake: asyncio.Task[None] | None = None
        self._early: list[bytes] = []
        self._lost = False
        #: Set by ``admit`` when it refuses: the socket is closed this much later (nothing is read meanwhile).
        self.refused_close_delay_s = 0.0
        #: Client quotas (KIP-219): nothing is read or dispatched until this monotonic time (see :meth:`throttle`).
        self._muted_until = 0.0
        self._unmute: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"{peer[0]}:{peer[1]}"
            self.peer_host = str(peer[0])
        self.session.client_address = self.peer
        if self._admit is not None and not self._admit(self):
            self._closing = True  # refused (the admission hook logged why): nothing is read or answered
            if self.refused_close_delay_s > 0:
                transport.pause_reading()
                asyncio.get_running_loop().call_later(self.refused_close_delay_s, transport.close)
            else:
                transport.close()
            return
        if self._ssl_context is not None:
            transport.pause_reading()  # nothing is read until the TLS layer owns the socket
            self._handshake = asyncio.get_running_loop().create_task(
                self._start_tls(transport, self._ssl_context)
            )
            return
        self._ready(transport)

    async def _start_tls(self, raw: asyncio.Transport, context: ssl.SSLContext) -> None:
        """Run the server side of the TLS handshake on the admitted socket; on success the connection goes on
        on the TLS transport, on failure (or a close meanwhile) it ends as a lost connection (counted out)."""
        loop = asyncio.get_running_loop()
        failure: BaseException | None = None
        tls: asyncio.BaseTransport | None = None
        try:
            tls = await loop.start_tls(
                raw, self, context, server_side=True, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S
            )
        except (TimeoutError, OSError, ConnectionError, ssl.SSLError) as exc:
            failure = exc
        except asyncio.CancelledError:
            raw.abort()
            self._handshake = None
            self.connection_lost(None)
            raise
        self._handshake = None
        if tls is None or self._closing:
            if tls is not None:
                tls.close()
            raw.abort()
            if not self._closing:
                _log.info(
                    "connection %s: TLS handshake failed: %s", self.peer, failure or "closed by the peer"
                )
            self.connection_lost(None)
            return
        assert isinstance(tls, asyncio.Transport)
        self._ready(tls)
        early, self._early = self._early, []
        for data in early:
            self.data_received(data)

    def _ready(self, transport: asyncio.Transport) -> None:
        """The connection carries Kafka frames from now on (after the TLS handshake on a TLS listener)."""
        self._transport = transport
        # asyncio's TLS transport encrypts every chunk of a writelines() as a TLS record of its own: join them.
        self._join_writes = transport.get_extra_info("ssl_object") is not None
        self._sendfile = not self._join_writes
        if self._on_made is not None:
            self._on_made(self, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.read_buffer(self._pool)

    def buffer_updated(self, nbytes: int) -> None:
        if self._closing:
            return
        self._received(self._read_done, nbytes)

    def _read_done(self, nbytes: int) -> list[Any]:
        return self._decoder.read_done(nbytes, self._pool)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._handshake is not None:
            # asyncio hands over what arrived with the client's last handshake message before start_tls returns
            self._early.append(data)
            return
        self._received(self._decoder.feed, data)

    def _received(self, frames_of: Callable[[Any], list[Any]], data: Any) -> None:
        """Cut the frames out of what a read brought (``frames_of(data)``), queue them and process the queue."""
        self.last_active = time.monotonic()
        decoder = self._decoder
        if self._prelogin_max_frame_bytes is not None:
            if self.session.authenticated:
                decoder.max_frame_bytes, decoder.limit_name = (
                    self._max_frame_bytes,
                    "socket.request.max.bytes",
                )
            else:
                decoder.max_frame_bytes = self._prelogin_max_frame_bytes
                decoder.limit_name = "sasl.server.max.receive.size"
        try:
            frames = frames_of(data)
        except ProtocolError as exc:
            if decoder.max_frame_bytes == self._prelogin_max_frame_bytes and not self.session.authenticated:
                self.close(
                    f"failing SASL authentication on listener {self.session.listener} due to invalid receive size: "
                    f"{exc} (a frame before the login completed)"
                )
            else:
                self.close(f"bad frame: {exc}")
            return
        if frames:
            now = time.monotonic_ns()
            for frame in frames:
                self._queue.append((memoryview(frame), now))
        self._process()

    def eof_received(self) -> bool | None:
        # The client half-closed: answer what is queued is pointless for a disconnected peer; just close.
        self._closing = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lost:  # a TLS socket lost as its handshake ends is reported by asyncio and by _start_tls
            return
        self._lost = True
        self._closing = True
        self._queue.clear()
        self._transport = None
        self._out.clear()
        self._backlog.clear()
        slots, self._slots = self._slots, deque()
        self._timings.clear()
        if self._unmute is not None:
            self._unmute.cancel()
            self._unmute = None
        for slot in slots:
            if isinstance(slot, asyncio.Future) and not slot.done():
                # Nobody will read the answer: cancelling lets the delayed operation finish at its next check.
                slot.cancel()
        if self._decoder.buffered:
            _log.info("connection %s closed mid-request (partial frame discarded)", self.peer)
        if self._on_close is not None:
            self._on_close(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()
        self._process()

    # -- processing ---------------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return not self._closing and self._transport is not None

    @property
    def queued_requests(self) -> int:
        """Frames received whole and not yet dispatched."""
        return len(self._queue)

    @property
    def in_flight_requests(self) -> int:
        """Requests dispatched whose responses are not written yet."""
        return len(self._slots)

    @property
    def reading_paused(self) -> bool:
        return self._read_paused

    @property
    def muted(self) -> bool:
        """Throttled by a client quota: nothing is read or dispatched now (see :meth:`throttle`)."""
        return self._unmute is not None

    def throttle(self, seconds: float) -> None:
        """Mute this connection for ``seconds`` (a client quota's throttle time, KIP-219): the answers already
        resolved still leave, but no further frame is dispatched and nothing is read until then, as Kafka mutes
        the channel of a throttled client after sending its response. A longer throttle extends a shorter one."""
        if seconds <= 0 or self._closing:
            return
        until = time.monotonic() + seconds
        if until <= self._muted_until:
            return
        self._muted_until = until
        if self._unmute is not None:
            self._unmute.cancel()
        self._unmute = asyncio.get_running_loop().call_later(seconds, self._unmuted)
        self._update_reading()

    def _unmuted(self) -> None:
        self._unmute = None
        if self._closing:
            return
        self._update_reading()
        self._process()

    def idle_seconds(self, now: float) -> float:
        """Seconds since the last read or write; 0 while a request is queued or awaits its answer."""
        if self._slots or self._queue:
            return 0.0
        return now - self.last_active

    def close(self, reason: str, *, level: int = logging.WARNING, delay_s: float = 0.0) -> None:
        """Close this connection (after flushing what was already written) and log one line why.

        ``level``: WARNING for a connection refused for its input (the default), INFO for an expected close
        such as the broker stopping. ``delay_s``: the socket is closed that much later (nothing is read meanwhile).
        """
        if self._closing:
            return
        self._write_out()  # responses resolved before the refusal still go out, in order
        self._closing = True
        self._queue.clear()
        _log.log(level, "closing connection %s: %s", self.peer, reason)
        transport = self._transport
        if transport is not None and self._sender is not None:
            transport.pause_reading()
            self._close_after_send = delay_s  # the sender closes the socket once the backlog is sent
            return
        if transport is not None:
            if delay_s > 0:
                transport.pause_reading()
                asyncio.get_running_loop().call_later(delay_s, transport.close)
            else:
                transport.close()

    def _process(self) -> None:
        while (
            self._queue
            and len(self._slots) < MAX_IN_FLIGHT
            and not self._closing
            and not self._write_paused
            and self._sender is None
            and self._unmute is None
        ):
            frame, self.received_ns = self._queue.popleft()
            self.request_timing = None
            try:
                result = self._handler(frame, self)
            except Exception:  # a handler bug must cost one connection, never the broker
                _log.exception("connection %s: unexpected error while handling a request", self.peer)
                self.close("internal error while handling a request (see the traceback above)")
                return
            if isinstance(result, asyncio.Future) and not result.done():
                result.add_done_callback(self._on_slot_done)
            self._slots.append(result)
            self._timings.append(self.request_timing)
            self._flush_slots()
        self._write_out()
        self._update_reading()

    def _on_slot_done(self, future: asyncio.Future[Any]) -> None:
        if self._closing:
            return
        self._flush_slots()
        self._process()

    def _flush_slots(self) -> None:
        """Write the resolved slots at the head of the FIFO (responses leave in request order)."""
        slots = self._slots
        while slots and not self._closing:
            head = slots[0]
            if isinstance(head, asyncio.Future):
                if not head.done():
                    return
                slots.popleft()
                self._sent(self._timings.popleft())
                if head.cancelled():
                    self.close("a delayed request was cancelled (broker stopping)")
                    return
                exc = head.exception()
                if exc is not None:
                    _log.error("connection %s: delayed request failed", self.peer, exc_info=exc)
                    self.close("internal error while completing a delayed request")
                    return
                self._emit(head.result())
            else:
                slots.popleft()
                self._sent(self._timings.popleft())
                self._emit(head)

    @staticmethod
    def _sent(timing: Any) -> None:
        if timing is not None:
            timing.sent(time.monotonic_ns())

    def _emit(self, result: Any) -> None:
        if result is None:
            return
        if result is CLOSE:
            # whoever refused the request logged why (at WARNING): this line only points back to it
            self.close("request refused (see the previous log line)", level=logging.DEBUG)
            return
        if isinstance(result, RespondThenClose):
            self._emit(result.chunks)
            self.close(result.reason, delay_s=result.delay_s)
            return
        if self._transport is None:
            return
        out = self._out
        if isinstance(result, list):
            for chunk in result:
                if isinstance(chunk, FileSlice):
                    self._out_slices = True
                else:
                    self._out_bytes += len(chunk)
            out.extend(result)
        else:
            out.append(result)
            self._out_bytes += len(result)
        if self._out_bytes >= WRITE_COALESCE_BYTES:
            self._write_out()

    def _write_out(self) -> None:
        """Hand the gathered response chunks to the transport in one call (one ``send`` when it can)."""
        out = self._out
        if not out:
            return
        self._out = []
        self._out_bytes = 0
        self.last_active = time.monotonic()
        slices, self._out_slices = self._out_slices, False
        transport = self._transport
        if transport is not None and not self._closing:
            if slices or self._sender is not None:
                self._backlog.extend(out)
                if self._sender is None:
                    self._sender = asyncio.get_running_loop().create_task(self._send_backlog(transport))
                return
            if len(out) == 1:
                transport.write(out[0])
            elif self._join_writes:
                transport.write(b"".join(out))
            else:
                transport.writelines(out)

    async def _send_backlog(self, transport: asyncio.Transport) -> None:
        """Drain :attr:`_backlog` in order: runs of bytes with one write, slices with sendfile (or read)."""
        backlog = self._backlog
        loop = asyncio.get_running_loop()
        try:
            while backlog and self._transport is transport and not transport.is_closing():
                run: list[Any] = []
                while backlog and not isinstance(backlog[0], FileSlice):
                    run.append(backlog.popleft())
                if run:
                    transport.write(run[0] if len(run) == 1 else b"".join(run))
                if not backlog:
                    break
                piece: FileSlice = backlog.popleft()
                if not self._sendfile:
                    transport.write(piece.read())
                    continue
                # loop.sendfile needs only fileno() of its file (and no fallback, which would read it)
                file = cast(IO[bytes], piece)
                sent = await loop.sendfile(transport, file, piece.position, len(piece), fallback=False)
                self.last_active = time.monotonic()
                if sent != len(piece):
                    if self._on_short_send is not None:
                        self._on_short_send(self)
                    raise StorageError(
                        f"{piece.handle.path.name} shrank below byte {piece.position + len(piece)} while its "
                        f"range was sent ({sent} of {len(piece)} bytes sent)"
                    )
        except (OSError, StorageError, RuntimeError) as exc:
            # A frame may be cut mid-way: nothing more can be written on this connection.
            backlog.clear()
            self._out.clear()
            if self._transport is transport:
                level = logging.INFO if isinstance(exc, ConnectionError) else logging.WARNING
                _log.log(level, "closing connection %s: sending a response failed: %s", self.peer, exc)
                self._closing = True
                self._queue.clear()
                transport.abort()
            return
        finally:
            self._sender = None
        if self._closing:
            delay = self._close_after_send
            self._close_after_send = None
            if self._transport is transport:
                if delay:
                    loop.call_later(delay, transport.close)
                else:
                    transport.close()
            return
        # asyncio resumed reading after the sendfile if it was on before: restore this connection's choice
        if self._read_paused and transport.is_reading():
            transport.pause_reading()
        self._process()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        should_pause = self._write_paused or len(self._queue) >= self._max_queued or self._unmute is not None
        if should_pause and not self._read_paused:
            self._read_paused = True
            transport.pause_reading()
        elif not should_pause and self._read_paused:
            self._read_paused = False
            transport.resume_reading()


class TlsConnection(Connection, asyncio.BufferedProtocol):
    """A :class:`Connection` on a TLS listener: asyncio's SSL transport decrypts into :meth:`get_buffer`'s buffer
    (see the module docstring); everything else is :class:`Connection`'s."""

    _read_buffer = bytearray()
    _read_view = memoryview(_read_buffer)

    def get_buffer(self, sizehint: int) -> memoryview:
        want = max(sizehint, TLS_READ_BUFFER_MIN)
        if len(self._read_buffer) < want:
            self._read_buffer = bytearray(want)
            self._read_view = memoryview(self._read_buffer)
        return self._read_view

    def buffer_updated(self, nbytes: int) -> None:
        # bytes: the frames cut from it are zero-copy views that must not change when the buffer is reused.
        self.data_received(bytes(self._read_view[:nbytes]))
