"""``python -m broker_runtime``: the same as the ``pylog-broker`` console script (see :mod:`broker_runtime.cli`)."""

from __future__ import annotations

import sys

from broker_runtime.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
