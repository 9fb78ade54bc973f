"""In-process brokers for tests: started on a free loopback port under a temporary directory (the caller
stops them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def start_broker(tmp_path: Path, overrides: dict[str, str] | None = None) -> Any:
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "kafka-logs")}
    props.update(overrides or {})
    return Broker(BrokerConfig.from_properties(props)).start()


def start_node_brokers(tmp_path: Path, props: dict[str, str], nodes: int = 2) -> list[Any]:
    """``nodes`` brokers in this process with ``props`` (which name their shared ``pylog.cluster.dir``), node
    ``n`` keeping its logs in ``tmp_path / f"n{n}"``."""
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    return [
        Broker(
            BrokerConfig.from_properties({**props, "node.id": str(n), "log.dirs": str(tmp_path / f"n{n}")})
        ).start()
        for n in range(nodes)
    ]
