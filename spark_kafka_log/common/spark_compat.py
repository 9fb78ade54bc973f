"""Everything of the connector that depends on PySpark internals or on how Spark starts its Python workers.

Runs on: driver (session, planning).

Checked on PySpark 4.3.0 (:data:`CHECKED_PYSPARK`; ``tests/connector/test_spark_compat.py`` fails when the
installed PySpark leaves that range, asking to re-check this module against the new sources).

**The pushdown probe** (:func:`pushdown_enabled_in_planner`). Where: the **driver**, in the Python worker
that plans a read, inside ``DataSource.reader()``. Why: PySpark reads ``spark.sql.python.filterPushdown.enabled``
but does not pass it to ``reader()``, and it rejects a reader that implements ``pushFilters`` while the conf is
off (``DATA_SOURCE_PUSHDOWN_DISABLED``). In PySpark 4.3 ``reader()`` is called from two worker modules:

* ``pyspark.sql.worker.data_source_pushdown_filters`` -- Spark runs it only when the conf is on, so this
  caller means "enabled";
* ``pyspark.sql.worker.plan_data_source_read`` -- its ``_main`` holds the conf in the local variable
  ``enable_pushdown`` (read from the JVM before it calls ``reader()``).

The probe walks the calling frames and recognises those modules by their import name. The module's
``__name__`` is not enough: with ``spark.python.use.daemon=false`` Spark starts each worker as
``python -m pyspark.sql.worker.<module>``, so ``__name__`` is ``"__main__"`` there (the earlier probe missed
exactly that and then assumed pushdown on, which failed every read with pushdown off); the module's
``__spec__.name`` is the import name in both cases. When no frame answers (another caller, or a PySpark
whose internals moved) the probe returns ``None``, and the reader factory takes the reader WITHOUT
``pushFilters``, which PySpark accepts in both cases (Spark then applies every filter itself, so results
stay right), and logs one WARNING per process saying pushdown is skipped.

**The worker-interpreter check** (:func:`check_worker_python`). Where: the **driver**, in the user's own
Python process, from :func:`spark_kafka_log.register`. Why there: ``DataSource.writer()`` / ``reader()`` run in
a Python worker that Spark starts with the SAME interpreter as the executors' workers, and that worker must
already import ``spark_kafka_log`` to unpickle the data source; so with a wrong interpreter they never run,
and the job fails with ``ModuleNotFoundError: No module named 'spark_kafka_log'`` deep in a pickling
traceback. PySpark's rule for that interpreter (``pyspark/core/context.py``): ``SparkContext.pythonExec``,
i.e. ``$PYSPARK_PYTHON`` when the context started, else ``python3`` (``spark-submit`` turns
``--conf spark.pyspark.python`` into ``$PYSPARK_PYTHON``; set in a builder's config it is not used by
PySpark 4.3 for Python data sources). Only for a local master (the workers run on this machine); on any
other master nothing is guessed. Each interpreter path is checked once per process (``<python> -c`` with
``importlib.util.find_spec``: no import, a few tens of milliseconds).

Threading: the warning flag and the cache are process-global; both are idempotent, so races are harmless.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from types import FrameType
from typing import Any

from broker_runtime.errors import WorkerPythonError

__all__ = [
    "CHECKED_PYSPARK",
    "check_worker_python",
    "pushdown_enabled_in_planner",
    "reader_pushdown_choice",
    "worker_python",
]

log = logging.getLogger("spark_kafka_log.spark_compat")

#: PySpark versions this module was checked against: [low, high) as (major, minor, patch) tuples.
CHECKED_PYSPARK = ((4, 3, 0), (4, 4, 0))

_PLAN_READ = "pyspark.sql.worker.plan_data_source_read"
_PUSHDOWN_FILTERS = "pyspark.sql.worker.data_source_pushdown_filters"
_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_warned_undecided = False


def _module_of(frame: FrameType) -> str:
    """The import name of the module running ``frame`` (also when it runs as ``python -m``)."""
    spec = frame.f_globals.get("__spec__")
    name = getattr(spec, "name", None)
    return name if isinstance(name, str) else str(frame.f_globals.get("__name__", ""))


def pushdown_enabled_in_planner() -> bool | None:
    """Whether the PySpark planner calling ``reader()`` has filter pushdown on; ``None`` when it cannot tell."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = _module_of(frame)
        if module == _PUSHDOWN_FILTERS:
            return True
        if module == _PLAN_READ:
            value = frame.f_locals.get("enable_pushdown")
            if isinstance(value, bool):
                return value
        frame = frame.f_back
    return None


def reader_pushdown_choice() -> bool:
    """Driver, in ``reader()``: True to return the reader with ``pushFilters``. Undecided: False, warned once."""
    global _warned_undecided
    enabled = pushdown_enabled_in_planner()
    if enabled is not None:
        return enabled
    if not _warned_undecided:
        _warned_undecided = True
        log.warning(
            "pylog reader: filter pushdown is skipped because the setting %s could not be read from the "
            "PySpark planner (PySpark internals differ from the checked versions %s); Spark applies every "
            "filter itself, so results are right, but filters no longer narrow the offset ranges read",
            _PUSHDOWN_CONF,
            _version_range_text(),
        )
    return False


def _version_range_text() -> str:
    lo, hi = CHECKED_PYSPARK
    return f">={'.'.join(map(str, lo))},<{'.'.join(map(str, hi))}"


# ------------------------------------------------------------------------------ worker interpreter


def worker_python(spark: Any) -> str | None:
    """The interpreter of this SparkSession's local Python workers; None when the master is not local or unknown."""
    try:
        context = spark.sparkContext
        master = str(context.master)
        python = context.pythonExec
    except Exception:  # e.g. Spark Connect: no SparkContext in this process, the server starts the workers
        return None
    if not master.startswith("local") or not isinstance(python, str) or not python:
        return None
    return python


def check_worker_python(spark: Any) -> None:
    """Driver: fail with one clear line when the local workers' interpreter cannot import pylog."""
    python = worker_python(spark)
    if python is None:
        return
    missing = _missing_modules(python, os.getcwd())
    if missing:
        raise WorkerPythonError(
            f"Spark's Python workers would run {python!r}, which cannot import {', '.join(missing)} (pylog is "
            f"not installed for that interpreter); point Spark at one that has it: export PYSPARK_PYTHON="
            f"{sys.executable} before starting Spark, or spark-submit --conf spark.pyspark.python="
            f"{sys.executable}"
        )


_FIND_SPECS = (
    "import importlib.util, sys\n"
    "missing = []\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        found = importlib.util.find_spec(name) is not None\n"
    "    except Exception:\n"
    "        found = False\n"
    "    if not found:\n"
    "        missing.append(name)\n"
    "print(' '.join(missing))\n"
)


@functools.lru_cache(maxsize=16)
def _missing_modules(python: str, cwd: str) -> tuple[str, ...]:
    """Modules pylog needs that ``python`` (run in ``cwd``, as Spark runs its workers) does not find."""
    wanted = _required_modules()
    try:
        done = subprocess.run(
            [python, "-c", _FIND_SPECS, *wanted], cwd=cwd, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return (f"anything (it could not be started: {exc})",)
    if done.returncode != 0:
        return (f"anything (it exited with {done.returncode}: {done.stderr.strip()[-200:]})",)
    return tuple(done.stdout.split())


@functools.lru_cache(maxsize=1)
def _required_modules() -> tuple[str, ...]:
    """``spark_kafka_log`` plus the top-level modules of its distribution's requirements (as installed here)."""
    from importlib import metadata

    names = ["spark_kafka_log"]
    try:
        by_module = metadata.packages_distributions()
        wanted: set[str] = set()
        for dist in by_module.get("spark_kafka_log", []):
            for requirement in metadata.requires(dist) or []:
                if "extra ==" not in requirement:
                    wanted.add(_canonical(requirement))
        names += sorted(
            module
            for module, dists in by_module.items()
            if module.isidentifier()
            and not module.startswith("_")
            and {_canonical(d) for d in dists} & wanted
        )
    except Exception:  # metadata unavailable (e.g. not installed as a distribution): the package alone
        pass
    return tuple(names)


def _canonical(requirement: str) -> str:
    """The normalized distribution name of a requirement string (``"PyArrow>=18"`` -> ``"pyarrow"``)."""
    name = requirement
    for stop in " ;<>=!~[(":
        name = name.split(stop, 1)[0]
    return name.strip().lower().replace("_", "-").replace(".", "-")
