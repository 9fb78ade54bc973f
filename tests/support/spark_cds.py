"""A class-data sharing archive for the suite's Spark driver JVMs: they start ~5-10 s sooner with it.

Every Spark JVM of the suite (each xdist worker's session, and the drivers of their own that the ``spark_app``
tests start and SIGKILL, 15 or more per run) loads the same ~15,000 classes of the same jars. Measured on 2 busy
cores: a session and its first query took 19.6 s and 24.1 s without the archive, 14.0 s and 9.8 s with it.

Archive: ``<cache>/spark-cds/<key>.jsa`` (``$XDG_CACHE_HOME`` or ``~/.cache``, then ``pylog``; ~150 MB), ``key``
a digest of the Java binary (real path and modification time) and of the installed PySpark (version and jars
directory), so an upgrade of either makes a new one. It is dumped once (:func:`ensure_archive`, called by the
``spark`` fixture before its session starts): a small Spark application (``python -m tests.support.spark_cds``)
runs a session and a query with ``-XX:ArchiveClassesAtExit`` to a name of its own, its JVM exits (end of input
on its standard input), a ``java -Xshare:on -version`` with the Spark JVMs' options and classpath checks that it
maps the file, and the file is moved into place. One process of the machine dumps at a time (an exclusive lock on
``<cache>/spark-cds/<key>.lock``; the others wait for it, so every session of that run maps it). A dump that fails
(exits non-zero, leaves no file, takes over :data:`DUMP_TIMEOUT_S`, or leaves a file no JVM maps) leaves
``<key>.failed`` with its reason: later processes and runs skip the dump with one line naming that file (delete it
to try again; a new Java or PySpark is a new key and dumps again). On a timeout the dump's whole process group is
killed (the Spark JVM is a grandchild). A cache directory that cannot be written (a read-only ``HOME``,
``XDG_CACHE_HOME`` a file) is said in one line. In all these cases the run goes on without the archive (and
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
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

#: Log options: no CDS messages (a dump lists thousands of classes it skips), other JVM warnings on stderr.
LOG_OPTIONS = ("-Xlog:disable", "-Xlog:all=warning:stderr", "-Xlog:cds*=off:stderr")
#: Where the dump's application writes its JVM's classpath, for the check that a JVM maps the archive.
CLASSPATH_FILE_ENV = "PYLOG_SPARK_CDS_CLASSPATH_FILE"
#: The dump's application must finish in this time (a JVM start, a query and the dump: 20-60 s when busy).
DUMP_TIMEOUT_S = 300


def java_binary() -> str | None:
    """The ``java`` the Spark JVMs run (``$JAVA_HOME/bin/java``, else the one on ``PATH``); None without one."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    return java if java and os.path.isfile(java) else None


def archive_path() -> Path | None:
    """Where this machine's archive for this Java and this PySpark is (or will be); None without ``java``."""
    java = java_binary()
    if java is None:
        return None
    real = Path(java).resolve()
    identity = f"{real}\0{real.stat().st_mtime_ns}\0{pyspark_version()}\0{_jars().resolve()}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pylog" / "spark-cds" / f"{key}.jsa"


def pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def _jars() -> Path:
    """The installed PySpark's jars: spark-submit runs its JVMs with ``-cp <jars>/*`` (its ``conf`` is absent)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False where a directory on the way cannot be searched (Python 3.11 raises then)."""
    try:
        return path.is_file()
    except OSError:
        return False


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
    if archive is None or not _is_file(archive):
        return []
    return [*LOG_OPTIONS, f"-XX:SharedArchiveFile={archive}"]


def ensure_archive() -> bool:
    """Dump the archive unless it exists, another process is dumping it or a dump for this key failed before;
    whether it exists now. Never raises: without an archive the Spark JVMs start as they would without it."""
    archive = archive_path()
    if archive is None:
        return False
    if _is_file(archive):
        return True
    failed = archive.with_suffix(".failed")
    if _skip_failed(failed):
        return False
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        lock = open(archive.with_suffix(".lock"), "w")  # noqa: SIM115 (closed below, after the lock's work)
    except OSError as error:
        print(
            f"no Spark class-data sharing archive (the Spark JVMs start without it): its cache directory "
            f"{archive.parent} cannot be written ({error}); set XDG_CACHE_HOME to a writable directory to have one",
            file=sys.stderr,
        )
        return False
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be dumping it: wait for it (once per machine)
        if _is_file(archive):
            return True
        if _skip_failed(failed):
            return False
        reason = _dump(archive)
        if reason is None:
            return True
        print(
            f"no Spark class-data sharing archive (the Spark JVMs start without it): {reason}",
            file=sys.stderr,
        )
        try:
            failed.write_text(reason + "\n")
        except OSError as error:
            print(f"and {failed} cannot be written ({error}): the next run dumps again", file=sys.stderr)
    return False


def _skip_failed(failed: Path) -> bool:
    """Whether an earlier dump for this key failed (its reason in ``failed``): say so in one line."""
    try:
        reason = failed.read_text().strip()
    except OSError:
        return False
    first = reason.splitlines()[0][:300] if reason else "(no reason recorded)"
    print(
        f"no Spark class-data sharing archive: its dump failed before ({first}); "
        f"delete {failed} to try again",
        file=sys.stderr,
    )
    return True


def dump_command() -> list[str]:
    """The small Spark application whose JVM dumps the archive at its exit."""
    return [sys.executable, "-m", "tests.support.spark_cds"]


def _dump(archive: Path) -> str | None:
    """Dump into a name of this process, check that a JVM maps it, move it into place; None, else the reason."""
    dumping = archive.with_name(f"{archive.stem}.{os.getpid()}.{uuid.uuid4().hex[:6]}.jsa.tmp")
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS")}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable  # as the spark fixture's
    env["SPARK_SUBMIT_OPTS"] = " ".join(
        [*base_options(), *LOG_OPTIONS, f"-XX:ArchiveClassesAtExit={dumping}"]
    )
    classpath = dumping.with_name(dumping.name + ".classpath")
    env[CLASSPATH_FILE_ENV] = str(classpath)
    started = time.monotonic()
    print(f"dumping the Spark JVMs' class-data sharing archive once, into {archive}", file=sys.stderr)
    try:
        # A session of its own: on a timeout the whole group goes (the Spark JVM is a grandchild and would go on
        # writing its ~150 MB after the finally below removed the file).
        process = subprocess.Popen(
            dump_command(),
            env=env,
            cwd=Path(__file__).resolve().parents[2],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _, stderr = process.communicate(timeout=DUMP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return f"the dump took over {DUMP_TIMEOUT_S} s"
        if process.returncode != 0 or not _is_file(dumping) or dumping.stat().st_size == 0:
            return f"the dump exited {process.returncode} without an archive: {stderr.strip()[-1500:]}"
        try:
            jvm_classpath = classpath.read_text()
        except OSError:
            jvm_classpath = f"{_jars()}/*"  # spark-submit's own, less the order it puts a few jars first in
        unusable = _unmappable(dumping, jvm_classpath)
        if unusable is not None:
            return f"the dumped archive cannot be mapped: {unusable}"
        os.replace(dumping, archive)
        print(
            f"Spark class-data sharing archive ready in {time.monotonic() - started:.0f} s", file=sys.stderr
        )
        return None
    except OSError as error:
        return f"the dump failed: {error}"
    finally:
        for leftover in (dumping, classpath):
            with contextlib.suppress(OSError):
                leftover.unlink()


def _unmappable(candidate: Path, classpath: str) -> str | None:
    """Why a JVM with the Spark JVMs' options and ``classpath`` (the dumping JVM's: a dynamic archive maps only
    under the classpath it was dumped with) cannot map ``candidate`` (``-Xshare:on`` makes that an error), or None
    when it can."""
    java = java_binary()
    if java is None:
        return "no java"
    command = [java, *base_options(), "-Xshare:on", f"-XX:SharedArchiveFile={candidate}", "-cp", classpath]
    try:
        check = subprocess.run([*command, "-version"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "java -Xshare:on -version took over 60 s"
    if check.returncode == 0:
        return None
    return (
        f"java -Xshare:on exited {check.returncode}: {' '.join((check.stdout + check.stderr).split())[-500:]}"
    )


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
    jvm = session.sparkContext._jvm
    assert jvm is not None
    Path(os.environ[CLASSPATH_FILE_ENV]).write_text(str(jvm.java.lang.System.getProperty("java.class.path")))
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
