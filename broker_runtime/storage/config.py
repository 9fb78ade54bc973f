"""Log configuration by Kafka's own names, each declared once: topic configs and the broker keys that set their
defaults.

Two vocabularies map onto one frozen :class:`LogConfig`:

* topic configs (``TopicConfig`` names, applied by :meth:`LogConfig.with_topic_overrides`), e.g.
  ``segment.bytes``, ``segment.ms``, ``retention.ms``: each a :class:`LogConfig` field declared with
  :func:`~broker_runtime.configdef.declare` (name, type, Kafka's default, validator, doc), listed by
  :data:`TOPIC_CONFIGS`; :data:`ACCEPTED_TOPIC_CONFIGS` are the ones pylog accepts and keeps (remote storage,
  throttles) without a field;
* broker properties (``server.properties`` names, read by :meth:`LogConfig.from_properties`), e.g.
  ``log.segment.bytes``, ``log.roll.hours``, ``log.retention.ms``: :data:`BROKER_LOG_SYNONYMS` declares each with
  the topic config it sets the default of (Kafka's ``ServerTopicConfigSynonyms``); they are the broker keys
  AlterConfigs may change at runtime (``dynamic``). :data:`BROKER_LOG_CONFIGS` lists every broker key this module
  owns (also the broker-only ones: producer id expiration, and names accepted without effect).

Defaults are Kafka's (4.x). Precedence among broker names is the declaration order (Kafka's): ``log.roll.ms``
over ``log.roll.hours``; ``log.retention.ms`` over ``log.retention.minutes`` over ``log.retention.hours``;
``log.flush.interval.ms`` over ``log.flush.scheduler.interval.ms``. A negative retention time or size means "no
limit" and is kept as ``-1``.

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

Thread-safety: instances and declarations are immutable and may be shared freely.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from broker_runtime.configdef import (
    INT_MAX,
    LONG_MAX,
    ConfigKey,
    ConfigType,
    Parse,
    choice,
    declare,
    declared,
    define,
    integer,
    number,
)
from broker_runtime.errors import ConfigError

__all__ = [
    "ACCEPTED_TOPIC_CONFIGS",
    "BROKER_LOG_CONFIGS",
    "BROKER_LOG_CONFIG_NAMES",
    "BROKER_LOG_SYNONYMS",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "LONG_MAX",
    "TOPIC_CONFIGS",
    "TOPIC_CONFIG_NAMES",
    "TOPIC_CONFIG_SYNONYMS",
    "LogConfig",
    "LogSynonym",
]

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000

_INT, _LONG, _STRING, _LIST = ConfigType.INT, ConfigType.LONG, ConfigType.STRING, ConfigType.LIST
_BOOLEAN, _DOUBLE = ConfigType.BOOLEAN, ConfigType.DOUBLE


def _parse_timestamp_type(key: str, raw: str) -> str:
    text = str(raw).strip()
    if text not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ConfigError(f"{key}={raw!r}: expected {CREATE_TIME} or {LOG_APPEND_TIME}")
    return text


def _level(low: int, high: int, *also: int) -> Parse:
    def parse(key: str, raw: str) -> int:
        value = _long()(key, raw)
        if value not in also and not low <= value <= high:
            allowed = " or ".join([f"{low}..{high}", *map(str, also)])
            raise ConfigError(f"{key}={value}: expected {allowed}")
        return value

    return parse


def _parse_cleanup_policy(key: str, raw: str) -> str:
    parts = [p.strip().lower() for p in str(raw).split(",") if p.strip()]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ConfigError(f"{key}={raw!r}: expected a list of delete, compact")
    return ",".join(dict.fromkeys(parts))


def _long(minimum: int | None = None) -> Parse:
    """An integer in ``minimum..LONG_MAX``."""
    return integer(minimum, LONG_MAX)


def _retention(scale: int = 1, minimum: int | None = None) -> Parse:
    """A retention time or size in units of ``scale``; any negative value is kept as -1 (no limit)."""

    def parse(key: str, raw: str) -> int:
        value = _long(minimum)(key, raw) * scale
        return -1 if value < 0 else value

    return parse


def _scaled(scale: int, minimum: int) -> Parse:
    """A duration given in units of ``scale`` milliseconds (hours), as milliseconds."""

    def parse(key: str, raw: str) -> int:
        return _long(minimum)(key, raw) * scale

    return parse


_COMPRESSION = choice("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _topic(name: str, type: ConfigType, default: str | None, doc: str, **kw: Any) -> Any:
    """A :class:`LogConfig` field declared as topic config ``name`` (every topic config may be altered; ``kw``:
    :func:`~broker_runtime.configdef.define`'s); an integer is at most ``LONG_MAX`` unless ``maximum`` or
    ``parse`` says otherwise."""
    if type in (_INT, _LONG) and "parse" not in kw:
        kw.setdefault("maximum", LONG_MAX)
    return declare(define(name, type, default, doc, dynamic=True, **kw))


def _broker_only(name: str, default: str, doc: str, restart_reason: str = "") -> Any:
    """A :class:`LogConfig` field set by broker property ``name`` alone (no topic config; read at start)."""
    return declare(
        define(name, _LONG, default, doc, minimum=1, maximum=LONG_MAX, restart_reason=restart_reason)
    )


@dataclass(frozen=True)
class LogConfig:
    """The settings one partition log runs with (broker defaults, then the topic's overrides)."""

    #: ``log.dirs`` (or ``log.dir``): the directories holding ``<topic>-<partition>/`` directories (declared by
    #: the broker's config, which resolves the two names).
    log_dirs: tuple[str, ...] = ()
    segment_bytes: int = _topic(
        "segment.bytes", _INT, "1073741824", "roll a segment at this size", minimum=14, maximum=INT_MAX
    )
    segment_ms: int = _topic(
        "segment.ms",
        _LONG,
        "604800000",
        "roll a segment this long after its first batch's timestamp",
        minimum=1,
    )
    segment_jitter_ms: int = _topic(
        "segment.jitter.ms",
        _LONG,
        "0",
        "the most randomly subtracted from `segment.ms` per segment",
        minimum=0,
    )
    segment_index_bytes: int = _topic(
        "segment.index.bytes",
        _INT,
        "10485760",
        "preallocated size of each `.index` / `.timeindex`; a full index rolls the segment",
        minimum=4,
        maximum=INT_MAX,
    )
    index_interval_bytes: int = _topic(
        "index.interval.bytes", _INT, "4096", "bytes between sparse index entries", minimum=0, maximum=INT_MAX
    )
    retention_ms: int = _topic(
        "retention.ms",
        _LONG,
        "604800000",
        "delete segments whose newest timestamp is older than this; -1 = keep",
        parse=_retention(minimum=-1),
    )
    retention_bytes: int = _topic(
        "retention.bytes",
        _LONG,
        "-1",
        "delete the oldest segments while the partition is larger than this; -1 = no limit",
        parse=_retention(),
    )
    flush_messages: int = _topic(
        "flush.messages",
        _LONG,
        str(LONG_MAX),
        "fsync after this many unflushed messages (default: left to the page cache, as Kafka)",
        minimum=1,
    )
    flush_ms: int = _topic(
        "flush.ms",
        _LONG,
        str(LONG_MAX),
        "fsync when the last flush is older than this (default: left to the page cache)",
        minimum=0,
    )
    message_timestamp_type: str = _topic(
        "message.timestamp.type",
        _STRING,
        CREATE_TIME,
        "`CreateTime` keeps the producer's timestamps, `LogAppendTime` stamps the broker's on append",
        parse=_parse_timestamp_type,
    )
    message_timestamp_before_max_ms: int = _topic(
        "message.timestamp.before.max.ms",
        _LONG,
        str(LONG_MAX),
        "a CreateTime record older than this fails its batch with INVALID_TIMESTAMP",
        minimum=0,
    )
    message_timestamp_after_max_ms: int = _topic(
        "message.timestamp.after.max.ms",
        _LONG,
        "3600000",
        "a CreateTime record this far in the future fails its batch with INVALID_TIMESTAMP",
        minimum=0,
    )
    max_message_bytes: int = _topic(
        "max.message.bytes",
        _INT,
        "1048588",
        "the largest record batch the topic accepts",
        minimum=0,
        maximum=INT_MAX,
    )
    file_delete_delay_ms: int = _topic(
        "file.delete.delay.ms",
        _LONG,
        "60000",
        "kept for compatibility; pylog unlinks a segment right after renaming it to `.deleted`",
        minimum=0,
    )
    cleanup_policy: str = _topic(
        "cleanup.policy",
        _LIST,
        "delete",
        "`delete`: time and size retention; `compact`: the log cleaner keeps the last record per key, no "
        "time/size retention; `compact,delete`: both",
        parse=_parse_cleanup_policy,
    )
    delete_retention_ms: int = _topic(
        "delete.retention.ms",
        _LONG,
        "86400000",
        "how long the cleaner keeps tombstones, counted from their segment's newest record",
        minimum=0,
    )
    min_cleanable_dirty_ratio: float = _topic(
        "min.cleanable.dirty.ratio",
        _DOUBLE,
        "0.5",
        "clean a log when this share of its cleanable bytes is dirty",
        parse=number(0.0, 1.0),
    )
    min_compaction_lag_ms: int = _topic(
        "min.compaction.lag.ms",
        _LONG,
        "0",
        "a segment is cleaned only when its newest record is this old",
        minimum=0,
    )
    max_compaction_lag_ms: int = _topic(
        "max.compaction.lag.ms",
        _LONG,
        str(LONG_MAX),
        "a log with a dirty segment this old is cleaned whatever its dirty ratio; at least "
        "`min.compaction.lag.ms`",
        minimum=1,
    )
    #: Legacy (before KIP-937): when set, it stands for ``message.timestamp.before.max.ms`` and
    #: ``message.timestamp.after.max.ms`` where those are not set in the same place (as Kafka 3.6-3.9 do).
    message_timestamp_difference_max_ms: int | None = _topic(
        "message.timestamp.difference.max.ms",
        _LONG,
        None,
        "legacy (before KIP-937): when set, the bound on both sides wherever `message.timestamp.before.max.ms` / "
        "`message.timestamp.after.max.ms` are not set beside it",
        minimum=0,
        shown_default="(unset)",
    )
    compression_type: str = _topic(
        "compression.type",
        _STRING,
        "producer",
        "`producer` keeps the producer's codec; `uncompressed`, `gzip`, `snappy`, `lz4`, `zstd` make the broker "
        "recompress every batch written with another codec",
        parse=_COMPRESSION,
    )
    #: KIP-390: the levels of broker-side recompression; None = the codec's default (gzip 6, lz4 fast, zstd 3).
    compression_gzip_level: int | None = _topic(
        "compression.gzip.level",
        _INT,
        None,
        "the level of broker-side gzip recompression (KIP-390): 1..9, or -1",
        parse=_level(1, 9, -1),
        shown_default="codec default (6)",
    )
    compression_lz4_level: int | None = _topic(
        "compression.lz4.level",
        _INT,
        None,
        "the level of broker-side lz4 recompression (KIP-390): 1..17",
        parse=_level(1, 17),
        shown_default="codec default (fast)",
    )
    compression_zstd_level: int | None = _topic(
        "compression.zstd.level",
        _INT,
        None,
        "the level of broker-side zstd recompression (KIP-390): -131072..22",
        parse=_level(-131072, 22),
        shown_default="codec default (3)",
    )
    min_insync_replicas: int = _topic(
        "min.insync.replicas",
        _INT,
        "1",
        "acks=-1 needs this many in-sync replicas",
        minimum=1,
        maximum=INT_MAX,
    )
    preallocate: bool = _topic(
        "preallocate", _BOOLEAN, "false", "accepted; pylog does not preallocate `.log` files"
    )
    producer_id_expiration_ms: int = _broker_only(
        "producer.id.expiration.ms",
        "86400000",
        "a producer id with no write for this long is dropped from a partition's producer state (its "
        "duplicates are no longer recognised)",
        restart_reason="each partition's producer state reads it when its log is opened",
    )
    producer_id_expiration_check_interval_ms: int = _broker_only(
        "producer.id.expiration.check.interval.ms", "600000", "how often expired producer ids are removed"
    )
    flush_start_offset_checkpoint_interval_ms: int = _broker_only(
        "log.flush.start.offset.checkpoint.interval.ms",
        "60000",
        "accepted; the log-start checkpoint is written with the others (`log.flush.offset.checkpoint.interval.ms`)",
    )
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

    def topic_value(self, name: str) -> Any:
        """The value of topic config ``name`` (one of :data:`TOPIC_CONFIGS`) in this config."""
        return getattr(self, _TOPIC_FIELD[name])

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
        for synonym in BROKER_LOG_SYNONYMS:  # the first synonym given of each topic config wins
            field = _TOPIC_FIELD[synonym.topic]
            if synonym.key.name in props and field not in values:
                values[field] = synonym.key.value(props)
        for field, key in _BROKER_ONLY:
            if key.name in props:
                values[field] = key.value(props)
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
            if key in _TOPIC_FIELD:
                values[_TOPIC_FIELD[key]] = _TOPIC_KEY[key].parse(key, raw)
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


_FIELDS = declared(LogConfig)
_TOPIC_FIELD: dict[str, str] = {key.name: field for field, key in _FIELDS if key.dynamic}
_TOPIC_KEY: dict[str, ConfigKey] = {key.name: key for _, key in _FIELDS if key.dynamic}
_BROKER_ONLY = tuple((field, key) for field, key in _FIELDS if not key.dynamic)

#: The topic configs :class:`LogConfig` holds, in field order.
TOPIC_CONFIGS: tuple[ConfigKey, ...] = tuple(_TOPIC_KEY.values())


def _kept(name: str, type: ConfigType, default: str | None, doc: str) -> ConfigKey:
    return define(name, type, default, f"accepted and kept, {doc}", dynamic=True)


#: Topic configs Kafka defines that pylog accepts and keeps (they round-trip) without acting on them, except
#: ``unclean.leader.election.enable``, which the controller reads from the topic's configs.
ACCEPTED_TOPIC_CONFIGS: tuple[ConfigKey, ...] = (
    _kept(
        "follower.replication.throttled.replicas", _LIST, "", "no effect (pylog has no replication quotas)"
    ),
    _kept("leader.replication.throttled.replicas", _LIST, "", "no effect (pylog has no replication quotas)"),
    _kept("local.retention.bytes", _LONG, "-2", "no effect (pylog has no tiered storage)"),
    _kept("local.retention.ms", _LONG, "-2", "no effect (pylog has no tiered storage)"),
    _kept("remote.log.copy.disable", _BOOLEAN, "false", "no effect (pylog has no tiered storage)"),
    _kept("remote.log.delete.on.disable", _BOOLEAN, "false", "no effect (pylog has no tiered storage)"),
    _kept("remote.storage.enable", _BOOLEAN, "false", "no effect (pylog has no tiered storage)"),
    _kept(
        "unclean.leader.election.enable",
        _BOOLEAN,
        "false",
        "read by the controller: the topic's own `unclean.leader.election.enable`",
    ),
)

#: Every topic-level config name Kafka accepts (``TopicConfig``); others raise ConfigError.
TOPIC_CONFIG_NAMES: frozenset[str] = frozenset(_TOPIC_KEY) | {key.name for key in ACCEPTED_TOPIC_CONFIGS}


class LogSynonym(NamedTuple):
    """A broker property that sets the default of topic config ``topic`` (its ``key.parse`` gives the topic
    config's value: hours scaled to milliseconds, a negative retention kept as -1)."""

    key: ConfigKey
    topic: str


def _synonym(
    name: str,
    topic: str,
    default: str | None,
    doc: str,
    *,
    parse: Parse | None = None,
    shown_default: str | None = None,
) -> LogSynonym:
    """Broker property ``name``, the default of ``topic``: the topic config's type and validator unless
    ``parse`` is given; dynamic (Kafka's ``DynamicLogConfig``)."""
    of = _TOPIC_KEY[topic]
    key = ConfigKey(
        name,
        of.type,
        default,
        f"{doc} (topic: `{topic}`)",
        parse or of.parse,
        dynamic=True,
        shown_default=shown_default,
    )
    return LogSynonym(key, topic)


#: The broker properties that set topic defaults, each topic config's first (highest precedence) first: the
#: ones Kafka's ``DynamicLogConfig`` lets AlterConfigs change at runtime (cluster-wide or per broker).
BROKER_LOG_SYNONYMS: tuple[LogSynonym, ...] = (
    _synonym("log.segment.bytes", "segment.bytes", "1073741824", "roll a segment at this size"),
    _synonym(
        "log.roll.ms",
        "segment.ms",
        None,
        "roll a segment this long after its first batch's timestamp; wins over `log.roll.hours`",
        parse=_long(1),
    ),
    _synonym("log.roll.hours", "segment.ms", "168", "`log.roll.ms` in hours", parse=_scaled(_HOUR_MS, 1)),
    _synonym(
        "log.roll.jitter.ms",
        "segment.jitter.ms",
        None,
        "the most randomly subtracted from a segment's roll time; wins over `log.roll.jitter.hours`",
        parse=_long(0),
    ),
    _synonym(
        "log.roll.jitter.hours",
        "segment.jitter.ms",
        "0",
        "`log.roll.jitter.ms` in hours",
        parse=_scaled(_HOUR_MS, 0),
    ),
    _synonym(
        "log.index.size.max.bytes",
        "segment.index.bytes",
        "10485760",
        "preallocated index size; a full index rolls the segment",
    ),
    _synonym(
        "log.index.interval.bytes", "index.interval.bytes", "4096", "bytes between sparse index entries"
    ),
    _synonym(
        "log.retention.bytes",
        "retention.bytes",
        "-1",
        "keep at most this many bytes per partition; -1 = no limit",
    ),
    _synonym(
        "log.retention.ms",
        "retention.ms",
        None,
        "delete segments older than this; -1 = keep; wins over `log.retention.minutes` and `.hours`",
        parse=_retention(),
    ),
    _synonym(
        "log.retention.minutes",
        "retention.ms",
        None,
        "`log.retention.ms` in minutes; wins over `log.retention.hours`",
        parse=_retention(_MINUTE_MS),
    ),
    _synonym(
        "log.retention.hours",
        "retention.ms",
        "168",
        "`log.retention.ms` in hours",
        parse=_retention(_HOUR_MS),
    ),
    _synonym(
        "log.flush.interval.messages",
        "flush.messages",
        str(LONG_MAX),
        "force an fsync after this many messages; the default leaves it to the page cache, as Kafka (fsync on "
        "roll and close always)",
        shown_default="never",
    ),
    _synonym(
        "log.flush.interval.ms",
        "flush.ms",
        None,
        "force an fsync when the last one is older than this; wins over `log.flush.scheduler.interval.ms`",
        shown_default="never",
    ),
    _synonym(
        "log.flush.scheduler.interval.ms",
        "flush.ms",
        str(LONG_MAX),
        "`log.flush.interval.ms` when that is not set (as Kafka)",
        shown_default="never",
    ),
    _synonym(
        "log.message.timestamp.type",
        "message.timestamp.type",
        CREATE_TIME,
        "`LogAppendTime` stamps batches on append",
    ),
    _synonym(
        "log.message.timestamp.before.max.ms",
        "message.timestamp.before.max.ms",
        str(LONG_MAX),
        "a CreateTime record older than this fails its batch with INVALID_TIMESTAMP",
        shown_default="unbounded",
    ),
    _synonym(
        "log.message.timestamp.after.max.ms",
        "message.timestamp.after.max.ms",
        "3600000",
        "a CreateTime record this far in the future fails its batch with INVALID_TIMESTAMP",
    ),
    _synonym(
        "log.message.timestamp.difference.max.ms",
        "message.timestamp.difference.max.ms",
        None,
        "legacy (before KIP-937): when set, the bound on both sides wherever `before.max.ms` / `after.max.ms` "
        "are not set beside it",
        shown_default="(unset)",
    ),
    _synonym("message.max.bytes", "max.message.bytes", "1048588", "the largest record batch"),
    _synonym(
        "log.segment.delete.delay.ms",
        "file.delete.delay.ms",
        "60000",
        "kept for compatibility; pylog unlinks a segment right after renaming it to `.deleted`",
    ),
    _synonym(
        "log.cleanup.policy",
        "cleanup.policy",
        "delete",
        "`delete`: time and size retention; `compact`: the log cleaner keeps the last record per key, no "
        "time/size retention; `compact,delete`: both",
    ),
    _synonym(
        "log.cleaner.delete.retention.ms",
        "delete.retention.ms",
        "86400000",
        "how long tombstones stay, counted from their segment's newest record",
    ),
    _synonym(
        "log.cleaner.min.cleanable.ratio",
        "min.cleanable.dirty.ratio",
        "0.5",
        "clean a log when this share of its cleanable bytes is dirty",
    ),
    _synonym(
        "log.cleaner.min.compaction.lag.ms",
        "min.compaction.lag.ms",
        "0",
        "a segment is cleaned only when its newest record is this old",
    ),
    _synonym(
        "log.cleaner.max.compaction.lag.ms",
        "max.compaction.lag.ms",
        str(LONG_MAX),
        "a log is cleaned whatever its dirty ratio once a dirty segment is this old; at least "
        "`log.cleaner.min.compaction.lag.ms`",
        shown_default="unbounded",
    ),
    _synonym(
        "compression.type",
        "compression.type",
        "producer",
        "`producer` keeps the producer's codec; `uncompressed`, `gzip`, `snappy`, `lz4`, `zstd` make the broker "
        "recompress every batch written with another codec (see [Record validation](#record-validation-on-produce))",
    ),
    _synonym(
        "compression.gzip.level",
        "compression.gzip.level",
        None,
        "the level of broker-side gzip recompression (KIP-390): 1..9, or -1",
        shown_default="codec default (6)",
    ),
    _synonym(
        "compression.lz4.level",
        "compression.lz4.level",
        None,
        "the level of broker-side lz4 recompression (KIP-390): 1..17",
        shown_default="codec default (fast)",
    ),
    _synonym(
        "compression.zstd.level",
        "compression.zstd.level",
        None,
        "the level of broker-side zstd recompression (KIP-390): -131072..22",
        shown_default="codec default (3)",
    ),
    _synonym("min.insync.replicas", "min.insync.replicas", "1", "acks=-1 needs this many in-sync replicas"),
    _synonym("log.preallocate", "preallocate", "false", "accepted; pylog does not preallocate `.log` files"),
)

#: topic config name -> the broker properties that set its default, highest precedence first (Kafka's
#: synonyms, as DescribeConfigs lists them).
TOPIC_CONFIG_SYNONYMS: dict[str, tuple[str, ...]] = {
    topic: tuple(s.key.name for s in BROKER_LOG_SYNONYMS if s.topic == topic)
    for topic in dict.fromkeys(s.topic for s in BROKER_LOG_SYNONYMS)
}

#: Broker properties that set topic defaults: the ones AlterConfigs may change at runtime.
BROKER_LOG_CONFIG_NAMES: frozenset[str] = frozenset(s.key.name for s in BROKER_LOG_SYNONYMS)


def _ignored(name: str, type: ConfigType, default: str, doc: str, dynamic: bool = False) -> ConfigKey:
    return define(name, type, default, f"accepted, no effect: {doc}", effect=False, dynamic=dynamic)


#: Every broker property this module owns, in the README's order: the topic defaults, the broker-only ones,
#: and Kafka names accepted without effect (so that a Kafka ``server.properties`` loads without warnings).
BROKER_LOG_CONFIGS: tuple[ConfigKey, ...] = (
    *(s.key for s in BROKER_LOG_SYNONYMS),
    *(key for _, key in _BROKER_ONLY),
    _ignored(
        "log.message.format.version", _STRING, "3.0-IV1", "ignored by Kafka 3+ too (record format v2 only)"
    ),
    _ignored("log.message.downconversion.enable", _BOOLEAN, "true", "pylog never down-converts records"),
    _ignored("num.recovery.threads.per.data.dir", _INT, "2", "pylog recovers on one thread", dynamic=True),
    _ignored(
        "log.initial.task.delay.ms", _LONG, "30000", "pylog's storage tasks start at their first interval"
    ),
)
