"""Helpers for the launcher tests: the ``pylog-broker`` command line as this interpreter runs it."""

from __future__ import annotations

import sys

__all__ = ["pylog_broker"]


def pylog_broker(*args: str) -> list[str]:
    """``python -m broker_runtime ARGS...`` (the ``pylog-broker`` console script) with this interpreter."""
    return [sys.executable, "-m", "broker_runtime", *args]
