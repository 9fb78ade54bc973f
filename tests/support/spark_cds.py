"""A class-data sharing archive for the suite's Spark driver JVMs: they start ~5-10 s sooner with it.

Every Spark JVM of the suite (each xdist worker's session, and the drivers of their own that the ``spark_app``
tests start and SIGKILL, 15 or more per run) loads the same ~15,000 classes of the same jars. Measured on 2 busy
cores: a session and its first query took 19.6 s and 24.1 s without the archive, 14.0 s and 9.8 s with it.

Archive: ``<cache>/spark-cds/<key>.jsa`` (``$XDG_CACHE_HOME`` or ``~/.cache``, then ``pylog``; ~150 MB), ``key``
a digest of the Java binary (real path and modification time) and of the installed PySpark (version and jars
directory), so an upgrade of either makes a new one. It is dumped once (:func:`ensure_archive`, called by the
``spark`` fixture before its session starts): a small Spark application (``python -m tests.support.spark_cds``)
runs a session and a query with ``-XX:ArchiveClassesAtExit`` to a name of its own, its JVM exits (end of input
on its standard input), and the file is moved into place. One process of the machine dumps at a time (an
exclusive lock on ``<cache>/spark-cds/<key>.lock``; the others wait for it, so every session of that run maps
it). A failed dump leaves no archive and says so on stderr; the run goes on without it (and
``test_spark_jvm.py`` fails, naming the reason).

Use: :func:`jvm_options` gives the JVM options mapping the archive when it exists (``-XX:SharedArchiveFile``);
the root conftest adds them to ``SPARK_SUBMIT_OPTS``, which spark-submit gives the driver JVM and which the
drivers of their own inherit. A JVM that cannot map the archive (another classpath, e.g. local-cluster mode)
starts as without it; CDS's own messages are off (``-Xlog:cds*=off``), the JVM's other warnings go to stderr.

Threading: none; called from the main thread of pytest processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

#: Log options: no CDS messages (a dump lists thousands of classes it skips), other JVM warnings on stderr.
LOG_OPTIONS = ("-Xlog:disable", "-Xlog:all=warning:stderr", "-Xlog:cds*=off:stderr")
#: The dump's application must finish in this time (a JVM start, a query and the dump: 20-60 s when busy).
DUMP_TIMEOUT_S = 300


def archive_path() -> Path | None:
    """Where this machine's archive for this Java and this PySpark is (or will be); None without ``java``."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not os.path.isfile(java):
        return None
    import pyspark

    real = Path(java).resolve()
    jars = Path(pyspark.__file__).parent / "jars"
    identity = f"{real}\0{real.stat().st_mtime_ns}\0{pyspark.__version__}\0{jars.resolve()}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pylog" / "spark-cds" / f"{key}.jsa"


#: The value :func:`configure_environment` last set, beside ``SPARK_SUBMIT_OPTS`` in the environment, so that
#: the processes it starts (xdist workers) know the value as the suite's own, not the user's.
OWN_ENV = "PYLOG_TESTS_SPARK_SUBMIT_OPTS"


def configure_environment() -> None:
    """Set ``SPARK_SUBMIT_OPTS`` to :func:`base_options` and :func:`jvm_options` unless the user set it."""
    if owns_submit_opts():
        os.environ["SPARK_SUBMIT_OPTS"] = os.environ[OWN_ENV] = " ".join([*base_options(), *jvm_options()])


def owns_submit_opts() -> bool:
    """Whether ``SPARK_SUBMIT_OPTS`` is unset or the value this module set (a user's own is left alone)."""
    current = os.environ.get("SPARK_SUBMIT_OPTS")
    return current is None or current == os.environ.get(OWN_ENV)


def jvm_options() -> list[str]:
    """The options that map the archive, when there is one (else none)."""
    archive = archive_path()
    if archive is None or not archive.is_file():
        return []
    return [*LOG_OPTIONS, f"-XX:SharedArchiveFile={archive}"]


def ensure_archive() -> bool:
    """Dump the archive unless it exists or another process is dumping it; whether it exists now."""
    archive = archive_path()
    if archive is None:
        return False
    if archive.is_file():
        return True
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(archive.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be dumping it: wait for it (once per machine)
        if archive.is_file():
            return True
        dumping = archive.with_name(f"{archive.stem}.{os.getpid()}.{uuid.uuid4().hex[:6]}.jsa.tmp")
        env = {k: v for k, v in os.environ.items() if k not in ("SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS")}
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable  # as the spark fixture's
        env["SPARK_SUBMIT_OPTS"] = " ".join(
            [*base_options(), *LOG_OPTIONS, f"-XX:ArchiveClassesAtExit={dumping}"]
        )
        started = time.monotonic()
        print(f"dumping the Spark JVMs' class-data sharing archive once, into {archive}", file=sys.stderr)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "tests.support.spark_cds"],
                env=env,
                cwd=Path(__file__).resolve().parents[2],
                capture_output=True,
                text=True,
                timeout=DUMP_TIMEOUT_S,
            )
            if done.returncode == 0 and dumping.is_file() and dumping.stat().st_size > 0:
                os.replace(dumping, archive)
                took = time.monotonic() - started
                print(f"Spark class-data sharing archive ready in {took:.0f} s", file=sys.stderr)
                return True
            print(
                f"no Spark class-data sharing archive (the Spark JVMs start without it): the dump exited "
                f"{done.returncode}: {done.stderr.strip()[-1500:]}",
                file=sys.stderr,
            )
        except subprocess.TimeoutExpired:
            print(
                f"no Spark class-data sharing archive: the dump took over {DUMP_TIMEOUT_S} s", file=sys.stderr
            )
        finally:
            with contextlib.suppress(OSError):
                dumping.unlink()
    return False


def base_options() -> list[str]:
    """The JVM options of every Spark JVM of the suite (client compiler only, serial collector): they start
    about 25% faster (measured: 7 vs 9 s to a session) and leave the 2 cores to the brokers and workers."""
    return ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


def _dump_application() -> None:
    """The classes the suite's sessions load first: a session like the ``spark`` fixture's, a query with a
    shuffle, a Python UDF and a Python data source; then the JVM exits (the dump runs at its exit)."""
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSource, DataSourceReader
    from pyspark.sql.functions import udf

    class Rows(DataSource):
        @classmethod
        def name(cls) -> str:
            return "cds_rows"

        def schema(self) -> str:
            return "id int"

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return RowsReader()

    class RowsReader(DataSourceReader):
        def read(self, partition):  # type: ignore[no-untyped-def]
            yield from ((i,) for i in range(10))

    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("pylog-spark-cds")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(Rows)
    plus_one = udf(lambda x: x + 1, "long")
    session.range(0, 1000, 1, 2).select(plus_one("id").alias("x")).groupBy().sum("x").collect()
    session.read.format("cds_rows").load().collect()
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    session.stop()
    assert gateway is not None
    proc = gateway.proc  # the JVM: it exits at the end of its input, and dumps the archive then
    gateway.shutdown()
    proc.stdin.close()
    proc.wait(DUMP_TIMEOUT_S)


if __name__ == "__main__":
    _dump_application()
