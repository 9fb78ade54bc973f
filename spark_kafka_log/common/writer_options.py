"""The writer's options: Spark's Kafka sink names, parsed once into one frozen dataclass.

Runs on: driver (planning, commit); executors (task).

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
  ...), except ``batch.size`` (1 MiB, see :data:`DEFAULT_BATCH_SIZE`). An unknown ``kafka.*`` key is an error naming the supported keys (the Java client
  would only warn; silently ignoring ``kafka.ack`` would hide a typo), except Kafka's own client settings that
  pylog does not use (``kafka.reconnect.backoff.ms``, ...): accepted with one driver WARNING listing them
  (:mod:`spark_kafka_log.common.kafka_configs`), so a job written for Kafka runs unchanged.
* ``kafka.key.serializer`` / ``kafka.value.serializer`` are refused with Spark's text (keys and values are
  written as the bytes of the ``key`` / ``value`` columns).
* Unprefixed options (:data:`WRITER_OPTIONS`): ``topic``; ``includeHeaders`` (a boolean, as in Spark's sink
  table; as Spark's sink, a ``headers`` column is written whenever the DataFrame has one, whatever its value);
  ``checkpointLocation`` and ``queryName``, which Spark itself passes to a writeStream sink (the exactly-once
  sink keeps its log under the checkpoint; a batch write refuses them, :func:`batch_options`). ``path``
  (``save(path)``) and any other name fail naming the closest known option.
* ``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``, ``kafka.ssl.*``: as Kafka's
  producer (PEM stores only; :class:`broker_runtime.security.ClientSecurity`).
* ``pylog.*``: connector settings (``pylog.dataDir``, ``pylog.producerStateDir``,
  ``pylog.transactionStateDir``, ``pylog.writeProvenance``) and the test-only ``pylog.test.*`` fault injections of
  :mod:`spark_kafka_log.common.fault_injection`.

Transactional batch writes: ``kafka.transactional.id`` names a PREFIX (a Spark write has many producers, one per
task); each task's transactional id is ``<prefix>-<write id>-<Spark partition id>``
(:func:`task_transactional_id`), the same for every attempt of that partition of that write, so a later attempt
fences the earlier one. ``kafka.transaction.timeout.ms`` is the Java producer's setting (default 60000); it must
exceed the write's duration. Transactions need idempotence: set together with ``kafka.enable.idempotence=false``
or with settings idempotence cannot work with (acks 0/1, ...) it is an error, as in Kafka's producer.

The streaming sink (:func:`stream_options`) is transactional by default, exactly-once across query restarts:
``pylog.deliveryGuarantee`` = ``exactly-once`` (default; the tasks' ids are ``<prefix>-<query id>-<Spark
partition id>``, prefix ``kafka.transactional.id`` or ``pylog-stream``) or ``at-least-once`` (idempotent, no
transactions). A batch write refuses the option (:func:`batch_options`).

Delivery guarantee: the default is idempotent with ``acks=all``. As Kafka's Java client (3.2+), idempotence left
at its default yields to settings it cannot work with (``acks`` 0/1, ``retries=0``, more than 5 requests in
flight) and is an error when set to ``true`` explicitly with them. :meth:`WriterOptions.weaker_delivery` names
the options that weaken the guarantee; the driver logs it once per write (:mod:`spark_kafka_log.write.write_plan`).

Every bad value raises :class:`~broker_runtime.errors.ConfigError` naming the option and what is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TypedDict

from broker_runtime.errors import ConfigError
from broker_runtime.protocol.compression import CODEC_NAMES, codec_from_name
from broker_runtime.security import ClientSecurity
from spark_kafka_log.common.fault_injection import (
    FAULT_OPTION_KEYS,
    FAULT_OPTION_NAMES,
    FaultOptions,
    parse_fault_options,
)
from spark_kafka_log.common.kafka_configs import (
    SPARK_REFUSED_WRITER_KEYS,
    check_prefixed_keys,
    security_options,
    warn_ignored,
)
from spark_kafka_log.common.option_parsing import (
    INT32_MAX,
    bool_option,
    bootstrap_servers,
    choice_option,
    int_option,
    lower_keys,
    reject_refused_kafka_keys,
    reject_unknown_options,
    resolve_data_dir,
    text_option,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "KAFKA_PRODUCER_KEYS",
    "PARTITIONERS",
    "WRITER_OPTIONS",
    "ClientSettings",
    "DEFAULT_STREAM_TRANSACTIONAL_ID_PREFIX",
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "DELIVERY_GUARANTEES",
    "WriterOptions",
    "batch_options",
    "parse_writer_options",
    "stream_options",
    "task_transactional_id",
]

#: Partitioner names: both place keyed records on ``toPositive(murmur2(key)) % partitions`` (Java's
#: default partitioner, librdkafka's ``murmur2_random``) and null-key records sticky on a random partition.
PARTITIONERS = ("murmur2", "murmur2_random")

#: ``kafka.batch.size`` default: 1 MiB, not the Java client's 16 KiB. This writer is a bulk loader and Produce
#: v3+ carries one batch per partition per request, so small batches multiply requests and the broker's per-batch
#: work: 16 KiB gave about a quarter of the throughput of 128 KiB, and 1 MiB halves the broker's CPU per MB
#: again against 128 KiB (2.2 -> 1.1 ms/MB on one partition, 3.3 -> 1.5 ms/MB on four; the task's own CPU per
#: row falls by a quarter). A whole batch of 1 MiB still fits Kafka's default ``message.max.bytes``
#: (1048588).
DEFAULT_BATCH_SIZE = 1048576

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
    "transactional.id",
    "transaction.timeout.ms",
)

#: The writer's options without the ``kafka.`` / ``pylog.`` prefix, as the user spells them: Spark's Kafka sink
#: options, and what Spark passes to a writeStream sink itself.
WRITER_OPTIONS = ("topic", "includeHeaders", "checkpointLocation", "queryName")

#: Options pylog refuses (lower-cased name -> message).
_REFUSED_WRITER_OPTIONS = {
    "path": (
        "format('pylog') takes no path: save(path) / start(path) set the option 'path', which names nothing "
        "here; name the topic with the option 'topic' (or a 'topic' column)"
    ),
}

_PYLOG_KEYS = (
    "pylog.datadir",
    "pylog.producerstatedir",
    "pylog.transactionstatedir",
    "pylog.deliveryguarantee",
    "pylog.writeprovenance",
    *FAULT_OPTION_KEYS,
)

#: ``pylog.deliveryGuarantee`` (writeStream only): the streaming sink's guarantee across query restarts.
DELIVERY_GUARANTEES = ("exactly-once", "at-least-once")
#: The streaming sink's transactional-id prefix when ``kafka.transactional.id`` is not given.
DEFAULT_STREAM_TRANSACTIONAL_ID_PREFIX = "pylog-stream"

#: ``kafka.transaction.timeout.ms`` default: the Java producer's (60 s).
DEFAULT_TRANSACTION_TIMEOUT_MS = 60000


class ClientSettings(TypedDict):
    """The keywords of :func:`~spark_kafka_log.common.connections.writer_client` (and of the commit client)."""

    client_id: str
    request_timeout_ms: int
    retry_backoff_ms: int
    retry_timeout_ms: int | None
    security: ClientSecurity | None


@dataclass(frozen=True)
class WriterOptions:
    """Everything a write task needs, parsed and validated on the driver.

    ``idempotence_off_by`` names the options (``"kafka.retries=0"``) that switched the default idempotence
    off; ``faults`` holds the test-only ``pylog.test.*`` options (None in production).
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
    retries: int = INT32_MAX
    retry_backoff_ms: int = 100
    enable_idempotence: bool = True
    max_in_flight: int = 5
    buffer_memory: int = 33554432
    partitioner: str = "murmur2"
    client_id: str = "pylog-writer"
    #: ``kafka.security.protocol`` and the SASL / SSL settings (PLAINTEXT by default).
    security: ClientSecurity = field(default_factory=ClientSecurity)
    data_dir: str = ""
    producer_state_dir: str = ""
    idempotence_off_by: tuple[str, ...] = ()
    faults: FaultOptions | None = None
    #: ``kafka.transactional.id``: the prefix of the tasks' transactional ids (None: not transactional).
    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    #: Where the driver of a transactional batch write keeps its commit-intent files.
    transaction_state_dir: str = ""
    #: ``pylog.deliveryGuarantee`` as given (None: absent); only writeStream takes it (:func:`stream_options`).
    delivery_guarantee: str | None = None
    #: The writeStream-only options given (``checkpointLocation``, ``queryName``); a batch write refuses them.
    stream_only_given: tuple[str, ...] = ()
    #: ``pylog.writeProvenance``: the driver records each committed write in ``__pylog_spark_writes``
    #: (:mod:`spark_kafka_log.common.write_provenance`).
    write_provenance: bool = True

    @property
    def transactional(self) -> bool:
        """True when ``kafka.transactional.id`` is given: each task writes inside a transaction."""
        return self.transactional_id_prefix is not None

    @property
    def embedded(self) -> bool:
        """True when no bootstrap servers were given: the embedded broker of ``data_dir`` is used."""
        return self.bootstrap_servers is None

    def client_settings(self) -> ClientSettings:
        """The client of a write task and of the streaming sink's commit: the writer's ``kafka.client.id``,
        timeouts and security; leader moves are retried within ``kafka.delivery.timeout.ms``."""
        return ClientSettings(
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=self.retry_backoff_ms,
            retry_timeout_ms=self.delivery_timeout_ms,
            security=self.security,
        )

    def weaker_delivery(self) -> str | None:
        """One line naming the options that make delivery weaker than the default, or None with the default."""
        if self.enable_idempotence and self.acks == -1:
            return None
        causes = list(self.idempotence_off_by)
        if not self.enable_idempotence and not causes:
            causes.append("kafka.enable.idempotence=false")
        acks = f"kafka.acks={self.acks}"
        if self.acks != -1 and acks not in causes:
            causes.append(acks)
        effects = []
        if not self.enable_idempotence:
            effects.append(
                "idempotence is off, so a resent request or a retried task may write records twice (at-least-once)"
            )
        if self.acks == 1:
            effects.append(
                "a record acknowledged by the leader alone is lost if it fails before a follower copies it"
            )
        if self.acks == 0:
            effects.append(
                "the writer does not wait for the broker, so records can be lost without any error"
            )
        return (
            f"pylog writer: delivery is weaker than the default (idempotent, acks=all) because of "
            f"{', '.join(causes)}: {'; '.join(effects)}"
        )


#: ``kafka.acks`` values and what they mean on the wire.
_ACKS = {"0": 0, "1": 1, "-1": -1, "all": -1}


def parse_writer_options(options: Mapping[str, str]) -> WriterOptions:
    """Parse and validate the options of one write (driver side). Keys are matched case-insensitively."""
    opts = lower_keys(options)
    reject_unknown_options(opts, role="writer", known=WRITER_OPTIONS, refused=_REFUSED_WRITER_OPTIONS)
    reject_refused_kafka_keys(opts, SPARK_REFUSED_WRITER_KEYS)
    bool_option(opts, "includeHeaders", False)  # only checked: a headers column is written whenever present

    ignored = check_prefixed_keys(
        opts,
        role="writer",
        own_kafka_keys=KAFKA_PRODUCER_KEYS,
        pylog_keys=_PYLOG_KEYS,
        pylog_allowed="pylog.dataDir, pylog.producerStateDir, pylog.transactionStateDir, pylog.deliveryGuarantee, "
        "pylog.writeProvenance "
        "(and the test-only "
        f"{', '.join(FAULT_OPTION_NAMES)})",
    )
    servers = bootstrap_servers(opts)
    topic = text_option(opts, "topic", "a topic name")

    acks = _ACKS[choice_option(opts, "kafka.acks", "all", _ACKS)]
    compression_name = choice_option(opts, "kafka.compression.type", "none", CODEC_NAMES)
    batch_size = int_option(opts, "kafka.batch.size", DEFAULT_BATCH_SIZE, 1)
    linger_ms = int_option(opts, "kafka.linger.ms", 5, 0)
    max_request_size = int_option(opts, "kafka.max.request.size", 1048576, 1024)
    request_timeout_ms = int_option(opts, "kafka.request.timeout.ms", 30000, 1)
    delivery_timeout_ms = int_option(opts, "kafka.delivery.timeout.ms", 120000, 1)
    retries = int_option(opts, "kafka.retries", INT32_MAX, 0)
    retry_backoff_ms = int_option(opts, "kafka.retry.backoff.ms", 100, 0)
    max_in_flight = int_option(opts, "kafka.max.in.flight.requests.per.connection", 5, 1)
    buffer_memory = int_option(opts, "kafka.buffer.memory", 33554432, 1024, 2**62)

    idem_explicit = "kafka.enable.idempotence" in opts
    idempotence = bool_option(opts, "kafka.enable.idempotence", True)
    idempotence_off_by: tuple[str, ...] = ()
    if idempotence:
        #: option=value -> what idempotence requires of it
        conflicts: dict[str, str] = {}
        if acks != -1:
            conflicts[f"kafka.acks={acks}"] = f"kafka.acks must be all/-1 (got {opts.get('kafka.acks')})"
        if max_in_flight > 5:
            conflicts[f"kafka.max.in.flight.requests.per.connection={max_in_flight}"] = (
                f"kafka.max.in.flight.requests.per.connection must be <= 5 (got {max_in_flight})"
            )
        if retries == 0:
            conflicts["kafka.retries=0"] = "kafka.retries must be > 0"
        if conflicts:
            if idem_explicit:
                raise ConfigError(
                    "option 'kafka.enable.idempotence' is true, which requires: "
                    + "; ".join(conflicts.values())
                )
            # As Kafka's Java client (3.2+): the default idempotence yields to explicit conflicting settings.
            idempotence = False
            idempotence_off_by = tuple(conflicts)

    prefix = text_option(opts, "kafka.transactional.id", "a prefix")
    if prefix is not None and not idempotence:
        raise ConfigError(
            "option 'kafka.transactional.id' needs idempotence, which is off because of "
            + (", ".join(idempotence_off_by) or "kafka.enable.idempotence=false")
            + " (as Kafka's producer: a transactional producer is idempotent, with kafka.acks=all)"
        )
    transaction_timeout_ms = int_option(
        opts, "kafka.transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS, 1
    )
    partitioner = choice_option(opts, "kafka.partitioner", "murmur2", PARTITIONERS)
    warn_ignored(ignored, "writer")
    security = security_options(opts, embedded=servers is None)
    state_dir = opts.get("pylog.producerstatedir")
    txn_dir = opts.get("pylog.transactionstatedir")
    data_dir = resolve_data_dir(opts.get("pylog.datadir"))
    return WriterOptions(
        bootstrap_servers=servers,
        topic=topic,
        acks=acks,
        compression=codec_from_name(compression_name),
        compression_name=compression_name,
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
        security=security,
        data_dir=data_dir,
        producer_state_dir=os.path.abspath(str(state_dir))
        if state_dir
        else os.path.join(data_dir, "producer-state"),
        idempotence_off_by=idempotence_off_by,
        faults=parse_fault_options(opts),
        delivery_guarantee=choice_option(opts, "pylog.deliveryGuarantee", "", DELIVERY_GUARANTEES)
        if "pylog.deliveryguarantee" in opts
        else None,
        stream_only_given=tuple(n for n in ("checkpointLocation", "queryName") if n.lower() in opts),
        write_provenance=bool_option(opts, "pylog.writeProvenance", True),
        transactional_id_prefix=prefix,
        transaction_timeout_ms=transaction_timeout_ms,
        transaction_state_dir=os.path.abspath(str(txn_dir))
        if txn_dir
        else os.path.join(data_dir, "transactions"),
    )


def stream_options(options: WriterOptions) -> WriterOptions:
    """writeStream: the options its tasks use. Exactly-once (the default) makes every task transactional, with
    ``kafka.transactional.id`` or :data:`DEFAULT_STREAM_TRANSACTIONAL_ID_PREFIX` as the prefix; at-least-once
    (``pylog.deliveryGuarantee=at-least-once``) keeps the idempotent producer without transactions."""
    if options.delivery_guarantee == "at-least-once":
        if options.transactional:
            raise ConfigError(
                "options 'kafka.transactional.id' and 'pylog.deliveryGuarantee=at-least-once' contradict each "
                "other: drop one (the streaming sink is transactional, exactly-once, by default)"
            )
        return options
    if not options.enable_idempotence:
        raise ConfigError(
            "writeStream.format('pylog') is exactly-once by default, which needs the idempotent producer; it is "
            "off because of "
            + (", ".join(options.idempotence_off_by) or "kafka.enable.idempotence=false")
            + ". Drop that option, or set pylog.deliveryGuarantee=at-least-once"
        )
    if options.transactional:
        return options
    return replace(options, transactional_id_prefix=DEFAULT_STREAM_TRANSACTIONAL_ID_PREFIX)


def batch_options(options: WriterOptions) -> WriterOptions:
    """df.write: refuses the streaming-only ``pylog.deliveryGuarantee``, ``checkpointLocation`` and ``queryName``."""
    if options.stream_only_given:
        raise ConfigError(
            f"option(s) {', '.join(repr(n) for n in options.stream_only_given)} apply to writeStream only; a batch "
            "write (df.write) has no checkpoint and no query name: drop them"
        )
    if options.delivery_guarantee is not None:
        raise ConfigError(
            "option 'pylog.deliveryGuarantee' applies to writeStream only; a batch write is idempotent by "
            "default and transactional with kafka.transactional.id=<prefix>"
        )
    return options


def task_transactional_id(prefix: str, write_id: str, partition_id: int) -> str:
    """The transactional id of one Spark partition of one write: stable across all its attempts."""
    return f"{prefix}-{write_id}-{partition_id}"
