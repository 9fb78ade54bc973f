"""The ``partition.metadata`` file of a partition directory (Kafka's ``PartitionMetadataFile``): the topic id
the partition's log belongs to, so a log left behind by a deleted topic is never taken for a new topic of the
same name.

Format (Kafka's, so its tools read pylog's directories and the other way round), UTF-8 text::

    version: 0
    topic_id: tIjFfDlXRtuWtHbbhiUEfA

``version`` 0 is the only one written; a reader accepts 0 and later (Kafka's rule, for downgrades) and refuses
anything else, a missing or malformed line, or the zero id, with a :class:`~broker_runtime.errors.StorageError`
naming the file. Written atomically (``.tmp``, fsync, rename, fsync dir) when a log is created or first given
an id (a directory written before pylog had topic ids has no file: its id is assigned by the topic's owner and
written then). Stateless functions; safe from any thread.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from broker_runtime.errors import StorageError
from broker_runtime.fsutil import write_atomically
from broker_runtime.protocol.topic_id import ZERO_TOPIC_ID, format_topic_id, parse_topic_id

__all__ = ["PARTITION_METADATA_FILE", "read_topic_id", "write_topic_id"]

PARTITION_METADATA_FILE = "partition.metadata"
_CURRENT_VERSION = 0
_LINE = re.compile(r"^(?P<key>[a-z_]+):\s+(?P<value>\S.*)$")


def _field(path: Path, line: str | None, key: str) -> str:
    match = _LINE.match(line or "")
    if match is None or match.group("key") != key:
        raise StorageError(
            f"malformed line in partition metadata file {path}: {line!r} (expected '{key}: ...')"
        )
    return match.group("value").strip()


def read_topic_id(part_dir: Path) -> uuid.UUID | None:
    """The topic id recorded in ``part_dir``, or None when it has no ``partition.metadata``."""
    path = part_dir / PARTITION_METADATA_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageError(f"cannot read partition metadata file {path}: {exc}") from None
    lines: list[str | None] = [*text.splitlines(), None, None]
    version_text = _field(path, lines[0], "version")
    try:
        version = int(version_text)
    except ValueError:
        raise StorageError(f"malformed version {version_text!r} in partition metadata file {path}") from None
    if version < _CURRENT_VERSION:
        raise StorageError(f"unrecognized version {version} of partition metadata file {path}")
    try:
        topic_id = parse_topic_id(_field(path, lines[1], "topic_id"))
    except ValueError as exc:
        raise StorageError(f"partition metadata file {path}: {exc}") from None
    if topic_id == ZERO_TOPIC_ID:
        raise StorageError(f"invalid (zero) topic id in partition metadata file {path}")
    return topic_id


def write_topic_id(part_dir: Path, topic_id: uuid.UUID) -> None:
    """Record ``topic_id`` in ``part_dir`` (atomically; see the module docstring)."""
    body = f"version: {_CURRENT_VERSION}\ntopic_id: {format_topic_id(topic_id)}\n"
    write_atomically(part_dir / PARTITION_METADATA_FILE, body.encode("utf-8"))
