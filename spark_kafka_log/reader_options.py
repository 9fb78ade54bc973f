"""The reader's options: Spark's Kafka source names and batch-query rules, parsed into one frozen dataclass.

Where this runs: :func:`parse_reader_options` is called on the **driver** (in the planner's Python worker,
when ``DataSource.reader()`` builds the reader), so a bad option fails before any task starts, with a
:class:`~broker_runtime.errors.ConfigError` naming the option. The resulting :class:`ReaderOptions` is
pickled with the reader and read again on the **executors**. Parsing is pure (no I/O) except that the data
directory and log directories are made absolute against the driver's working directory.

Spark hands a Python data source its options with lower-cased keys, so every name is matched lower-cased.

Option families (as Spark's Kafka source, batch queries):

* exactly one of ``subscribe`` (comma-separated topics), ``subscribePattern`` (a regex that must match the
  WHOLE topic name, as Java's ``Pattern.matches``) or ``assign`` (JSON ``{"t": [0, 1]}``);
* where to start: ``startingTimestamp`` (ms, all partitions) beats ``startingOffsetsByTimestamp`` (JSON
  ``{"t": {"0": ms}}``) beats ``startingOffsets`` (``earliest`` (default) or JSON ``{"t": {"0": 23}}``
  with -2 = earliest); ``latest`` / -1 are rejected for batch queries, as Spark does;
* where to stop: ``endingTimestamp`` beats ``endingOffsetsByTimestamp`` beats ``endingOffsets``
  (``latest`` (default) or JSON with -1 = latest); ``earliest`` / -2 are rejected for batch queries;
* ``startingOffsetsByTimestampStrategy``: ``error`` (default: no offset with a timestamp >= t fails the
  query) or ``latest`` (such partitions start at the latest offset, i.e. read nothing);
* ``failOnDataLoss`` (default true), ``minPartitions``, ``maxRecordsPerPartition``, ``includeHeaders``;
* ``kafka.bootstrap.servers``; absent = the embedded broker of ``pylog.dataDir`` (``$PYLOG_DATA_DIR``,
  ``./pylog-data``), exactly as the writer resolves it. Other ``kafka.*`` consumer settings understood:
  ``client.id``, ``request.timeout.ms``, ``max.partition.fetch.bytes``, ``fetch.max.bytes``,
  ``check.crcs``; ``group.id`` is accepted and ignored (batch reads use no consumer group). Any other
  ``kafka.*`` key is an error (pylog speaks plaintext only: ``kafka.security.protocol`` cannot be honoured);
* ``pylog.transport``: ``auto`` (default: scan segment files directly when the partition's directory is on
  the executor's machine, else Fetch over TCP), ``fetch`` or ``local`` (direct scan, an error when the
  files are not there); ``pylog.logDirs``: comma-separated log directories of the broker (needed for the
  direct scan of a non-embedded broker; the embedded broker's is ``<dataDir>/logs``);
  ``pylog.metricsDir``: a directory where each read task writes one JSON file with what it read
  (batches, bytes, rows, transport); used by tests and for diagnosis.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from broker_runtime.errors import ConfigError

__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_DATA_DIR",
    "EARLIEST",
    "LATEST",
    "OffsetBound",
    "ReaderOptions",
    "parse_reader_options",
]

#: Same resolution as the writer's ``pylog.dataDir``.
DATA_DIR_ENV = "PYLOG_DATA_DIR"
DEFAULT_DATA_DIR = "./pylog-data"

#: Kafka's ListOffsets sentinels, also Spark's JSON sentinels.
LATEST = -1
EARLIEST = -2

_INT32_MAX = 2**31 - 1

_KAFKA_KEYS = (
    "bootstrap.servers",
    "client.id",
    "request.timeout.ms",
    "max.partition.fetch.bytes",
    "fetch.max.bytes",
    "check.crcs",
    "group.id",
)
_PYLOG_KEYS = ("pylog.datadir", "pylog.transport", "pylog.logdirs", "pylog.metricsdir")
_TRANSPORTS = ("auto", "fetch", "local")
_STRATEGIES = ("error", "latest")

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetBound:
    """One end of the range to read, before it is resolved against the broker.

    ``kind`` is one of ``earliest``, ``latest``, ``offsets`` (``per_partition`` holds offsets, -2 / -1
    allowed), ``timestamps`` (``per_partition`` holds ms timestamps) or ``timestamp`` (``timestamp`` for
    every partition).
    """

    kind: str
    per_partition: tuple[tuple[str, int, int], ...] = ()
    timestamp: int | None = None

    def as_dict(self) -> dict[TopicPartition, int]:
        return {(t, p): v for t, p, v in self.per_partition}


@dataclass(frozen=True)
class ReaderOptions:
    """Everything the reader needs, parsed and validated on the driver."""

    bootstrap_servers: str | None
    data_dir: str
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] | None = None
    starting: OffsetBound = OffsetBound("earliest")
    ending: OffsetBound = OffsetBound("latest")
    starting_by_timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    transport: str = "auto"
    log_dirs: tuple[str, ...] = ()
    metrics_dir: str | None = None
    client_id: str = "pylog-reader"
    request_timeout_ms: int = 30000
    max_partition_fetch_bytes: int = 8 * 1024 * 1024
    fetch_max_bytes: int = 64 * 1024 * 1024
    check_crcs: bool = True

    @property
    def embedded(self) -> bool:
        """True when no bootstrap servers were given: the embedded broker of ``data_dir`` is read."""
        return self.bootstrap_servers is None

    def effective_log_dirs(self) -> tuple[str, ...]:
        """Where the direct scan looks: ``pylog.logDirs``, else the embedded broker's ``<dataDir>/logs``."""
        if self.log_dirs:
            return self.log_dirs
        if self.embedded:
            return (os.path.join(self.data_dir, "logs"),)
        return ()

    def topic_label(self) -> str:
        """The subscription as the user wrote it, for messages."""
        if self.subscribe is not None:
            return f"subscribe={','.join(self.subscribe)}"
        if self.subscribe_pattern is not None:
            return f"subscribePattern={self.subscribe_pattern}"
        assert self.assign is not None
        return f"assign={sorted(self.assign)}"


def _resolve_data_dir(value: str | None) -> str:
    raw = value or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
    return os.path.abspath(os.path.expanduser(raw))


def _int(opts: Mapping[str, str], key: str, name: str, lo: int, hi: int = _INT32_MAX) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"option {name!r}: {raw!r} is not an integer; allowed: {lo} to {hi}") from None
    if not lo <= value <= hi:
        raise ConfigError(f"option {name!r}: {value} is out of range; allowed: {lo} to {hi}")
    return value


def _bool(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"option {name!r}: {raw!r} is not a boolean; allowed values: true, false")
    return text == "true"


def _json(raw: str, name: str, example: str) -> object:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ConfigError(
            f"option {name!r}: {raw!r} is not valid JSON ({exc}); expected e.g. {example}"
        ) from None


def _parse_assign(raw: str) -> tuple[TopicPartition, ...]:
    example = '{"topicA": [0, 1], "topicB": [2, 4]}'
    value = _json(raw, "assign", example)
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"option 'assign': {raw!r} must be a non-empty JSON object, e.g. {example}")
    out: list[TopicPartition] = []
    for topic, parts in value.items():
        if not isinstance(parts, list) or not all(type(p) is int and p >= 0 for p in parts):
            raise ConfigError(
                f"option 'assign': topic {topic!r} must map to a list of partition numbers >= 0, got "
                f"{parts!r}; expected e.g. {example}"
            )
        out.extend((str(topic), p) for p in parts)
    if len(set(out)) != len(out):
        raise ConfigError(f"option 'assign': {raw!r} names a partition twice")
    return tuple(sorted(out))


def _parse_partition_map(raw: str, name: str, what: str) -> tuple[tuple[str, int, int], ...]:
    example = '{"topicA": {"0": 23, "1": -2}}' if what == "offset" else '{"topicA": {"0": 1700000000000}}'
    value = _json(raw, name, example)
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"option {name!r}: {raw!r} must be a JSON object of topics, e.g. {example}")
    out: list[tuple[str, int, int]] = []
    for topic, parts in value.items():
        if not isinstance(parts, dict):
            raise ConfigError(
                f"option {name!r}: topic {topic!r} must map to an object of partition -> {what}, got "
                f"{parts!r}; expected e.g. {example}"
            )
        for part, number in parts.items():
            try:
                p = int(part)
            except ValueError:
                raise ConfigError(
                    f"option {name!r}: partition {part!r} of topic {topic!r} is not a number"
                ) from None
            if p < 0 or type(number) is not int:
                raise ConfigError(
                    f"option {name!r}: {topic}-{part} must map a partition >= 0 to an integer {what}, got "
                    f"{number!r}"
                )
            out.append((str(topic), p, number))
    return tuple(sorted(out))


def _starting(opts: Mapping[str, str]) -> OffsetBound:
    ts = opts.get("startingtimestamp")
    if ts is not None:
        return OffsetBound("timestamp", timestamp=_timestamp(ts, "startingTimestamp"))
    by_ts = opts.get("startingoffsetsbytimestamp")
    if by_ts is not None:
        return OffsetBound(
            "timestamps", _parse_partition_map(by_ts, "startingOffsetsByTimestamp", "timestamp")
        )
    raw = opts.get("startingoffsets")
    if raw is None or str(raw).strip().lower() == "earliest":
        return OffsetBound("earliest")
    text = str(raw).strip()
    if text.lower() == "latest":
        raise ConfigError("option 'startingOffsets': starting offset can't be latest for batch queries")
    if not text.startswith("{"):
        raise ConfigError(
            f"option 'startingOffsets': {raw!r} is not supported; allowed: earliest or a JSON object such as "
            '{"topicA": {"0": 23, "1": -2}}'
        )
    offsets = _parse_partition_map(text, "startingOffsets", "offset")
    for t, p, v in offsets:
        if v == LATEST:
            raise ConfigError(
                f"option 'startingOffsets': starting offset for {t}-{p} can't be latest (-1) for batch queries"
            )
        if v < EARLIEST:
            raise ConfigError(f"option 'startingOffsets': offset {v} for {t}-{p} is invalid; use >= 0 or -2")
    return OffsetBound("offsets", offsets)


def _ending(opts: Mapping[str, str]) -> OffsetBound:
    ts = opts.get("endingtimestamp")
    if ts is not None:
        return OffsetBound("timestamp", timestamp=_timestamp(ts, "endingTimestamp"))
    by_ts = opts.get("endingoffsetsbytimestamp")
    if by_ts is not None:
        return OffsetBound("timestamps", _parse_partition_map(by_ts, "endingOffsetsByTimestamp", "timestamp"))
    raw = opts.get("endingoffsets")
    if raw is None or str(raw).strip().lower() == "latest":
        return OffsetBound("latest")
    text = str(raw).strip()
    if text.lower() == "earliest":
        raise ConfigError("option 'endingOffsets': ending offset can't be earliest for batch queries")
    if not text.startswith("{"):
        raise ConfigError(
            f"option 'endingOffsets': {raw!r} is not supported; allowed: latest or a JSON object such as "
            '{"topicA": {"0": 50, "1": -1}}'
        )
    offsets = _parse_partition_map(text, "endingOffsets", "offset")
    for t, p, v in offsets:
        if v == EARLIEST:
            raise ConfigError(
                f"option 'endingOffsets': ending offset for {t}-{p} can't be earliest (-2) for batch queries"
            )
        if v < LATEST:
            raise ConfigError(f"option 'endingOffsets': offset {v} for {t}-{p} is invalid; use >= 0 or -1")
    return OffsetBound("offsets", offsets)


def _timestamp(raw: str, name: str) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(
            f"option {name!r}: {raw!r} is not a timestamp in milliseconds since the epoch"
        ) from None
    if value < 0:
        raise ConfigError(f"option {name!r}: {value} is negative; give milliseconds since the epoch")
    return value


def parse_reader_options(options: Mapping[str, str]) -> ReaderOptions:
    """Parse and validate the options of one read (driver side). Keys are matched case-insensitively."""
    opts = {str(k).lower(): v for k, v in options.items() if v is not None}

    unknown_kafka = sorted(
        k for k in opts if k.startswith("kafka.") and k[len("kafka.") :] not in _KAFKA_KEYS
    )
    if unknown_kafka:
        raise ConfigError(
            f"option(s) {', '.join(unknown_kafka)} not supported by the pylog reader; supported kafka.* "
            f"options: {', '.join('kafka.' + k for k in _KAFKA_KEYS)}"
        )
    unknown_pylog = sorted(
        k for k in opts if k.startswith("pylog.") and k not in _PYLOG_KEYS and not k.startswith("pylog.test.")
    )
    if unknown_pylog:
        raise ConfigError(
            f"option(s) {', '.join(unknown_pylog)} not known to the pylog reader; allowed: pylog.dataDir, "
            "pylog.transport, pylog.logDirs, pylog.metricsDir"
        )

    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(chosen) != 1:
        names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}
        raise ConfigError(
            "exactly one of the options 'assign', 'subscribe' or 'subscribePattern' must be given; got "
            + (", ".join(repr(names[k]) for k in chosen) if chosen else "none")
        )
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in str(opts["subscribe"]).split(",") if t.strip())
        if not subscribe:
            raise ConfigError("option 'subscribe': no topic given; use a comma-separated list of topics")
    elif "subscribepattern" in opts:
        pattern = str(opts["subscribepattern"]).strip()
        if not pattern:
            raise ConfigError("option 'subscribePattern': the pattern is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(
                f"option 'subscribePattern': {pattern!r} is not a valid regex ({exc})"
            ) from None
    else:
        assign = _parse_assign(str(opts["assign"]))

    servers = opts.get("kafka.bootstrap.servers")
    if servers is not None:
        servers = str(servers).strip()
        if not servers or any(":" not in s.strip() for s in servers.split(",")):
            raise ConfigError(
                f"option 'kafka.bootstrap.servers': {opts['kafka.bootstrap.servers']!r} is not a "
                "comma-separated list of host:port (omit the option to use the embedded broker)"
            )

    strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if strategy not in _STRATEGIES:
        raise ConfigError(
            f"option 'startingOffsetsByTimestampStrategy': {strategy!r} is not supported; allowed values: "
            f"{', '.join(_STRATEGIES)}"
        )
    transport = str(opts.get("pylog.transport", "auto")).strip().lower()
    if transport not in _TRANSPORTS:
        raise ConfigError(
            f"option 'pylog.transport': {transport!r} is not supported; allowed values: {', '.join(_TRANSPORTS)}"
        )
    log_dirs = tuple(
        os.path.abspath(os.path.expanduser(d.strip()))
        for d in str(opts.get("pylog.logdirs", "")).split(",")
        if d.strip()
    )
    metrics_dir = opts.get("pylog.metricsdir")

    return ReaderOptions(
        bootstrap_servers=servers,
        data_dir=_resolve_data_dir(opts.get("pylog.datadir")),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=_starting(opts),
        ending=_ending(opts),
        starting_by_timestamp_strategy=strategy,
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        min_partitions=_int(opts, "minpartitions", "minPartitions", 1),
        max_records_per_partition=_int(opts, "maxrecordsperpartition", "maxRecordsPerPartition", 1, 2**62),
        include_headers=_bool(opts, "includeheaders", "includeHeaders", False),
        transport=transport,
        log_dirs=log_dirs,
        metrics_dir=os.path.abspath(str(metrics_dir)) if metrics_dir else None,
        client_id=str(opts.get("kafka.client.id", "pylog-reader")),
        request_timeout_ms=_int(opts, "kafka.request.timeout.ms", "kafka.request.timeout.ms", 1) or 30000,
        max_partition_fetch_bytes=_int(
            opts, "kafka.max.partition.fetch.bytes", "kafka.max.partition.fetch.bytes", 1024
        )
        or 8 * 1024 * 1024,
        fetch_max_bytes=_int(opts, "kafka.fetch.max.bytes", "kafka.fetch.max.bytes", 1024)
        or 64 * 1024 * 1024,
        check_crcs=_bool(opts, "kafka.check.crcs", "kafka.check.crcs", True),
    )
