"""Kafka's own client settings, as ``kafka.*`` options: the security ones pylog honours, and the rest it accepts
and ignores with one warning (as Kafka's clients log configs they were given but do not use).

Runs on: driver (planning).

Where this runs: the **driver**, while the reader's and the writer's options are parsed.

* :func:`security_options`: ``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``
  and ``kafka.ssl.*`` into a :class:`~broker_runtime.security.ClientSecurity` (shipped to executors with the
  options; every file and setting checked here first, so a mistake fails the query on the driver);
* :data:`KAFKA_CLIENT_CONFIGS`: the names of Kafka's producer, consumer and common client configs (from its
  ``ProducerConfig``, ``ConsumerConfig``, ``CommonClientConfigs``, ``SaslConfigs`` and ``SslConfigs``). A
  ``kafka.<name>`` option with such a name that pylog does not interpret is accepted and listed in one driver
  WARNING, so a Spark job written for Kafka runs unchanged; a ``kafka.*`` key that is no Kafka client config
  at all (a typo) still fails;
* :data:`SPARK_REFUSED_READER_KEYS` / :data:`SPARK_REFUSED_WRITER_KEYS`: the Kafka settings Spark's Kafka source
  and sink refuse because the connector manages them itself (its ``KafkaSourceProvider.validateGeneralOptions``
  and ``kafkaParamsForProducer``), name -> Spark's error text; pylog refuses them the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker_runtime.errors import ConfigError
from broker_runtime.security import ClientSecurity
from broker_runtime.security.client_security import CLIENT_SECURITY_KEYS
from spark_kafka_log.common.driver_log import driver_log
from spark_kafka_log.common.option_parsing import reject_unknown_keys

__all__ = [
    "KAFKA_CLIENT_CONFIGS",
    "SECURITY_OPTION_KEYS",
    "SPARK_REFUSED_READER_KEYS",
    "SPARK_REFUSED_WRITER_KEYS",
    "check_prefixed_keys",
    "security_options",
    "warn_ignored",
]

#: The security settings pylog interprets (without the ``kafka.`` prefix).
SECURITY_OPTION_KEYS = CLIENT_SECURITY_KEYS

_COMMON = (
    "bootstrap.servers client.dns.lookup metadata.max.age.ms send.buffer.bytes receive.buffer.bytes client.id "
    "client.rack reconnect.backoff.ms reconnect.backoff.max.ms retries retry.backoff.ms retry.backoff.max.ms "
    "metrics.sample.window.ms metrics.num.samples metrics.recording.level metric.reporters "
    "auto.include.jmx.reporter security.protocol socket.connection.setup.timeout.ms "
    "socket.connection.setup.timeout.max.ms connections.max.idle.ms request.timeout.ms default.api.timeout.ms "
    "enable.metrics.push metadata.recovery.strategy metadata.recovery.rebootstrap.trigger.ms config.providers "
    "security.providers interceptor.classes"
)
_PRODUCER = (
    "acks batch.size linger.ms delivery.timeout.ms max.request.size buffer.memory compression.type "
    "compression.gzip.level compression.lz4.level compression.zstd.level max.block.ms "
    "max.in.flight.requests.per.connection key.serializer value.serializer partitioner.class "
    "partitioner.ignore.keys partitioner.adaptive.partitioning.enable partitioner.availability.timeout.ms "
    "enable.idempotence transaction.timeout.ms transactional.id metadata.max.idle.ms "
    "transaction.two.phase.commit.enable"
)
_CONSUMER = (
    "group.id group.instance.id group.protocol group.remote.assignor max.poll.records max.poll.interval.ms "
    "session.timeout.ms heartbeat.interval.ms enable.auto.commit auto.commit.interval.ms "
    "partition.assignment.strategy auto.offset.reset fetch.min.bytes fetch.max.bytes fetch.max.wait.ms "
    "max.partition.fetch.bytes check.crcs key.deserializer value.deserializer exclude.internal.topics "
    "isolation.level allow.auto.create.topics internal.leave.group.on.close share.acknowledgement.mode"
)
_SASL = (
    "sasl.mechanism sasl.jaas.config sasl.client.callback.handler.class sasl.login.callback.handler.class "
    "sasl.login.class sasl.kerberos.service.name sasl.kerberos.kinit.cmd sasl.kerberos.ticket.renew.window.factor "
    "sasl.kerberos.ticket.renew.jitter sasl.kerberos.min.time.before.relogin sasl.login.refresh.window.factor "
    "sasl.login.refresh.window.jitter sasl.login.refresh.min.period.seconds sasl.login.refresh.buffer.seconds "
    "sasl.login.connect.timeout.ms sasl.login.read.timeout.ms sasl.login.retry.backoff.ms "
    "sasl.login.retry.backoff.max.ms sasl.oauthbearer.scope.claim.name sasl.oauthbearer.sub.claim.name "
    "sasl.oauthbearer.token.endpoint.url sasl.oauthbearer.jwks.endpoint.url "
    "sasl.oauthbearer.jwks.endpoint.refresh.ms sasl.oauthbearer.jwks.endpoint.retry.backoff.ms "
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms sasl.oauthbearer.clock.skew.seconds "
    "sasl.oauthbearer.expected.audience sasl.oauthbearer.expected.issuer sasl.oauthbearer.header.urlencode "
    "sasl.oauthbearer.client.credentials.client.id sasl.oauthbearer.client.credentials.client.secret "
    "sasl.oauthbearer.scope"
)
_SSL = (
    "ssl.protocol ssl.provider ssl.cipher.suites ssl.enabled.protocols ssl.keystore.type ssl.keystore.location "
    "ssl.keystore.password ssl.key.password ssl.keystore.key ssl.keystore.certificate.chain "
    "ssl.truststore.certificates ssl.truststore.type ssl.truststore.location ssl.truststore.password "
    "ssl.keymanager.algorithm ssl.trustmanager.algorithm ssl.endpoint.identification.algorithm "
    "ssl.secure.random.implementation ssl.engine.factory.class"
)

#: Every Kafka producer / consumer / common client config name (lower case, without ``kafka.``).
KAFKA_CLIENT_CONFIGS: frozenset[str] = frozenset(
    " ".join((_COMMON, _PRODUCER, _CONSUMER, _SASL, _SSL)).split()
)


#: Kafka consumer settings Spark's Kafka source refuses (``kafka.<name>``), with Spark's error text.
SPARK_REFUSED_READER_KEYS: dict[str, str] = {
    "auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option 'startingOffsets' to "
        "'earliest' or 'latest' to specify where to start. Structured Streaming manages which offsets are "
        "consumed internally, rather than relying on the kafkaConsumer to do it. Note that 'startingOffsets' "
        "only applies when a new Streaming query is started, and that resuming will always pick up from where "
        "the query left off."
    ),
    "key.deserializer": (
        "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte arrays with "
        "ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the keys."
    ),
    "value.deserializer": (
        "Kafka option 'value.deserializer' is not supported as values are deserialized as byte arrays with "
        "ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the values."
    ),
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}

#: Kafka producer settings Spark's Kafka sink refuses (``kafka.<name>``), with Spark's error text.
SPARK_REFUSED_WRITER_KEYS: dict[str, str] = {
    "key.serializer": "Kafka option 'key.serializer' is not supported as keys are serialized with ByteArraySerializer.",
    "value.serializer": (
        "Kafka option 'value.serializer' is not supported as value are serialized with ByteArraySerializer."
    ),
}


def security_options(opts: Mapping[str, str], *, embedded: bool) -> ClientSecurity:
    """The ``kafka.security.protocol`` / ``kafka.sasl.*`` / ``kafka.ssl.*`` options (lower-cased keys) parsed;
    ``embedded``: no ``kafka.bootstrap.servers`` (the embedded broker speaks PLAINTEXT only)."""
    props = {k[len("kafka.") :]: str(v) for k, v in opts.items() if k.startswith("kafka.")}
    props = {k: v for k, v in props.items() if k in CLIENT_SECURITY_KEYS}
    security = ClientSecurity.from_properties(props, name_prefix="option kafka.")
    if embedded and security.protocol != "PLAINTEXT":
        raise ConfigError(
            f"option kafka.security.protocol={security.protocol} needs kafka.bootstrap.servers: the embedded "
            "broker (used without bootstrap servers) listens on PLAINTEXT only"
        )
    return security


def check_prefixed_keys(
    opts: Mapping[str, str],
    *,
    role: str,
    own_kafka_keys: tuple[str, ...],
    pylog_keys: tuple[str, ...],
    pylog_allowed: str,
    tolerated_prefix: str | None = None,
) -> list[str]:
    """The ``kafka.*`` / ``pylog.*`` keys of one role's options checked (:func:`~spark_kafka_log.common.
    option_parsing.reject_unknown_keys`): the role's own Kafka settings and the security ones are known, any other
    Kafka client config is accepted and returned (sorted, with its prefix) for :func:`warn_ignored`."""
    return reject_unknown_keys(
        opts,
        role=role,
        kafka_keys=(*own_kafka_keys, *SECURITY_OPTION_KEYS),
        ignorable_kafka_keys=KAFKA_CLIENT_CONFIGS,
        pylog_keys=pylog_keys,
        pylog_allowed=pylog_allowed,
        tolerated_prefix=tolerated_prefix,
    )


def warn_ignored(keys: list[str], role: str) -> None:
    """One driver WARNING listing the Kafka client settings given that the ``role`` ("reader", "writer") does
    not use (nothing when there are none)."""
    if keys:
        driver_log().warning(
            "pylog %s: these Kafka client settings are accepted but not used by pylog: %s",
            role,
            ", ".join(keys),
        )
