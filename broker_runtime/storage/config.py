"""Log configuration by Kafka's own names: broker-level defaults and per-topic overrides.

Two vocabularies map onto one frozen :class:`LogConfig`:

* broker properties (``server.properties`` names, read by :meth:`LogConfig.from_properties`), e.g.
  ``log.segment.bytes``, ``log.roll.hours``, ``log.retention.ms``;
* topic configs (``TopicConfig`` names, applied by :meth:`LogConfig.with_topic_overrides`), e.g.
  ``segment.bytes``, ``segment.ms``, ``retention.ms``.

Defaults are Kafka's (4.x). Precedence among broker names is Kafka's: ``log.roll.ms`` over ``log.roll.hours``;
``log.retention.ms`` over ``log.retention.minutes`` over ``log.retention.hours``; ``log.flush.interval.ms`` over
``log.flush.scheduler.interval.ms``. A negative retention time or size means "no limit" and is kept as ``-1``.

Invariants: every field holds a parsed, range-checked value; a bad value raises
:class:`~broker_runtime.errors.ConfigError` naming the key, the value and what is allowed. Unknown broker
properties are ignored (a broker file holds many non-log keys); unknown topic configs are rejected, as Kafka's
``CreateTopics``/``AlterConfigs`` do. Topic configs pylog accepts but does not act on (remote storage, throttling)
are kept in :attr:`LogConfig.topic_overrides` so they round-trip.

``cleanup.policy`` is kept as a list of distinct policies in the order given (``delete``, ``compact``,
``compact,delete`` or ``delete,compact``); :attr:`LogConfig.delete` and :attr:`LogConfig.compact` are the two
questions asked of it. The other compaction settings (``delete.retention.ms``, ``min.cleanable.dirty.ratio``,
``min.compaction.lag.ms``, ``max.compaction.lag.ms``) are parsed and range-checked as Kafka's, with Kafka's
defaults; the log cleaner (:mod:`.cleaner`) acts on them.

Thread-safety: instances are immutable and may be shared freely.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from broker_runtime.errors import ConfigError

__all__ = [
    "BROKER_LOG_CONFIG_NAMES",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "LONG_MAX",
    "TOPIC_CONFIG_NAMES",
    "TOPIC_CONFIG_SYNONYMS",
    "LogConfig",
]

LONG_MAX = 2**63 - 1
_INT_MAX = 2**31 - 1

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000

#: Every topic-level config name Kafka accepts (``TopicConfig``); others raise ConfigError.
TOPIC_CONFIG_NAMES = frozenset(
    {
        "cleanup.policy",
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "delete.retention.ms",
        "file.delete.delay.ms",
        "flush.messages",
        "flush.ms",
        "follower.replication.throttled.replicas",
        "index.interval.bytes",
        "leader.replication.throttled.replicas",
        "local.retention.bytes",
        "local.retention.ms",
        "max.compaction.lag.ms",
        "max.message.bytes",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "preallocate",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
        "remote.storage.enable",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.index.bytes",
        "segment.jitter.ms",
        "segment.ms",
        "unclean.leader.election.enable",
    }
)

_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_CLEANUP_POLICIES = frozenset({"delete", "compact"})


def _parse_long(key: str, raw: str, minimum: int | None = None, maximum: int = LONG_MAX) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{key}={raw!r}: expected an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{key}={value}: must be at least {minimum}")
    if value > maximum:
        raise ConfigError(f"{key}={value}: must be at most {maximum}")
    return value


def _parse_bool(key: str, raw: str) -> bool:
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"{key}={raw!r}: expected true or false")
    return text == "true"


def _parse_timestamp_type(key: str, raw: str) -> str:
    text = str(raw).strip()
    if text not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ConfigError(f"{key}={raw!r}: expected {CREATE_TIME} or {LOG_APPEND_TIME}")
    return text


def _parse_compression(key: str, raw: str) -> str:
    text = str(raw).strip().lower()
    if text not in _COMPRESSION_TYPES:
        raise ConfigError(f"{key}={raw!r}: expected one of {', '.join(_COMPRESSION_TYPES)}")
    return text


def _parse_level(key: str, raw: str, low: int, high: int, also: tuple[int, ...] = ()) -> int:
    value = _parse_long(key, raw)
    if value not in also and not low <= value <= high:
        allowed = " or ".join([f"{low}..{high}", *map(str, also)])
        raise ConfigError(f"{key}={value}: expected {allowed}")
    return value


def _parse_cleanup_policy(key: str, raw: str) -> str:
    parts = [p.strip().lower() for p in str(raw).split(",") if p.strip()]
    if not parts or any(p not in _CLEANUP_POLICIES for p in parts):
        raise ConfigError(f"{key}={raw!r}: expected a list of delete, compact")
    return ",".join(dict.fromkeys(parts))


def _parse_ratio(key: str, raw: str) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{key}={raw!r}: expected a number between 0 and 1") from None
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{key}={value}: must be between 0 and 1")
    return value


def _retention(value: int) -> int:
    return -1 if value < 0 else value


# topic config name -> (LogConfig field, parser).  Parsers take (key, raw) and return the field value.
_TOPIC_FIELDS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "segment.bytes": ("segment_bytes", lambda k, v: _parse_long(k, v, 14, _INT_MAX)),
    "segment.ms": ("segment_ms", lambda k, v: _parse_long(k, v, 1)),
    "segment.jitter.ms": ("segment_jitter_ms", lambda k, v: _parse_long(k, v, 0)),
    "segment.index.bytes": ("segment_index_bytes", lambda k, v: _parse_long(k, v, 4, _INT_MAX)),
    "index.interval.bytes": ("index_interval_bytes", lambda k, v: _parse_long(k, v, 0, _INT_MAX)),
    "retention.ms": ("retention_ms", lambda k, v: _retention(_parse_long(k, v, -1))),
    "retention.bytes": ("retention_bytes", lambda k, v: _retention(_parse_long(k, v))),
    "flush.messages": ("flush_messages", lambda k, v: _parse_long(k, v, 1)),
    "flush.ms": ("flush_ms", lambda k, v: _parse_long(k, v, 0)),
    "message.timestamp.type": ("message_timestamp_type", _parse_timestamp_type),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", lambda k, v: _parse_long(k, v, 0)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", lambda k, v: _parse_long(k, v, 0)),
    "max.message.bytes": ("max_message_bytes", lambda k, v: _parse_long(k, v, 0, _INT_MAX)),
    "file.delete.delay.ms": ("file_delete_delay_ms", lambda k, v: _parse_long(k, v, 0)),
    "cleanup.policy": ("cleanup_policy", _parse_cleanup_policy),
    "delete.retention.ms": ("delete_retention_ms", lambda k, v: _parse_long(k, v, 0)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _parse_ratio),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", lambda k, v: _parse_long(k, v, 0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", lambda k, v: _parse_long(k, v, 1)),
    "compression.type": ("compression_type", _parse_compression),
    "compression.gzip.level": ("compression_gzip_level", lambda k, v: _parse_level(k, v, 1, 9, (-1,))),
    "compression.lz4.level": ("compression_lz4_level", lambda k, v: _parse_level(k, v, 1, 17)),
    "compression.zstd.level": ("compression_zstd_level", lambda k, v: _parse_level(k, v, -131072, 22)),
    "message.timestamp.difference.max.ms": (
        "message_timestamp_difference_max_ms",
        lambda k, v: _parse_long(k, v, 0),
    ),
    "min.insync.replicas": ("min_insync_replicas", lambda k, v: _parse_long(k, v, 1, _INT_MAX)),
    "preallocate": ("preallocate", _parse_bool),
}

# broker property name -> topic config name, for the names that map one to one.
_BROKER_TO_TOPIC: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.bytes": "retention.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "message.max.bytes": "max.message.bytes",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
    "min.insync.replicas": "min.insync.replicas",
    "log.preallocate": "preallocate",
}

#: topic config name -> the broker properties that set its default, highest precedence first (Kafka's
#: synonyms, as DescribeConfigs lists them).
TOPIC_CONFIG_SYNONYMS: dict[str, tuple[str, ...]] = {
    **{topic: (broker,) for broker, topic in _BROKER_TO_TOPIC.items()},
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}

#: Broker properties that set topic defaults: the ones Kafka's ``DynamicLogConfig`` lets AlterConfigs change
#: at runtime (cluster-wide or per broker).
BROKER_LOG_CONFIG_NAMES = frozenset(name for names in TOPIC_CONFIG_SYNONYMS.values() for name in names)

# broker-only scheduling properties -> field.
_BROKER_ONLY: dict[str, str] = {
    "log.retention.check.interval.ms": "retention_check_interval_ms",
    "log.flush.offset.checkpoint.interval.ms": "flush_offset_checkpoint_interval_ms",
    "log.flush.start.offset.checkpoint.interval.ms": "flush_start_offset_checkpoint_interval_ms",
    "producer.id.expiration.ms": "producer_id_expiration_ms",
    "producer.id.expiration.check.interval.ms": "producer_id_expiration_check_interval_ms",
}


def _apply_difference(
    values: dict[str, Any], given: Mapping[str, str], before_key: str, after_key: str
) -> None:
    """The legacy ``message.timestamp.difference.max.ms`` bounds both sides unless they are given beside it."""
    difference = values.get("message_timestamp_difference_max_ms")
    if difference is None:
        return
    if before_key not in given:
        values["message_timestamp_before_max_ms"] = difference
    if after_key not in given:
        values["message_timestamp_after_max_ms"] = difference


@dataclass(frozen=True)
class LogConfig:
    """The settings one partition log runs with (broker defaults, then the topic's overrides)."""

    #: ``log.dirs`` (or ``log.dir``): the directories holding ``<topic>-<partition>/`` directories.
    log_dirs: tuple[str, ...] = ()
    #: ``segment.bytes``: roll when the active segment would grow beyond this.
    segment_bytes: int = 1024 * 1024 * 1024
    #: ``segment.ms``: roll when the first batch of the active segment is older than this.
    segment_ms: int = 7 * 24 * _HOUR_MS
    #: ``segment.jitter.ms``: the most randomly subtracted from segment.ms per segment (0 = none).
    segment_jitter_ms: int = 0
    #: ``segment.index.bytes``: preallocated size of each .index / .timeindex (rounded down per entry size).
    segment_index_bytes: int = 10 * 1024 * 1024
    #: ``index.interval.bytes``: bytes appended between two sparse index entries.
    index_interval_bytes: int = 4096
    #: ``retention.ms``: delete segments whose largest timestamp is older than this (-1 = forever).
    retention_ms: int = 7 * 24 * _HOUR_MS
    #: ``retention.bytes``: delete the oldest segments while the log is larger than this (-1 = no limit).
    retention_bytes: int = -1
    #: ``flush.messages``: fsync after this many unflushed messages (default: never force).
    flush_messages: int = LONG_MAX
    #: ``flush.ms``: fsync when the last flush is older than this (default: never force).
    flush_ms: int = LONG_MAX
    #: ``message.timestamp.type``: CreateTime keeps the producer's timestamps, LogAppendTime stamps the broker's.
    message_timestamp_type: str = CREATE_TIME
    #: ``message.timestamp.before.max.ms`` (validation, used by the server).
    message_timestamp_before_max_ms: int = LONG_MAX
    #: ``message.timestamp.after.max.ms`` (validation, used by the server; Kafka 4 default one hour).
    message_timestamp_after_max_ms: int = _HOUR_MS
    #: ``max.message.bytes``: the largest record batch the topic accepts (validation, used by the server).
    max_message_bytes: int = 1024 * 1024 + 12
    #: ``file.delete.delay.ms``: kept for compatibility; pylog unlinks right after renaming to ``.deleted``.
    file_delete_delay_ms: int = 60_000
    #: ``cleanup.policy``: ``delete`` (time/size retention), ``compact`` (the log cleaner, no time/size
    #: retention) or ``compact,delete`` (both).
    cleanup_policy: str = "delete"
    #: ``delete.retention.ms``: how long the cleaner keeps tombstones (from their segment's newest record).
    delete_retention_ms: int = 24 * _HOUR_MS
    #: ``min.cleanable.dirty.ratio``: the dirty share of a log before it is cleaned.
    min_cleanable_dirty_ratio: float = 0.5
    #: ``min.compaction.lag.ms``: the least age of a segment's newest record before it is cleaned.
    min_compaction_lag_ms: int = 0
    #: ``max.compaction.lag.ms``: a log with a dirty segment this old is cleaned whatever its dirty ratio; at
    #: least ``min.compaction.lag.ms``.
    max_compaction_lag_ms: int = LONG_MAX
    #: ``message.timestamp.difference.max.ms`` (legacy, before KIP-937): when set, it stands for
    #: ``message.timestamp.before.max.ms`` and ``message.timestamp.after.max.ms`` where those are not set in the
    #: same place (as Kafka 3.6-3.9 do); None when not set.
    message_timestamp_difference_max_ms: int | None = None
    #: ``compression.type``: ``producer`` keeps the producer's codec; any other value (``uncompressed``,
    #: ``gzip``, ``snappy``, ``lz4``, ``zstd``) makes the server recompress batches written with another codec.
    compression_type: str = "producer"
    #: ``compression.gzip.level`` / ``compression.lz4.level`` / ``compression.zstd.level`` (KIP-390): the levels
    #: of broker-side recompression; None = the codec's default (gzip 6, lz4 fast, zstd 3).
    compression_gzip_level: int | None = None
    compression_lz4_level: int | None = None
    compression_zstd_level: int | None = None
    #: ``min.insync.replicas`` (used by replication / acks=-1).
    min_insync_replicas: int = 1
    #: ``preallocate``: accepted; pylog does not preallocate .log files.
    preallocate: bool = False
    #: ``log.retention.check.interval.ms`` (broker only): how often the server runs a retention pass
    #: (:mod:`.retention`).
    retention_check_interval_ms: int = 5 * _MINUTE_MS
    #: ``log.flush.offset.checkpoint.interval.ms`` (broker only): how often to write the checkpoint files.
    flush_offset_checkpoint_interval_ms: int = _MINUTE_MS
    #: ``log.flush.start.offset.checkpoint.interval.ms`` (broker only).
    flush_start_offset_checkpoint_interval_ms: int = _MINUTE_MS
    #: ``producer.id.expiration.ms`` (broker only): a producer whose last batch timestamp is older than this
    #: is forgotten by the partition's producer state (no more duplicate detection for it).
    producer_id_expiration_ms: int = 24 * _HOUR_MS
    #: ``producer.id.expiration.check.interval.ms`` (broker only): how often the server expires producers.
    producer_id_expiration_check_interval_ms: int = 10 * _MINUTE_MS
    #: The topic-level overrides applied to this config, by Kafka topic-config name (sorted pairs).
    topic_overrides: tuple[tuple[str, str], ...] = ()

    @property
    def compression_levels(self) -> tuple[tuple[int, int], ...]:
        """(codec id, level) of the codecs whose level is configured (gzip 1, lz4 3, zstd 4)."""
        levels = (
            (1, self.compression_gzip_level),
            (3, self.compression_lz4_level),
            (4, self.compression_zstd_level),
        )
        return tuple((codec, level) for codec, level in levels if level is not None and level != -1)

    @property
    def log_append_time(self) -> bool:
        """True when the broker stamps batches with LogAppendTime."""
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def delete(self) -> bool:
        """True when ``cleanup.policy`` holds ``delete``: time and size retention apply (Kafka's
        ``LogConfig.delete``)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compact(self) -> bool:
        """True when ``cleanup.policy`` holds ``compact`` (Kafka's ``LogConfig.compact``)."""
        return "compact" in self.cleanup_policy.split(",")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LogConfig:
        """Build the broker-level config from broker property names; unknown keys are ignored."""
        values: dict[str, Any] = {}
        dirs = props.get("log.dirs") or props.get("log.dir")
        if dirs is not None:
            parsed = tuple(d.strip() for d in str(dirs).split(",") if d.strip())
            if not parsed:
                raise ConfigError(f"log.dirs={dirs!r}: expected a comma-separated list of directories")
            values["log_dirs"] = parsed
        for broker_key, topic_key in _BROKER_TO_TOPIC.items():
            if broker_key in props:
                field, parser = _TOPIC_FIELDS[topic_key]
                values[field] = parser(broker_key, props[broker_key])
        # segment.ms: log.roll.ms wins over log.roll.hours.
        if "log.roll.ms" in props:
            values["segment_ms"] = _parse_long("log.roll.ms", props["log.roll.ms"], 1)
        elif "log.roll.hours" in props:
            values["segment_ms"] = _parse_long("log.roll.hours", props["log.roll.hours"], 1) * _HOUR_MS
        if "log.roll.jitter.ms" in props:
            values["segment_jitter_ms"] = _parse_long("log.roll.jitter.ms", props["log.roll.jitter.ms"], 0)
        elif "log.roll.jitter.hours" in props:
            hours = _parse_long("log.roll.jitter.hours", props["log.roll.jitter.hours"], 0)
            values["segment_jitter_ms"] = hours * _HOUR_MS
        # retention.ms: ms over minutes over hours.
        if "log.retention.ms" in props:
            values["retention_ms"] = _retention(_parse_long("log.retention.ms", props["log.retention.ms"]))
        elif "log.retention.minutes" in props:
            minutes = _parse_long("log.retention.minutes", props["log.retention.minutes"])
            values["retention_ms"] = _retention(minutes * _MINUTE_MS)
        elif "log.retention.hours" in props:
            hours = _parse_long("log.retention.hours", props["log.retention.hours"])
            values["retention_ms"] = _retention(hours * _HOUR_MS)
        # flush.ms: log.flush.interval.ms, falling back to the scheduler interval as Kafka does.
        for key in ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"):
            if key in props:
                values["flush_ms"] = _parse_long(key, props[key], 0)
                break
        for key, field in _BROKER_ONLY.items():
            if key in props:
                values[field] = _parse_long(key, props[key], 1)
        _apply_difference(
            values, props, "log.message.timestamp.before.max.ms", "log.message.timestamp.after.max.ms"
        )
        config = cls(**values)
        config._check_consistency()
        return config

    def with_topic_overrides(self, overrides: Mapping[str, str]) -> LogConfig:
        """This config with topic-level overrides (Kafka topic-config names) applied."""
        if not overrides:
            return self
        values: dict[str, Any] = {}
        merged = dict(self.topic_overrides)
        for key, raw in overrides.items():
            if key not in TOPIC_CONFIG_NAMES:
                # The name only, as Kafka ("Unknown topic config name"): an unknown key's value may be a secret.
                raise ConfigError(f"Unknown topic config name: {key}")
            if key in _TOPIC_FIELDS:
                field, parser = _TOPIC_FIELDS[key]
                values[field] = parser(key, raw)
            merged[key] = str(raw)
        _apply_difference(
            values, overrides, "message.timestamp.before.max.ms", "message.timestamp.after.max.ms"
        )
        values["topic_overrides"] = tuple(sorted(merged.items()))
        config = dataclasses.replace(self, **values)
        config._check_consistency()
        return config

    def _check_consistency(self) -> None:
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise ConfigError(
                f"min.compaction.lag.ms={self.min_compaction_lag_ms}: must not be greater than "
                f"max.compaction.lag.ms={self.max_compaction_lag_ms}"
            )
        if self.segment_jitter_ms >= self.segment_ms and self.segment_jitter_ms > 0:
            raise ConfigError(
                f"segment.jitter.ms={self.segment_jitter_ms}: must be smaller than segment.ms={self.segment_ms}"
            )
