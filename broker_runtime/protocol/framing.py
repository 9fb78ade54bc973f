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

Not thread-safe: one decoder per connection, used by the thread that reads the socket.
"""

from __future__ import annotations

import struct

from broker_runtime.errors import ConfigError, ProtocolError

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "FRAME_SIZE", "FrameDecoder", "frame"]

#: The int32 size prefix of every frame.
FRAME_SIZE = struct.Struct(">i")
#: Kafka's socket.request.max.bytes default (100 MiB).
DEFAULT_MAX_FRAME_BYTES = 104857600


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return FRAME_SIZE.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Incremental splitter of a size-prefixed byte stream into frames."""

    __slots__ = ("max_frame_bytes", "limit_name", "_prefix", "_frame", "_size")

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

    @property
    def buffered(self) -> int:
        """Bytes received but not yet handed out as a frame (an open frame's size prefix included)."""
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
