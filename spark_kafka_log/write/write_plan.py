"""Write planning: everything the driver checks and resolves before a write's tasks start.

Runs on: driver (planning).

Where this runs: the **driver** (the Python worker where PySpark calls ``DataSource.writer()`` /
``streamWriter()``), once per write or micro-batch. It parses the options, validates the DataFrame's columns,
finds or starts the embedded broker when no ``kafka.bootstrap.servers`` is given, checks that the ``topic``
option's topic exists (auto-creating it), and logs ONE warning when the options make delivery weaker than the
default (idempotent, acks=all), naming the options. Every configuration error surfaces here, before any task
runs, as a :class:`~broker_runtime.errors.ConfigError` (or a Kafka error for an unusable topic).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.types import StructType

from broker_runtime.client import BrokerConnectionError
from broker_runtime.launch import ensure_embedded_broker
from broker_runtime.security import ClientSecurity
from spark_kafka_log.common.connections import drop_kept_client, kept_client, topic_partitions, writer_client
from spark_kafka_log.common.driver_log import driver_log
from spark_kafka_log.common.schema import InputLayout, validate_input_schema
from spark_kafka_log.common.writer_options import WriterOptions, parse_writer_options

__all__ = ["check_topic", "prepare_write"]


_KEPT = "stream-topic-check"


def check_topic(
    servers: str, topic: str, request_timeout_ms: int = 30000, security: ClientSecurity | None = None
) -> int:
    """The broker answers and ``topic`` exists (auto-created if the broker allows it); its partition count."""
    with writer_client(
        servers, client_id="pylog-writer-driver", request_timeout_ms=request_timeout_ms, security=security
    ) as client:
        return topic_partitions(client, topic)


def prepare_write(
    options: Mapping[str, str], schema: StructType, keep_client: bool = False
) -> tuple[WriterOptions, InputLayout, str]:
    """Driver: the parsed options, the input layout and the resolved broker address of one write.

    ``keep_client``: check the topic with a client this process keeps for the next call (the streaming sink,
    twice per micro-batch; see :func:`spark_kafka_log.common.connections.kept_client`)."""
    parsed = parse_writer_options(options)
    layout = validate_input_schema(schema, parsed.topic)
    servers = parsed.bootstrap_servers or ensure_embedded_broker(parsed.data_dir)
    if parsed.topic is not None and keep_client:
        settings = (servers, parsed.request_timeout_ms, parsed.security)
        client = kept_client(
            _KEPT,
            settings,
            lambda: writer_client(
                servers,
                client_id="pylog-writer-driver",
                request_timeout_ms=parsed.request_timeout_ms,
                security=parsed.security,
            ),
        )
        try:
            topic_partitions(client, parsed.topic)
        except BrokerConnectionError:
            # Maybe only the kept connection is stale: the plain check, with a new client, decides.
            drop_kept_client(_KEPT)
            check_topic(servers, parsed.topic, parsed.request_timeout_ms, parsed.security)
        except BaseException:
            drop_kept_client(_KEPT)
            raise
    elif parsed.topic is not None:
        check_topic(servers, parsed.topic, parsed.request_timeout_ms, parsed.security)
    weaker = parsed.weaker_delivery()
    if weaker is not None:
        driver_log().warning("%s", weaker)
    return parsed, layout, servers
