"""Schemas: Spark's Kafka source schema (what reads return) and the checks of a DataFrame written to pylog.

Runs on: driver (planning); executors (task).

Where this runs: :func:`reader_schema` and :func:`checked_reader_schema` on the **driver** (``DataSource.schema()`` /
``reader()`` / ``streamReader()``) and
:func:`arrow_schema` on the **executors** (the Arrow schema a read task yields). :func:`validate_input_schema` runs on the **driver** in ``DataSource.writer()`` /
``streamWriter()``, so a DataFrame with a missing ``value`` column or a wrongly typed column fails before
any task starts, with a message naming the column (Spark's Kafka sink wording where it has one). The
resulting :class:`InputLayout` travels to the executors inside the writer.

Input columns (as Spark's Kafka sink; names matched case-insensitively, other columns are ignored):

    column     type                                    meaning
    value      binary or string (required)             record value; null = tombstone
    key        binary, string or null                  record key; null keys use sticky partitioning
    headers    array<struct<key:string,value:binary>>  record headers (value may also be string)
    topic      string                                  target topic; the ``topic`` option overrides it
    partition  int                                     explicit partition; null = partitioner
    timestamp  timestamp                               CreateTime; null = the time of the write
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from broker_runtime.errors import ConfigError

__all__ = [
    "KAFKA_SOURCE_SCHEMA",
    "InputLayout",
    "arrow_schema",
    "checked_reader_schema",
    "reader_schema",
    "validate_input_schema",
]

#: Spark's Kafka source schema (``includeHeaders`` off); pylog reads return exactly these columns.
KAFKA_SOURCE_SCHEMA = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
)

_HEADERS_TYPE_TEXT = "array<struct<key:string,value:binary>>"

_HEADERS_FIELD = StructField(
    "headers",
    ArrayType(
        StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]), True
    ),
    True,
)


def reader_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema; with ``includeHeaders`` plus ``headers array<struct<key,value>>``."""
    fields = list(KAFKA_SOURCE_SCHEMA.fields)
    if include_headers:
        fields.append(_HEADERS_FIELD)
    return StructType(fields)


def checked_reader_schema(include_headers: bool, schema: StructType | None) -> StructType:
    """The reader's schema; ``schema`` (what Spark passes to ``reader()`` / ``streamReader()``) must be it (with
    ``headers`` exactly when ``includeHeaders`` is true): a user-specified schema is rejected as Spark's Kafka
    source rejects it."""
    expected = reader_schema(include_headers)
    if schema is not None and [f.name for f in schema.fields] != [f.name for f in expected.fields]:
        raise ConfigError(
            "the pylog source has a fixed schema and cannot be read with a custom one; expected "
            f"{expected.simpleString()}, got {schema.simpleString()}"
        )
    return expected


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema PySpark requires of batches yielded for ``schema`` (timestamps as us, UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


@dataclass(frozen=True)
class InputLayout:
    """The input column names actually present (as spelled in the DataFrame) or None when absent."""

    value: str
    key: str | None = None
    headers: str | None = None
    topic: str | None = None
    partition: str | None = None
    timestamp: str | None = None


def _is_binary_or_string(t: DataType) -> bool:
    return isinstance(t, (BinaryType, StringType))


def _headers_ok(t: DataType) -> bool:
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    fields = {f.name.lower(): f.dataType for f in t.elementType.fields}
    return (
        len(fields) == 2
        and isinstance(fields.get("key"), StringType)
        and _is_binary_or_string(fields.get("value", NullType()))
    )


def validate_input_schema(schema: StructType, topic_option: str | None) -> InputLayout:
    """Check the DataFrame's columns against Spark's Kafka sink rules; :class:`ConfigError` names the column."""
    by_name: dict[str, StructField] = {}
    for field in schema.fields:
        by_name.setdefault(field.name.lower(), field)

    value = by_name.get("value")
    if value is None:
        raise ConfigError(
            "Required attribute 'value' not found: the DataFrame written to pylog needs a 'value' column "
            f"(binary or string); its columns are {[f.name for f in schema.fields]}"
        )
    if not _is_binary_or_string(value.dataType):
        raise ConfigError(
            f"value attribute type must be a string or binary, got {value.dataType.simpleString()} "
            f"(column {value.name!r}); cast it, e.g. col('{value.name}').cast('binary')"
        )

    key = by_name.get("key")
    if key is not None and not isinstance(key.dataType, (BinaryType, StringType, NullType)):
        raise ConfigError(
            f"key attribute type must be a string or binary, got {key.dataType.simpleString()} "
            f"(column {key.name!r})"
        )

    headers = by_name.get("headers")
    if headers is not None and not _headers_ok(headers.dataType):
        raise ConfigError(
            f"headers attribute type must be {_HEADERS_TYPE_TEXT}, got {headers.dataType.simpleString()} "
            f"(column {headers.name!r})"
        )

    topic = by_name.get("topic")
    if topic is not None and not isinstance(topic.dataType, StringType) and topic_option is None:
        raise ConfigError(
            f"topic attribute type must be a string, got {topic.dataType.simpleString()} "
            f"(column {topic.name!r})"
        )
    if topic is None and topic_option is None:
        raise ConfigError(
            "Topic option required when no 'topic' attribute is present. Use the topic option for "
            "setting a topic, e.g. .option('topic', 'events')"
        )

    partition = by_name.get("partition")
    if partition is not None and not isinstance(partition.dataType, (IntegerType, NullType)):
        raise ConfigError(
            f"partition attribute type must be an int, got {partition.dataType.simpleString()} "
            f"(column {partition.name!r}); cast it, e.g. col('{partition.name}').cast('int')"
        )

    timestamp = by_name.get("timestamp")
    if timestamp is not None and not isinstance(timestamp.dataType, (TimestampType, NullType)):
        raise ConfigError(
            f"timestamp attribute type must be a timestamp, got {timestamp.dataType.simpleString()} "
            f"(column {timestamp.name!r})"
        )

    return InputLayout(
        value=value.name,
        key=key.name if key is not None else None,
        headers=headers.name if headers is not None else None,
        # The ``topic`` option overrides the column (Spark's Kafka sink rule): then the column is ignored.
        topic=topic.name if topic is not None and topic_option is None else None,
        partition=partition.name if partition is not None else None,
        timestamp=timestamp.name if timestamp is not None else None,
    )
