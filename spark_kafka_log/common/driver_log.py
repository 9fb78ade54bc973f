"""The connector's driver-side logger, made visible where nothing configures logging.

Runs on: driver (planning, commit).

Where this runs: the **driver**, in the Python workers where PySpark calls ``writer()``, ``commit()`` and
``abort()``. Nothing configures logging in those processes, so the first use adds one stderr handler at INFO
(stderr reaches the driver's console / log) unless the process or the root logger already has handlers.
Idempotent; a race between threads at worst adds nothing (both see the handler list after appending).
"""

from __future__ import annotations

import logging
import sys

__all__ = ["driver_log"]

_NAME = "spark_kafka_log.writer"


def driver_log() -> logging.Logger:
    """The logger ``spark_kafka_log.writer``, with a stderr handler when logging is not configured."""
    log = logging.getLogger(_NAME)
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    return log
