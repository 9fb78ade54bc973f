"""Input column validation on the driver: Spark's Kafka sink rules, errors naming the column."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from broker_runtime.errors import ConfigError
from spark_kafka_log.common.schema import KAFKA_SOURCE_SCHEMA, validate_input_schema

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def schema(**cols: object) -> StructType:
    return StructType([StructField(name, t) for name, t in cols.items()])  # type: ignore[arg-type]


def test_source_schema_is_sparks_kafka_schema() -> None:
    assert KAFKA_SOURCE_SCHEMA.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )


@pytest.mark.parametrize("value_type", [BinaryType(), StringType()])
@pytest.mark.parametrize("key_type", [None, BinaryType(), StringType(), NullType()])
def test_accepted_column_combinations(value_type: object, key_type: object) -> None:
    cols: dict[str, object] = {"value": value_type, "headers": HEADERS, "partition": IntegerType()}
    cols["timestamp"] = TimestampType()
    if key_type is not None:
        cols["key"] = key_type
    layout = validate_input_schema(schema(**cols), "t")
    assert layout.value == "value" and layout.headers == "headers" and layout.partition == "partition"
    assert layout.key == ("key" if key_type is not None else None)
    assert layout.topic is None


def test_topic_option_overrides_the_topic_column() -> None:
    s = schema(value=BinaryType(), topic=StringType())
    assert validate_input_schema(s, None).topic == "topic"
    assert validate_input_schema(s, "t").topic is None


def test_column_names_are_case_insensitive() -> None:
    layout = validate_input_schema(schema(VALUE=BinaryType(), Key=StringType()), "t")
    assert (layout.value, layout.key) == ("VALUE", "Key")


@pytest.mark.parametrize(
    "cols, topic, fragments",
    [
        ({"key": BinaryType()}, "t", ["'value'", "not found"]),
        ({"value": IntegerType()}, "t", ["value attribute", "int"]),
        ({"value": BinaryType(), "key": LongType()}, "t", ["key attribute", "bigint"]),
        ({"value": BinaryType(), "partition": LongType()}, "t", ["partition attribute", "bigint"]),
        ({"value": BinaryType(), "timestamp": LongType()}, "t", ["timestamp attribute", "bigint"]),
        ({"value": BinaryType(), "headers": StringType()}, "t", ["headers attribute", "array<struct"]),
        ({"value": BinaryType()}, None, ["Topic option required", "'topic' attribute"]),
        ({"value": BinaryType(), "topic": IntegerType()}, None, ["topic attribute", "int"]),
    ],
)
def test_bad_columns_name_the_column(
    cols: dict[str, object], topic: str | None, fragments: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        validate_input_schema(schema(**cols), topic)
    for fragment in fragments:
        assert fragment in str(info.value)
