"""Size-prefixed framing of the Kafka protocol: splitting a byte stream into request/response frames.

Wire format: every request and response is ``int32 size`` (big-endian, bytes that follow) + ``size`` bytes.
:class:`FrameDecoder` is sans-IO: feed it whatever ``recv`` returned, in any chunking, and it hands back the
complete frames with the size prefix removed, in order.

Invariants: a frame is never handed out twice and never mutated after it is handed out; a size that is
negative or larger than ``max_frame_bytes`` raises :class:`~broker_runtime.errors.ProtocolError` (the stream
cannot be resynchronised afterwards, so the caller must close the connection). Copies: a frame that arrives
whole inside one ``bytes`` chunk is returned as a zero-copy ``memoryview`` of that chunk; a frame spread over
chunks is assembled in a buffer that grows with the bytes received (never allocated up front from the size
prefix, which only the peer vouches for: a peer claiming ``max_frame_bytes`` and sending a few bytes costs a few
bytes, not the claimed size). Growing costs amortized O(1) per byte (CPython over-allocates a bytearray).

Reading straight into buffers (the broker's connections, an ``asyncio.BufferedProtocol``): :meth:`FrameDecoder.read_buffer`
says where the next read lands and :meth:`FrameDecoder.read_done` takes what it brought. Reads land in the
:class:`FramePool`'s read buffer (shared by the connections of one event loop) while no frame is open; a frame
that ends in it is copied out (small frames: one short copy); a frame that does not is opened in a buffer of its
own, and the reads that follow land in that buffer directly, so a large Produce request is copied only by the
kernel (and once for the part its first read brought). A new frame buffer holds at most
``max(frame_buffer_min, 2 x the bytes received)`` bytes and grows (doubling, one copy) as more arrive, so the size
prefix still buys nothing; once handed out, the buffer is kept in the pool and reused for a later frame (of at least half its size) only
when no view of the earlier frame is left (a handler that parked the frame, e.g. a produce awaiting its transaction's
verification, keeps it intact). A frame handed out this way is a writable ``memoryview``: a handler may rewrite
it in place (the log assigns offsets in it).

Not thread-safe: one decoder per connection, used by the thread that reads the socket; a pool belongs to one
thread (the broker's event loop) too.
"""

from __future__ import annotations

import struct

from broker_runtime.errors import ConfigError, ProtocolError

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "FRAME_BUFFER_MIN",
    "FRAME_SIZE",
    "READ_BUFFER_BYTES",
    "FrameDecoder",
    "FramePool",
    "frame",
]

#: The int32 size prefix of every frame.
FRAME_SIZE = struct.Struct(">i")
#: Kafka's socket.request.max.bytes default (100 MiB).
DEFAULT_MAX_FRAME_BYTES = 104857600

#: Reads land in the pool's shared buffer (this size, asyncio's read size) unless a frame is open.
READ_BUFFER_BYTES = 256 * 1024
#: A frame that does not end in the read that brought its size prefix gets a buffer of its own of at least
#: this many bytes (up to its size), then at most twice the bytes received until whole.
FRAME_BUFFER_MIN = 16 * 1024


class FramePool:
    """Read buffers of the connections of one event loop (one thread): the read buffer every read lands in while
    its connection has no frame open, and the buffers of whole frames handed out, kept for reuse.

    A kept buffer is reused for a later frame only once nothing refers to the frame any more: Python refuses to
    resize a ``bytearray`` while a view of it exists, which :func:`_unviewed` asks. At most ``max_kept`` buffers
    of at most ``max_kept_bytes`` together are kept (the oldest are dropped first); none larger than that.
    """

    __slots__ = ("read_view", "frame_buffer_min", "_kept", "_kept_bytes", "max_kept", "max_kept_bytes")

    def __init__(
        self,
        max_kept: int = 4,
        max_kept_bytes: int = 16 * 1024 * 1024,
        *,
        read_bytes: int = READ_BUFFER_BYTES,
        frame_buffer_min: int = FRAME_BUFFER_MIN,
    ) -> None:
        self.read_view = memoryview(bytearray(read_bytes))
        self.frame_buffer_min = frame_buffer_min
        self._kept: list[bytearray] = []
        self._kept_bytes = 0
        self.max_kept = max_kept
        self.max_kept_bytes = max_kept_bytes

    def take(self, size: int) -> bytearray | None:
        """The smallest kept buffer of ``size`` to ``max(2 x size, frame_buffer_min)`` bytes that no one views any
        more (removed from the pool), or None: a small frame kept by its handler never pins a large buffer."""
        limit = max(2 * size, self.frame_buffer_min)
        best = -1
        for i, buf in enumerate(self._kept):
            if (
                size <= len(buf) <= limit
                and (best < 0 or len(buf) < len(self._kept[best]))
                and _unviewed(buf)
            ):
                best = i
        if best < 0:
            return None
        buf = self._kept.pop(best)
        self._kept_bytes -= len(buf)
        return buf

    def keep(self, buf: bytearray) -> None:
        """Keep ``buf`` (a frame handed out: still viewed) for reuse once its frame is released."""
        if not self.frame_buffer_min <= len(buf) <= self.max_kept_bytes:
            return  # a small frame's buffer is not worth a slot (it would push out a large one)
        self._kept.append(buf)
        self._kept_bytes += len(buf)
        while len(self._kept) > self.max_kept or self._kept_bytes > self.max_kept_bytes:
            self._kept_bytes -= len(self._kept.pop(0))


def _unviewed(buf: bytearray) -> bool:
    """True when no view (memoryview, numpy array, ...) of ``buf`` exists: only then may it be resized."""
    try:
        del buf[-1:]
    except BufferError:
        return False
    buf.append(0)  # back to its length (within its allocation: no copy)
    return True


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return FRAME_SIZE.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Incremental splitter of a size-prefixed byte stream into frames."""

    __slots__ = ("max_frame_bytes", "limit_name", "_prefix", "_frame", "_size", "_view", "_filled")

    def __init__(
        self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, limit_name: str = "max_frame_bytes"
    ) -> None:
        if max_frame_bytes < 0:
            raise ConfigError(f"max_frame_bytes must be >= 0, got {max_frame_bytes}")
        #: The bound checked against each size prefix; the caller may change it between feeds (it applies to
        #: the frames whose prefix arrives after the change), and the name its error message gives it.
        self.max_frame_bytes = max_frame_bytes
        self.limit_name = limit_name
        self._prefix = bytearray()  # the partial size prefix (< 4 bytes) while no frame is open
        self._frame: bytearray | None = None  # the frame being assembled: the bytes received so far
        self._size = 0  # the size its prefix announced
        # Reading straight into buffers (read_buffer / read_done): the open frame's buffer (also in _frame, its
        # capacity len(_view), at most _size) and the bytes of it received so far.
        self._view: memoryview | None = None
        self._filled = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet handed out as a frame (an open frame's size prefix included)."""
        if self._view is not None:
            return FRAME_SIZE.size + self._filled
        if self._frame is not None:
            return FRAME_SIZE.size + len(self._frame)
        return len(self._prefix)

    def _check(self, size: int) -> None:
        if size < 0:
            raise ProtocolError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise ProtocolError(f"frame of {size} bytes exceeds {self.limit_name} {self.max_frame_bytes}")

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview | bytes | bytearray]:
        """Consume ``data`` and return the frames it completed (possibly none)."""
        frames: list[memoryview | bytes | bytearray] = []
        view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
        # Only immutable input may be handed out by reference.
        zero_copy = isinstance(data, bytes)
        pos = 0
        end = len(view)
        while pos < end:
            current = self._frame
            if current is not None:
                take = min(self._size - len(current), end - pos)
                current += view[pos : pos + take]  # grows with what arrived (amortized, no zero-fill ahead)
                pos += take
                if len(current) == self._size:
                    frames.append(current)
                    self._frame = None
                continue
            if self._prefix:
                need = 4 - len(self._prefix)
                self._prefix += view[pos : pos + need]
                pos += min(need, end - pos)
                if len(self._prefix) < 4:
                    break
                (size,) = FRAME_SIZE.unpack(self._prefix)
                self._prefix.clear()
            elif end - pos >= 4:
                (size,) = FRAME_SIZE.unpack_from(view, pos)
                pos += 4
            else:
                self._prefix += view[pos:end]
                break
            self._check(size)
            if zero_copy and end - pos >= size:
                frames.append(view[pos : pos + size])
                pos += size
            elif end - pos >= size:
                frames.append(bytes(view[pos : pos + size]))
                pos += size
            else:
                self._frame = bytearray(view[pos:end])
                self._size = size
                pos = end
        return frames

    # -- reading straight into buffers (asyncio.BufferedProtocol) ----------------------------------------------

    def read_buffer(self, pool: FramePool) -> memoryview:
        """Where the next read should land: the rest of the open frame's own buffer, else the pool's read buffer
        (after the partial size prefix carried over, copied to its start). Pair each call with
        :meth:`read_done`; do not mix with :meth:`feed` on one decoder."""
        if self._view is not None:
            # never past the frame's end: a kept buffer may be larger than the frame, and the bytes after its end
            # belong to the next frame
            return self._view[self._filled : self._size]
        view = pool.read_view
        carried = len(self._prefix)
        if carried:
            view[:carried] = self._prefix
        return view[carried:]

    def read_done(self, nbytes: int, pool: FramePool) -> list[memoryview | bytes]:
        """``nbytes`` landed where :meth:`read_buffer` said; return the frames now whole, in order."""
        view = self._view
        if view is not None:
            self._filled += nbytes
            if self._filled < self._size:
                if self._filled == len(view):
                    self._grow()
                return []
            return [self._close_frame(pool)]
        carried = len(self._prefix)
        self._prefix.clear()
        data = pool.read_view
        end = carried + nbytes
        pos = 0
        frames: list[memoryview | bytes] = []
        while end - pos >= 4:
            (size,) = FRAME_SIZE.unpack_from(data, pos)
            self._check(size)
            pos += 4
            if end - pos >= size:
                frames.append(bytes(data[pos : pos + size]))  # the read buffer is reused: copy
                pos += size
                continue
            self._open(size, data[pos:end], pool)
            return frames
        self._prefix += data[pos:end]
        return frames

    def _open(self, size: int, first: memoryview, pool: FramePool) -> None:
        """Start a frame of ``size`` bytes whose first bytes are ``first``: in a kept buffer of the pool that no
        one views any more, else in a new one of at most ``max(pool.frame_buffer_min, 2 x len(first))`` bytes."""
        buf = pool.take(size)
        if buf is None:
            buf = bytearray(min(size, max(pool.frame_buffer_min, 2 * len(first))))
        view = memoryview(buf)
        view[: len(first)] = first
        self._frame, self._view, self._filled, self._size = buf, view, len(first), size

    def _grow(self) -> None:
        """The open frame's buffer is full: move it to one twice as large (at most the frame's size)."""
        assert self._view is not None
        buf = bytearray(min(self._size, 2 * len(self._view)))
        buf[: self._filled] = self._view[: self._filled]
        self._frame, self._view = buf, memoryview(buf)

    def _close_frame(self, pool: FramePool) -> memoryview:
        buf, view, size = self._frame, self._view, self._size
        assert buf is not None and view is not None
        self._frame = self._view = None
        self._filled = self._size = 0
        pool.keep(buf)
        return view if len(view) == size else view[:size]
