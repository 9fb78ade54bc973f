"""The broker server: listener and connections, dispatcher, one handler per API key, the composition root.

Public entry points: :class:`~broker_runtime.server.broker.Broker` and
:class:`~broker_runtime.server.config.BrokerConfig`. Submodules are imported lazily so that importing the
package (e.g. for the config alone) does not pull in the storage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Broker", "BrokerConfig"]

if TYPE_CHECKING:
    from broker_runtime.server.broker import Broker
    from broker_runtime.server.config import BrokerConfig


def __getattr__(name: str) -> Any:
    if name == "Broker":
        from broker_runtime.server.broker import Broker

        return Broker
    if name == "BrokerConfig":
        from broker_runtime.server.config import BrokerConfig

        return BrokerConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
