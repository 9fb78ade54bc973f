"""Which record walk runs: the compiled one (the C extension ``_recordwalk``, built at install from
``_recordwalk.c`` beside this file) or the Python one (:mod:`.pywalk`, numpy).

Both walks give the same results: the same layouts and decoded rows, the same encoded bytes, and the same
errors from ``scan_records`` (the decoder's errors may be worded differently; both raise). The compiled walk is
used whenever it imports; without it (no C compiler at install) or with ``PYLOG_RECORD_WALK=numpy`` in the
environment (read once, at import, for a whole process) the Python walk runs, and :func:`record_walk` says why.

Threading: :data:`compiled` is read by every encode, decode and scan call (one attribute read per call, never
per record). It is written only here at import and by :func:`numpy_walk` (the benchmark's comparison) or by
tests (``monkeypatch.setattr(walks, "compiled", None)``): a switch of the whole process, not for use while
other threads encode or decode.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["RECORD_WALK_ENV", "compiled", "numpy_walk", "record_walk"]

#: Setting this environment variable to ``numpy`` (read once, at import) forces the Python walk even when the
#: compiled one is installed, for a whole process (a broker, a test run).
RECORD_WALK_ENV = "PYLOG_RECORD_WALK"

#: The compiled walk's module name: pyproject.toml's ext-modules builds it from ``_recordwalk.c`` here.
COMPILED_MODULE = "broker_runtime.protocol.record_codec._recordwalk"


def _load_compiled_walk() -> tuple[Any, str]:
    if os.environ.get(RECORD_WALK_ENV, "").strip().lower() == "numpy":
        return None, f"{RECORD_WALK_ENV}=numpy"
    try:
        return importlib.import_module(COMPILED_MODULE), ""
    except ImportError as exc:
        return None, f"{COMPILED_MODULE} cannot be imported ({exc})"


#: The compiled record walk (the C extension ``_recordwalk``), or None: then the Python walk runs.
compiled: Any
compiled, _MISSING = _load_compiled_walk()


def record_walk() -> tuple[str, str]:
    """Which record walk runs: ("compiled", "") or ("numpy", why the compiled one does not)."""
    return ("compiled", "") if compiled is not None else ("numpy", _MISSING or "switched off")


@contextlib.contextmanager
def numpy_walk() -> Iterator[None]:
    """Run the Python (numpy) record walk inside the block (the benchmark's comparison). A switch of the whole
    process: not for use while other threads encode or decode."""
    global compiled
    saved, compiled = compiled, None
    try:
        yield
    finally:
        compiled = saved
