"""The console's request values: integers in Kafka's int64 range and times, from a query string or a form.
Anything else raises :class:`BadRequest`, which the server answers as a 400 page naming the value. Pure
functions; thread-safe."""

from __future__ import annotations

import datetime

__all__ = ["BadRequest", "int64", "parse_time"]

_INT64 = (-(1 << 63), (1 << 63) - 1)


class BadRequest(Exception):
    pass


def int64(name: str, text: str) -> int:
    """``text`` as an int64 (at most 19 digits, so ``int()`` never meets Python's digit limit)."""
    digits = text[1:] if text[:1] == "-" else text
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 19):
        raise BadRequest(f"{name}={text[:40]!r}: expected an integer")
    value = int(text)
    if not _INT64[0] <= value <= _INT64[1]:
        raise BadRequest(f"{name}={text!r}: out of range (a 64-bit integer)")
    return value


def parse_time(text: str) -> int:
    """A time in ms since the epoch, or an ISO-8601 date-time (UTC unless it names its offset)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int64("timestamp", text)
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(
            f"timestamp={text!r}: expected ms since the epoch or ISO-8601 (2026-11-27T10:00:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)
