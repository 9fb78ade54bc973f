"""What the Apache Kafka peer modules share: :func:`peer` (a marked copy of another module's test) and Kafka's
own read_committed judge (:func:`kafka_read_committed`)."""

from __future__ import annotations

import re
import sys
import types
from typing import Any

import pytest

from tests.support.apache_kafka import run_tool

PEER = "kafka-broker"


def peer(test: Any, feature: str, *, differs: str | None = None, parametrize: Any = None) -> Any:
    """A copy of another module's ``test`` carrying ``compat(PEER, feature)`` and the marks of its own module
    (``slow``, ``timeout``), with ``parametrize`` instead of its own when given. A copy: marking the original
    would mark it in its own module too."""
    copy = types.FunctionType(
        test.__code__, test.__globals__, test.__name__, test.__defaults__, test.__closure__
    )
    copy.__dict__.update(test.__dict__)
    copy.__kwdefaults__ = test.__kwdefaults__
    copy.__annotations__ = dict(test.__annotations__)
    copy.__doc__ = test.__doc__
    own_module = sys.modules[test.__module__].__dict__.get("pytestmark", [])
    marks = [
        *(own_module if isinstance(own_module, list) else [own_module]),
        *getattr(test, "pytestmark", []),
    ]
    marks = [getattr(m, "mark", m) for m in marks]
    if parametrize is not None:
        marks = [m for m in marks if m.name != "parametrize"] + [parametrize.mark]
    kwargs = {"differs": differs} if differs else {}
    copy.pytestmark = [*marks, pytest.mark.compat(PEER, feature, **kwargs).mark]
    return copy


# --------------------------------------------------------------------------------------------- Kafka's judge


#: The key of every record of the control topic (:func:`control_topic`), which Kafka's judge reads beside the
#: topic under test (the console consumer's formatter does not print the topic).
CONTROL_KEY = "pylog-control"


def kafka_read_committed(
    bootstrap: str, topic: str, control_topic: str
) -> tuple[list[tuple[int, int, str, str]], int]:
    """What Kafka's Java consumer returns of ``topic`` with ``isolation.level=read_committed``
    (``kafka-console-consumer`` from the beginning, one JVM, ``topic`` and ``control_topic`` together):
    ``(partition, offset, key, value)`` in partition/offset order, and how many control records it returned
    (all of them, or the consumer stopped before it had read everything). The tool stops 3 s after the last
    record it got."""
    done = run_tool(
        "kafka-console-consumer",
        "--bootstrap-server",
        bootstrap,
        "--include",
        f"{re.escape(topic)}|{re.escape(control_topic)}",
        "--from-beginning",
        "--isolation-level",
        "read_committed",
        "--timeout-ms",
        "3000",
        *(
            arg
            for prop in ("print.partition=true", "print.offset=true", "print.key=true", "key.separator=|")
            for arg in ("--formatter-property", prop)
        ),
        check=False,
    )
    # It ends by its timeout: exit 0 and "Processed a total of N messages" on stderr.
    found = re.search(r"Processed a total of (\d+) messages", done.stderr)
    assert done.returncode == 0 and found, done.stderr[-3000:]
    records, control = [], 0
    for line in done.stdout.splitlines():
        fields = re.fullmatch(r"Partition:(\d+)\|Offset:(\d+)\|([^|]*)\|(.*)", line)
        assert fields, f"unexpected kafka-console-consumer line {line!r}"
        partition, offset, key, value = fields.groups()
        if key == CONTROL_KEY:
            control += 1
        else:
            records.append((int(partition), int(offset), key, value))
    assert len(records) + control == int(found.group(1)), (found.group(0), len(done.stdout))
    return sorted(records), control
