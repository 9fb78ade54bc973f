"""LogConfig: Kafka's defaults, broker-name precedence, topic overrides and errors naming the key."""

from __future__ import annotations

import pytest

from broker_runtime.errors import ConfigError
from broker_runtime.storage.config import LONG_MAX, LogConfig


def test_defaults_are_kafkas():
    c = LogConfig.from_properties({})
    assert c.segment_bytes == 1073741824
    assert c.segment_ms == 604800000
    assert c.segment_index_bytes == 10485760
    assert c.index_interval_bytes == 4096
    assert c.retention_ms == 604800000
    assert c.retention_bytes == -1
    assert c.flush_messages == LONG_MAX == 9223372036854775807
    assert c.flush_ms == LONG_MAX
    assert c.message_timestamp_type == "CreateTime"
    assert c.max_message_bytes == 1048588


def test_broker_names_and_precedence():
    c = LogConfig.from_properties(
        {
            "log.dirs": "/a, /b",
            "log.segment.bytes": "1000",
            "log.roll.hours": "2",
            "log.retention.hours": "1",
            "log.retention.minutes": "3",
            "log.index.size.max.bytes": "4096",
            "log.index.interval.bytes": "10",
            "log.flush.interval.messages": "5",
            "log.flush.interval.ms": "7",
            "log.message.timestamp.type": "LogAppendTime",
            "unrelated.key": "whatever",
        }
    )
    assert c.log_dirs == ("/a", "/b")
    assert (c.segment_bytes, c.segment_ms, c.retention_ms) == (1000, 2 * 3600000, 3 * 60000)
    assert (c.segment_index_bytes, c.index_interval_bytes, c.flush_messages, c.flush_ms) == (4096, 10, 5, 7)
    assert c.log_append_time
    c2 = LogConfig.from_properties({"log.roll.ms": "5", "log.roll.hours": "1", "log.retention.ms": "-1"})
    assert (c2.segment_ms, c2.retention_ms) == (5, -1)


def test_topic_overrides():
    base = LogConfig.from_properties({"log.segment.bytes": "5000"})
    c = base.with_topic_overrides({"segment.ms": "100", "retention.bytes": "77", "cleanup.policy": "compact"})
    assert (c.segment_bytes, c.segment_ms, c.retention_bytes, c.cleanup_policy) == (5000, 100, 77, "compact")
    assert dict(c.topic_overrides) == {
        "segment.ms": "100",
        "retention.bytes": "77",
        "cleanup.policy": "compact",
    }
    assert base.segment_ms == 604800000  # frozen, unchanged


def test_cleanup_policy_is_a_set_of_delete_and_compact():
    base = LogConfig()
    assert (base.cleanup_policy, base.delete, base.compact) == ("delete", True, False)
    compact = base.with_topic_overrides({"cleanup.policy": "compact"})
    assert (compact.delete, compact.compact) == (False, True)
    for raw, kept in (
        ("compact,delete", "compact,delete"),
        ("Delete, compact", "delete,compact"),
        ("compact,delete,compact", "compact,delete"),
    ):
        both = base.with_topic_overrides({"cleanup.policy": raw})
        assert (both.cleanup_policy, both.delete, both.compact) == (kept, True, True)
    assert LogConfig.from_properties({"log.cleanup.policy": "compact"}).cleanup_policy == "compact"
    for bad in ("", "shrink", "compact,shrink"):
        with pytest.raises(ConfigError, match="cleanup.policy"):
            base.with_topic_overrides({"cleanup.policy": bad})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "abc"),
        ("segment.bytes", "3"),
        ("segment.ms", "0"),
        ("message.timestamp.type", "Whenever"),
        ("flush.messages", "0"),
        ("no.such.config", "1"),
    ],
)
def test_bad_topic_values_name_the_key(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        LogConfig().with_topic_overrides({key: value})


def test_bad_broker_value_names_the_key():
    with pytest.raises(ConfigError, match=r"log\.retention\.bytes"):
        LogConfig.from_properties({"log.retention.bytes": "lots"})


def test_compaction_settings_are_kafkas_defaults_ranges_and_broker_names():
    c = LogConfig.from_properties({})
    assert (c.delete_retention_ms, c.min_cleanable_dirty_ratio) == (86400000, 0.5)
    assert (c.min_compaction_lag_ms, c.max_compaction_lag_ms) == (0, LONG_MAX)
    b = LogConfig.from_properties(
        {
            "log.cleaner.delete.retention.ms": "5",
            "log.cleaner.min.cleanable.ratio": "0.25",
            "log.cleaner.min.compaction.lag.ms": "7",
            "log.cleaner.max.compaction.lag.ms": "9",
        }
    )
    assert (b.delete_retention_ms, b.min_cleanable_dirty_ratio, b.min_compaction_lag_ms) == (5, 0.25, 7)
    assert b.max_compaction_lag_ms == 9
    t = c.with_topic_overrides({"min.cleanable.dirty.ratio": "1", "delete.retention.ms": "0"})
    assert (t.min_cleanable_dirty_ratio, t.delete_retention_ms) == (1.0, 0)
    bad = {
        "min.cleanable.dirty.ratio": ["1.5", "-0.1", "half"],
        "delete.retention.ms": ["-1"],
        "min.compaction.lag.ms": ["-1"],
        "max.compaction.lag.ms": ["0"],
    }
    for key, values in bad.items():
        for value in values:
            with pytest.raises(ConfigError, match=key):
                c.with_topic_overrides({key: value})
    with pytest.raises(
        ConfigError, match=r"min.compaction.lag.ms=10: must not be greater than max.compaction"
    ):
        c.with_topic_overrides({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
