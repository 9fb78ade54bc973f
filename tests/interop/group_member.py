"""A confluent-kafka group member in its own process (tests SIGSTOP it): subscribes, prints ``assigned N`` on
every assignment and ``consumed`` once it read a record, then polls until killed.

Usage: python -m tests.interop.group_member BOOTSTRAP GROUP TOPIC SESSION_TIMEOUT_MS
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer


def main() -> None:
    bootstrap, group, topic, session_ms = sys.argv[1:5]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": int(session_ms),
            "heartbeat.interval.ms": 200,
        }
    )

    def on_assign(c: Consumer, partitions: list) -> None:  # type: ignore[type-arg]
        print(f"assigned {len(partitions)}", flush=True)

    consumer.subscribe([topic], on_assign=on_assign)
    while True:
        consumer.poll(0.2)


if __name__ == "__main__":
    main()
