"""Topic IDs (KIP-516): a random 128-bit UUID given to a topic when it is created, never reused.

Text form (Kafka's ``Uuid.toString`` / ``Uuid.fromString``): the 16 bytes in URL-safe base64 without padding,
22 characters, e.g. ``tIjFfDlXRtuWtHbbhiUEfA``. That is what ``kafka-topics --describe`` prints, what the
``partition.metadata`` file holds and what pylog's cluster metadata stores. On the wire a topic id is the 16 raw
bytes (``uuid`` in :mod:`.primitives.wire`); all zeros (:data:`ZERO_TOPIC_ID`) means "no id".

:func:`new_topic_id` draws as Kafka's ``Uuid.randomUuid`` does: never the zero id nor Kafka's reserved
``METADATA_TOPIC_ID`` (1), and never one whose text starts with ``-`` (a command-line tool would read it as an
option). Stateless; thread-safe.
"""

from __future__ import annotations

import base64
import binascii
import uuid

__all__ = ["ZERO_TOPIC_ID", "format_topic_id", "new_topic_id", "parse_topic_id"]

#: Kafka's ``Uuid.ZERO_UUID``: no topic id.
ZERO_TOPIC_ID = uuid.UUID(int=0)
#: Kafka's ``Uuid.METADATA_TOPIC_ID`` (the KRaft metadata log's), never given to a topic.
_METADATA_TOPIC_ID = uuid.UUID(int=1)


def format_topic_id(topic_id: uuid.UUID) -> str:
    """The 22-character text form (see the module docstring)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def parse_topic_id(text: str) -> uuid.UUID:
    """The id of a 22-character text form; ValueError naming the text when it is not one."""
    if len(text) != 22:
        raise ValueError(f"topic id {text!r} is not 22 characters of URL-safe base64")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        raise ValueError(f"topic id {text!r} is not 22 characters of URL-safe base64") from None
    if len(raw) != 16:
        raise ValueError(f"topic id {text!r} does not decode to 16 bytes")
    return uuid.UUID(bytes=raw)


def new_topic_id() -> uuid.UUID:
    """A fresh random topic id (see the module docstring)."""
    while True:
        candidate = uuid.uuid4()
        if candidate in (ZERO_TOPIC_ID, _METADATA_TOPIC_ID) or format_topic_id(candidate).startswith("-"):
            continue
        return candidate
