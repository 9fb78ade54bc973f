"""The writer's options: Spark's Kafka sink names, parsed once into one frozen dataclass.

Where this runs: :func:`parse_writer_options` is called on the **driver** in ``DataSource.writer()`` /
``streamWriter()`` (so a bad option fails before any task starts); the resulting :class:`WriterOptions`
is pickled with the writer and read on the **executors**. Parsing is pure (no I/O), except that the data
directory is resolved to an absolute path against the driver's working directory.

Spark hands a Python data source its options in a case-insensitive dict whose keys are lower-cased
(``pyspark.sql.datasource.CaseInsensitiveDict``), so every name is matched lower-cased here as well:
``.option("kafka.Compression.Type", "lz4")`` and ``.option("kafka.compression.type", "lz4")`` are the same.

Option families:

* ``kafka.bootstrap.servers`` and ``topic``: as Spark's Kafka sink. Without bootstrap servers the
  connector uses (and if needed starts) the embedded broker of ``pylog.dataDir``.
* ``kafka.<producer setting>``: the Java producer's names and defaults (``acks``, ``compression.type``,
  ...), except ``batch.size`` (128 KiB, see :data:`DEFAULT_BATCH_SIZE`). An unknown ``kafka.*`` key is an error naming the supported keys (the Java client
  would only warn; silently ignoring ``kafka.ack`` would hide a typo).
* ``pylog.*``: connector settings (``pylog.dataDir``, ``pylog.producerStateDir``) and the test-only
  ``pylog.test.*`` fault injections documented on :class:`WriterOptions`.

Every bad value raises :class:`~broker_runtime.errors.ConfigError` naming the option and what is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from broker_runtime.errors import ConfigError
from broker_runtime.protocol.compression import CODEC_NAMES, codec_from_name

__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_DATA_DIR",
    "KAFKA_PRODUCER_KEYS",
    "PARTITIONERS",
    "WriterOptions",
    "parse_writer_options",
    "resolve_data_dir",
]

#: Environment variable naming the embedded broker's data directory when ``pylog.dataDir`` is not set.
DATA_DIR_ENV = "PYLOG_DATA_DIR"
#: Default data directory (relative to the driver's working directory, resolved there).
DEFAULT_DATA_DIR = "./pylog-data"

#: Partitioner names: both place keyed records on ``toPositive(murmur2(key)) % partitions`` (Java's
#: default partitioner, librdkafka's ``murmur2_random``) and null-key records sticky on a random partition.
PARTITIONERS = ("murmur2", "murmur2_random")

_INT32_MAX = 2**31 - 1

#: ``kafka.batch.size`` default: 128 KiB, not the Java client's 16 KiB. This writer is a bulk loader and
#: Produce v3+ carries one batch per partition per request, so 16 KiB batches mean 8x the requests; measured
#: on one partition, 16 KiB gives about a quarter of the throughput of 64-128 KiB (larger is slower again).
DEFAULT_BATCH_SIZE = 131072

#: ``kafka.*`` producer settings understood by the writer (lower-cased, without the ``kafka.`` prefix).
KAFKA_PRODUCER_KEYS = (
    "bootstrap.servers",
    "acks",
    "compression.type",
    "batch.size",
    "linger.ms",
    "max.request.size",
    "request.timeout.ms",
    "delivery.timeout.ms",
    "retries",
    "retry.backoff.ms",
    "enable.idempotence",
    "max.in.flight.requests.per.connection",
    "buffer.memory",
    "partitioner",
    "client.id",
)

_PYLOG_KEYS = (
    "pylog.datadir",
    "pylog.producerstatedir",
    "pylog.test.failafterrequests",
    "pylog.test.dropresponseafterrequests",
)


@dataclass(frozen=True)
class WriterOptions:
    """Everything a write task needs, parsed and validated on the driver.

    Test-only fault injection (documented here and in README_writer.md, never needed in production):

    * ``pylog.test.failAfterRequests=N``: the FIRST attempt of every task raises after N of its produce
      requests were acknowledged, so Spark retries the task (needs ``spark.task.maxFailures`` > 1, e.g.
      master ``local[2,2]``).
    * ``pylog.test.dropResponseAfterRequests=N``: after N acknowledged requests, the producer closes its
      connection once without reading the responses of the requests in flight, as a network failure would,
      and resends them (the idempotent producer must not duplicate them).
    """

    bootstrap_servers: str | None
    topic: str | None
    acks: int = -1
    compression: int = 0
    compression_name: str = "none"
    batch_size: int = DEFAULT_BATCH_SIZE
    linger_ms: int = 5
    max_request_size: int = 1048576
    request_timeout_ms: int = 30000
    delivery_timeout_ms: int = 120000
    retries: int = _INT32_MAX
    retry_backoff_ms: int = 100
    enable_idempotence: bool = True
    max_in_flight: int = 5
    buffer_memory: int = 33554432
    partitioner: str = "murmur2"
    client_id: str = "pylog-writer"
    data_dir: str = ""
    producer_state_dir: str = ""
    fail_after_requests: int | None = None
    drop_response_after_requests: int | None = None

    @property
    def embedded(self) -> bool:
        """True when no bootstrap servers were given: the embedded broker of ``data_dir`` is used."""
        return self.bootstrap_servers is None

    def describe(self) -> str:
        """A short one-line summary for logs."""
        target = self.bootstrap_servers or f"embedded broker of {self.data_dir}"
        return (
            f"{target} acks={self.acks} compression={self.compression_name} batch.size={self.batch_size} "
            f"idempotence={self.enable_idempotence} max.in.flight={self.max_in_flight}"
        )


def resolve_data_dir(value: str | None) -> str:
    """The absolute data directory: ``value``, else ``$PYLOG_DATA_DIR``, else ``./pylog-data`` (driver cwd)."""
    raw = value or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
    return os.path.abspath(os.path.expanduser(raw))


def _int(opts: Mapping[str, str], key: str, default: int, lo: int, hi: int = _INT32_MAX) -> int:
    raw = opts.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"option {key!r}: {raw!r} is not an integer; allowed: {lo} to {hi}") from None
    if not lo <= value <= hi:
        raise ConfigError(f"option {key!r}: {value} is out of range; allowed: {lo} to {hi}")
    return value


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"option {key!r}: {raw!r} is not a boolean; allowed values: true, false")
    return text == "true"


def _acks(raw: str | None) -> int:
    if raw is None:
        return -1
    text = str(raw).strip().lower()
    mapping = {"all": -1, "-1": -1, "0": 0, "1": 1}
    if text not in mapping:
        raise ConfigError(f"option 'kafka.acks': {raw!r} is not supported; allowed values: 0, 1, -1, all")
    return mapping[text]


def parse_writer_options(options: Mapping[str, str]) -> WriterOptions:
    """Parse and validate the options of one write (driver side). Keys are matched case-insensitively."""
    opts = {str(k).lower(): v for k, v in options.items()}

    unknown_kafka = sorted(
        k for k in opts if k.startswith("kafka.") and k[len("kafka.") :] not in KAFKA_PRODUCER_KEYS
    )
    if unknown_kafka:
        raise ConfigError(
            f"option(s) {', '.join(unknown_kafka)} not supported by the pylog writer; supported kafka.* "
            f"options: {', '.join('kafka.' + k for k in KAFKA_PRODUCER_KEYS)}"
        )
    unknown_pylog = sorted(k for k in opts if k.startswith("pylog.") and k not in _PYLOG_KEYS)
    if unknown_pylog:
        raise ConfigError(
            f"option(s) {', '.join(unknown_pylog)} not known; allowed pylog.* options: pylog.dataDir, "
            "pylog.producerStateDir (and the test-only pylog.test.failAfterRequests, "
            "pylog.test.dropResponseAfterRequests)"
        )

    servers = opts.get("kafka.bootstrap.servers")
    if servers is not None:
        servers = str(servers).strip()
        if not servers or any(":" not in s.strip() for s in servers.split(",")):
            raise ConfigError(
                f"option 'kafka.bootstrap.servers': {opts['kafka.bootstrap.servers']!r} is not a "
                "comma-separated list of host:port (omit the option to use the embedded broker)"
            )

    topic = opts.get("topic")
    if topic is not None:
        topic = str(topic).strip()
        if not topic:
            raise ConfigError("option 'topic' is empty; give a topic name or drop the option")

    acks = _acks(opts.get("kafka.acks"))
    codec_raw = opts.get("kafka.compression.type", "none")
    try:
        codec = codec_from_name(str(codec_raw))
    except ConfigError:
        raise ConfigError(
            f"option 'kafka.compression.type': {codec_raw!r} is not supported; allowed values: "
            f"{', '.join(CODEC_NAMES)}"
        ) from None

    batch_size = _int(opts, "kafka.batch.size", DEFAULT_BATCH_SIZE, 1)
    linger_ms = _int(opts, "kafka.linger.ms", 5, 0)
    max_request_size = _int(opts, "kafka.max.request.size", 1048576, 1024)
    request_timeout_ms = _int(opts, "kafka.request.timeout.ms", 30000, 1)
    delivery_timeout_ms = _int(opts, "kafka.delivery.timeout.ms", 120000, 1)
    retries = _int(opts, "kafka.retries", _INT32_MAX, 0)
    retry_backoff_ms = _int(opts, "kafka.retry.backoff.ms", 100, 0)
    max_in_flight = _int(opts, "kafka.max.in.flight.requests.per.connection", 5, 1)
    buffer_memory = _int(opts, "kafka.buffer.memory", 33554432, 1024, 2**62)

    idem_explicit = "kafka.enable.idempotence" in opts
    idempotence = _bool(opts, "kafka.enable.idempotence", True)
    if idempotence:
        conflicts = []
        if acks != -1:
            conflicts.append(f"kafka.acks must be all/-1 (got {opts.get('kafka.acks')})")
        if max_in_flight > 5:
            conflicts.append(
                f"kafka.max.in.flight.requests.per.connection must be <= 5 (got {max_in_flight})"
            )
        if retries == 0:
            conflicts.append("kafka.retries must be > 0")
        if conflicts:
            if idem_explicit:
                raise ConfigError(
                    "option 'kafka.enable.idempotence' is true, which requires: " + "; ".join(conflicts)
                )
            # As Kafka's Java client (3.2+): the default idempotence yields to explicit conflicting settings.
            idempotence = False

    partitioner = str(opts.get("kafka.partitioner", "murmur2")).strip().lower()
    if partitioner not in PARTITIONERS:
        raise ConfigError(
            f"option 'kafka.partitioner': {opts['kafka.partitioner']!r} is not supported; allowed values: "
            f"{', '.join(PARTITIONERS)}"
        )

    fail_after = opts.get("pylog.test.failafterrequests")
    drop_after = opts.get("pylog.test.dropresponseafterrequests")
    state_dir = opts.get("pylog.producerstatedir")
    data_dir = resolve_data_dir(opts.get("pylog.datadir"))
    return WriterOptions(
        bootstrap_servers=servers,
        topic=topic,
        acks=acks,
        compression=codec,
        compression_name=str(codec_raw).strip().lower(),
        batch_size=batch_size,
        linger_ms=linger_ms,
        max_request_size=max_request_size,
        request_timeout_ms=request_timeout_ms,
        delivery_timeout_ms=delivery_timeout_ms,
        retries=retries,
        retry_backoff_ms=retry_backoff_ms,
        enable_idempotence=idempotence,
        max_in_flight=max_in_flight,
        buffer_memory=buffer_memory,
        partitioner=partitioner,
        client_id=str(opts.get("kafka.client.id", "pylog-writer")),
        data_dir=data_dir,
        producer_state_dir=os.path.abspath(str(state_dir))
        if state_dir
        else os.path.join(data_dir, "producer-state"),
        fail_after_requests=None if fail_after is None else _int(opts, "pylog.test.failafterrequests", 0, 0),
        drop_response_after_requests=None
        if drop_after is None
        else _int(opts, "pylog.test.dropresponseafterrequests", 0, 0),
    )
