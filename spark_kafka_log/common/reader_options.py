"""The reader's options: Spark's Kafka source names and batch-query rules, parsed into one frozen dataclass.

Runs on: driver (planning); executors (task).

Where this runs: :func:`parse_reader_options` is called on the **driver** (in the planner's Python worker,
when ``DataSource.reader()`` builds the reader), so a bad option fails before any task starts, with a
:class:`~broker_runtime.errors.ConfigError` naming the option. The resulting :class:`ReaderOptions` is
pickled with the reader and read again on the **executors**. Parsing is pure (no I/O) except that the data
directory and log directories are made absolute against the driver's working directory.

Spark hands a Python data source its options with lower-cased keys, so every name is matched lower-cased.

Option families (as Spark's Kafka source, batch queries):

* exactly one of ``subscribe`` (comma-separated topics), ``subscribePattern`` (a regex found anywhere in the topic
  name, as Spark's Kafka source uses Java's ``Matcher.find``; anchor it with ``^...$`` for the whole name) or ``assign`` (JSON ``{"t": [0, 1]}``);
* where to start: ``startingTimestamp`` (ms, all partitions) beats ``startingOffsetsByTimestamp`` (JSON
  ``{"t": {"0": ms}}``) beats ``startingOffsets`` (``earliest`` (default) or JSON ``{"t": {"0": 23}}``
  with -2 = earliest); ``latest`` / -1 are rejected for batch queries, as Spark does;
* where to stop: ``endingTimestamp`` beats ``endingOffsetsByTimestamp`` beats ``endingOffsets``
  (``latest`` (default) or JSON with -1 = latest); ``earliest`` / -2 are rejected for batch queries;
* ``startingOffsetsByTimestampStrategy``: ``error`` (default: no offset with a timestamp >= t fails the
  query) or ``latest`` (such partitions start at the latest offset, i.e. read nothing);
* ``failOnDataLoss`` (default true), ``minPartitions``, ``maxRecordsPerPartition``, ``includeHeaders``;
* streams (``parse_reader_options(..., streaming=True)``, ``spark.readStream``): ``startingOffsets`` defaults to
  ``latest`` and takes ``earliest`` / ``latest`` / JSON with -2 and -1; the ending options are rejected ("not valid
  in streaming queries", as Spark); ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` and ``maxTriggerDelay``
  (a Spark duration such as ``15m``, the default) limit each micro-batch (see
  :mod:`spark_kafka_log.stream.stream_reader`); batch reads parse them and log a WARNING that they are ignored, as Spark does;
* ``kafka.bootstrap.servers``; absent = the embedded broker of ``pylog.dataDir`` (``$PYLOG_DATA_DIR``,
  ``./pylog-data``), exactly as the writer resolves it. Other ``kafka.*`` consumer settings understood:
  ``client.id``, ``request.timeout.ms``, ``max.partition.fetch.bytes``, ``fetch.max.bytes``,
  ``check.crcs``, ``default.api.timeout.ms`` (how long one metadata / offset / fetch call keeps retrying
  while a partition's leader moves or its leader's connection fails, default 60000) and ``retry.backoff.ms``
  (100); ``isolation.level`` (Spark's Kafka source name: ``read_uncommitted``, the default, or
  ``read_committed``: ranges end at the last stable offset, records of aborted transactions are dropped;
  see :mod:`spark_kafka_log.read.read_plan` and :mod:`spark_kafka_log.read.read_task`). ``kafka.security.protocol``,
  ``kafka.sasl.*`` and ``kafka.ssl.*`` as Kafka's consumer (:mod:`spark_kafka_log.common.kafka_configs`); the settings
  Spark's Kafka source refuses (``auto.offset.reset``, ``key.deserializer``, ``value.deserializer``,
  ``enable.auto.commit``, ``interceptor.classes``) are refused with Spark's text; other Kafka client settings
  are accepted with one driver WARNING listing them; any other ``kafka.*`` key is an error;
* ``kafkaConsumer.pollTimeoutMs`` (Spark's default: ``spark.network.timeout``, 120000; pylog takes 120000 and
  does not read that conf): the longest a read task waits without progress for records its range promised
  (:mod:`spark_kafka_log.read.read_task`); ``fetchOffset.numRetries`` (3) and ``fetchOffset.retryIntervalMs``
  (1000, Spark's code default): how many times the driver tries one offset lookup (a planning step: Metadata,
  ListOffsets) and the pause after a failed try (:func:`spark_kafka_log.read.read_plan.with_offset_retries`);
* pylog reads with no consumer group (a query's position lives in its checkpoint). Opt-in for lag tools, streams
  only: ``commitOffsetsToGroup=true`` with ``kafka.group.id=G`` commits each micro-batch's end offsets to group
  ``G`` once Spark has committed the batch (:meth:`spark_kafka_log.stream.stream_reader.PylogStreamReader.commit`).
  Otherwise ``kafka.group.id`` is refused (it would change nothing), and ``groupIdPrefix`` always is (Spark makes
  a unique group per query from it; the source has no query id to do the same);
* any other option (a typo such as ``startingOffset``, or ``load(path)``'s ``path``) fails naming it and the
  closest known option (:func:`~spark_kafka_log.common.option_parsing.reject_unknown_options});
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
from dataclasses import dataclass, field

from broker_runtime.errors import ConfigError
from broker_runtime.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, IsolationLevel
from broker_runtime.protocol.topic_partition import TopicPartition
from broker_runtime.security import ClientSecurity
from spark_kafka_log.common.driver_log import driver_log
from spark_kafka_log.common.kafka_configs import (
    SPARK_REFUSED_READER_KEYS,
    check_prefixed_keys,
    security_options,
    warn_ignored,
)
from spark_kafka_log.common.option_parsing import (
    bool_option,
    bootstrap_servers,
    choice_option,
    int_option,
    lower_keys,
    reject_refused_kafka_keys,
    reject_unknown_options,
    resolve_data_dir,
)

__all__ = [
    "READER_OPTIONS",
    "REFUSED_READER_OPTIONS",
    "OffsetBound",
    "ReaderOptions",
    "parse_reader_options",
]


_KAFKA_KEYS = (
    "bootstrap.servers",
    "client.id",
    "request.timeout.ms",
    "max.partition.fetch.bytes",
    "fetch.max.bytes",
    "check.crcs",
    "group.id",
    "default.api.timeout.ms",
    "retry.backoff.ms",
    "isolation.level",
)
_PYLOG_KEYS = ("pylog.datadir", "pylog.transport", "pylog.logdirs", "pylog.metricsdir")
_TRANSPORTS = ("auto", "fetch", "local")

#: The reader's options without the ``kafka.`` / ``pylog.`` prefix, as the user spells them (Spark's Kafka source).
READER_OPTIONS = (
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "failOnDataLoss",
    "minPartitions",
    "maxRecordsPerPartition",
    "includeHeaders",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "commitOffsetsToGroup",
)

_NO_GROUP = (
    "pylog reads with no consumer group: the driver plans offset ranges with ListOffsets and the tasks Fetch "
    "them, and a streaming query's position lives in its checkpoint, so a group id alone would change nothing"
)
_OPT_IN = (
    "to show a stream's progress to lag tools, give readStream kafka.group.id=<group> with "
    "commitOffsetsToGroup=true: each micro-batch's end offsets are then committed to that group"
)

#: Options pylog knows and refuses (lower-cased name -> message).
REFUSED_READER_OPTIONS: dict[str, str] = {
    "groupidprefix": (
        f"option 'groupIdPrefix' is not supported: {_NO_GROUP} (Spark makes a unique group per query from the "
        f"prefix; pylog's source knows no query id to do the same); {_OPT_IN}"
    ),
    "path": (
        "format('pylog') takes no path: load(path) / start(path) set the option 'path', which names nothing "
        "here; name what to read with the option 'subscribe', 'subscribePattern' or 'assign'"
    ),
}


def _commit_group(opts: Mapping[str, str], streaming: bool) -> str | None:
    """``kafka.group.id`` when a stream opts in with ``commitOffsetsToGroup=true``; every other use is refused."""
    commit = bool_option(opts, "commitOffsetsToGroup", False)
    group = opts.get("kafka.group.id")
    if commit and not streaming:
        raise ConfigError(
            "option 'commitOffsetsToGroup' applies to readStream only: a batch read has no progress to commit"
        )
    if group is None:
        if commit:
            raise ConfigError(
                "option 'commitOffsetsToGroup' is true but no group is named: give kafka.group.id"
            )
        return None
    if not commit:
        raise ConfigError(f"option 'kafka.group.id' is not supported alone: {_NO_GROUP}; {_OPT_IN}")
    name = str(group).strip()
    if not name:
        raise ConfigError(
            "option 'kafka.group.id' is empty; name the group to commit the stream's progress to"
        )
    return name


#: Trigger options of streams; a batch read ignores them with a WARNING each, as Spark's Kafka source.
_STREAM_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
_STRATEGIES = ("error", "latest")
_ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


#: ``kafkaConsumer.pollTimeoutMs`` default: Spark's, ``spark.network.timeout`` at its default (120 s).
DEFAULT_POLL_TIMEOUT_MS = 120_000


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
    #: ``kafka.security.protocol`` and the SASL / SSL settings (PLAINTEXT by default).
    security: ClientSecurity = field(default_factory=ClientSecurity)
    request_timeout_ms: int = 30000
    max_partition_fetch_bytes: int = 8 * 1024 * 1024
    fetch_max_bytes: int = 64 * 1024 * 1024
    check_crcs: bool = True
    default_api_timeout_ms: int = 60000
    retry_backoff_ms: int = 100
    isolation_level: str = "read_uncommitted"
    streaming: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    #: ``kafkaConsumer.pollTimeoutMs``: the longest a read task waits without progress (ms).
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    #: ``fetchOffset.numRetries``: attempts of one driver offset lookup.
    fetch_offset_num_retries: int = 3
    #: ``fetchOffset.retryIntervalMs``: the pause after a failed attempt (ms).
    fetch_offset_retry_interval_ms: int = 1000
    #: ``kafka.group.id`` of a stream with ``commitOffsetsToGroup=true``: where its progress is committed.
    commit_group: str | None = None

    @property
    def read_committed(self) -> bool:
        """True with ``kafka.isolation.level=read_committed``."""
        return self.isolation_level == "read_committed"

    @property
    def isolation_level_code(self) -> int:
        """The wire ``IsolationLevel`` of Fetch and ListOffsets (0 read_uncommitted, 1 read_committed)."""
        return int(IsolationLevel.READ_COMMITTED if self.read_committed else IsolationLevel.READ_UNCOMMITTED)

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


#: Per end of the range: the default bound, the bound rejected for batch queries, and an example offsets map.
_BOUNDS = {
    "starting": ("earliest", "latest", '{"topicA": {"0": 23, "1": -2}}'),
    "ending": ("latest", "earliest", '{"topicA": {"0": 50, "1": -1}}'),
}
#: Spark's JSON sentinels are Kafka's ListOffsets ones (-2 earliest, -1 latest).
_SENTINELS = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP}


def _bound(opts: Mapping[str, str], side: str, *, streaming: bool = False) -> OffsetBound:
    """Where to start (``side="starting"``) or stop (``"ending"``): ``<side>Timestamp`` beats
    ``<side>OffsetsByTimestamp`` beats ``<side>Offsets``. The other end's bound (``latest`` / -1 to start,
    ``earliest`` / -2 to end) is rejected, as Spark does for batch queries. A stream starts at ``latest`` by
    default and takes both ``earliest`` and ``latest`` (and -2 / -1 in JSON), as Spark's Kafka source.
    """
    default, rejected, example = _BOUNDS[side]
    if streaming:
        default, rejected = "latest", ""
    ts = opts.get(f"{side}timestamp")
    if ts is not None:
        return OffsetBound("timestamp", timestamp=_timestamp(ts, f"{side}Timestamp"))
    by_ts = opts.get(f"{side}offsetsbytimestamp")
    if by_ts is not None:
        return OffsetBound(
            "timestamps", _parse_partition_map(by_ts, f"{side}OffsetsByTimestamp", "timestamp")
        )
    name = f"{side}Offsets"
    raw = opts.get(name.lower())
    if raw is None or str(raw).strip().lower() == default:
        return OffsetBound(default)
    text = str(raw).strip()
    if streaming and text.lower() == "earliest":
        return OffsetBound("earliest")
    if text.lower() == rejected:
        raise ConfigError(f"option {name!r}: {side} offset can't be {rejected} for batch queries")
    if not text.startswith("{"):
        raise ConfigError(
            f"option {name!r}: {raw!r} is not supported; allowed: "
            + ("earliest, latest" if streaming else default)
            + f" or a JSON object such as {example}"
        )
    offsets = _parse_partition_map(text, name, "offset")
    for t, p, v in offsets:
        if streaming:
            if v < EARLIEST_TIMESTAMP:
                raise ConfigError(
                    f"option {name!r}: offset {v} for {t}-{p} is invalid; use >= 0, -2 (earliest) or -1 (latest)"
                )
            continue
        if v == _SENTINELS[rejected]:
            raise ConfigError(
                f"option {name!r}: {side} offset for {t}-{p} can't be {rejected} ({v}) for batch queries"
            )
        if v < _SENTINELS[default]:
            raise ConfigError(
                f"option {name!r}: offset {v} for {t}-{p} is invalid; use >= 0 or {_SENTINELS[default]}"
            )
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


_DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(raw: str, name: str) -> int:
    """A Spark time string (``100ms``, ``5s``, ``15m``, ``1h``, ``2d``; a bare number is ms) in milliseconds."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", str(raw).lower())
    if m is None or m.group(2) not in ("", *_DURATION_UNITS):
        raise ConfigError(
            f"option {name!r}: {raw!r} is not a duration; use e.g. 100ms, 5s, 15m, 1h (a bare number is ms)"
        )
    return int(m.group(1)) * _DURATION_UNITS.get(m.group(2) or "ms", 1)


#: Options that end a batch query's range; a stream has no end (Spark: "not valid in streaming queries").
_ENDING_OPTIONS = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")


def parse_reader_options(options: Mapping[str, str], *, streaming: bool = False) -> ReaderOptions:
    """Parse and validate the options of one read (driver side). Keys are matched case-insensitively.

    ``streaming``: the options of ``spark.readStream`` (``startingOffsets`` defaults to ``latest``, ending
    options are rejected, the trigger limits ``maxOffsetsPerTrigger`` / ``minOffsetsPerTrigger`` /
    ``maxTriggerDelay`` apply)."""
    opts = lower_keys(options)
    if streaming:
        for name in _ENDING_OPTIONS:
            if name.lower() in opts:
                raise ConfigError(
                    f"option {name!r} is not valid in streaming queries (as in Spark's Kafka source): a stream "
                    "reads on as data arrives; use Trigger.AvailableNow to stop at the offsets that are latest "
                    "when the query starts"
                )

    for name in sorted(REFUSED_READER_OPTIONS):
        if name in opts:
            raise ConfigError(REFUSED_READER_OPTIONS[name])
    reject_refused_kafka_keys(opts, SPARK_REFUSED_READER_KEYS)
    reject_unknown_options(opts, role="stream reader" if streaming else "reader", known=READER_OPTIONS)
    if not streaming:
        for name in _STREAM_ONLY:
            if name.lower() in opts:
                driver_log().warning("pylog reader: %s option ignored in batch queries (as Spark's)", name)

    ignored = check_prefixed_keys(
        opts,
        role="reader",
        own_kafka_keys=_KAFKA_KEYS,
        pylog_keys=_PYLOG_KEYS,
        pylog_allowed="pylog.dataDir, pylog.transport, pylog.logDirs, pylog.metricsDir",
        tolerated_prefix="pylog.test.",
    )
    warn_ignored(ignored, "reader")

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

    servers = bootstrap_servers(opts)
    strategy = choice_option(opts, "startingOffsetsByTimestampStrategy", "error", _STRATEGIES)
    transport = choice_option(opts, "pylog.transport", "auto", _TRANSPORTS)
    log_dirs = tuple(
        os.path.abspath(os.path.expanduser(d.strip()))
        for d in str(opts.get("pylog.logdirs", "")).split(",")
        if d.strip()
    )
    metrics_dir = opts.get("pylog.metricsdir")
    max_per_trigger = int_option(opts, "maxOffsetsPerTrigger", None, 1, 2**62)
    min_per_trigger = int_option(opts, "minOffsetsPerTrigger", None, 1, 2**62)
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise ConfigError(
            f"The value of minOffsetPerTrigger({min_per_trigger}) is higher than the "
            f"maxOffsetsPerTrigger({max_per_trigger}) (options 'minOffsetsPerTrigger', 'maxOffsetsPerTrigger')"
        )

    return ReaderOptions(
        bootstrap_servers=servers,
        data_dir=resolve_data_dir(opts.get("pylog.datadir")),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=_bound(opts, "starting", streaming=streaming),
        ending=OffsetBound("latest") if streaming else _bound(opts, "ending"),
        starting_by_timestamp_strategy=strategy,
        fail_on_data_loss=bool_option(opts, "failOnDataLoss", True),
        min_partitions=int_option(opts, "minPartitions", None, 1),
        max_records_per_partition=int_option(opts, "maxRecordsPerPartition", None, 1, 2**62),
        include_headers=bool_option(opts, "includeHeaders", False),
        transport=transport,
        log_dirs=log_dirs,
        metrics_dir=os.path.abspath(str(metrics_dir)) if metrics_dir else None,
        client_id=str(opts.get("kafka.client.id", "pylog-reader")),
        security=security_options(opts, embedded=servers is None),
        request_timeout_ms=int_option(opts, "kafka.request.timeout.ms", 30000, 1),
        max_partition_fetch_bytes=int_option(opts, "kafka.max.partition.fetch.bytes", 8 * 1024 * 1024, 1024),
        fetch_max_bytes=int_option(opts, "kafka.fetch.max.bytes", 64 * 1024 * 1024, 1024),
        check_crcs=bool_option(opts, "kafka.check.crcs", True),
        default_api_timeout_ms=int_option(opts, "kafka.default.api.timeout.ms", 60000, 1),
        retry_backoff_ms=int_option(opts, "kafka.retry.backoff.ms", 100, 0),
        isolation_level=choice_option(opts, "kafka.isolation.level", "read_uncommitted", _ISOLATION_LEVELS),
        streaming=streaming,
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=(
            _duration_ms(opts["maxtriggerdelay"], "maxTriggerDelay")
            if "maxtriggerdelay" in opts
            else 15 * 60 * 1000
        ),
        poll_timeout_ms=int_option(opts, "kafkaConsumer.pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS, 1, 2**62),
        fetch_offset_num_retries=int_option(opts, "fetchOffset.numRetries", 3, 1),
        fetch_offset_retry_interval_ms=int_option(opts, "fetchOffset.retryIntervalMs", 1000, 0, 2**62),
        commit_group=_commit_group(opts, streaming),
    )
