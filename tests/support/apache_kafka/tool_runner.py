"""Many Apache Kafka tool runs in ONE JVM: :class:`ToolRunner` drives ``java/ToolRunner.java``.

Why: a tool in a JVM of its own costs 1.6-2.3 s here even with a class-data archive; the runner pays that once
and then runs each tool's main class in 80-270 ms (measured with kafka-topics, kafka-configs and
kafka-get-offsets against a pylog broker). What a tool prints and its exit code are what the same main class
gives in a JVM of its own (see the Java file's docstring for how ``Exit.exit`` is caught).

Build: ``javac`` of the JDK whose ``java`` the launcher found compiles the source against the release's jars
into ``<cache>/tool-runner/<digest>/tool-runner.jar`` (the digest covers the source and the Java build, so a
change rebuilds), once per machine, under a file lock. Runs map a class-data archive of their own
(``ToolRunner.jsa`` beside the jar, dumped at the first run's exit).

Protocol (the Java file's docstring): one directory per run under a temporary directory of the runner, holding
``args``, ``stdin``, ``stdout`` and ``stderr``; a run's result is a :class:`subprocess.CompletedProcess`, as
:func:`~tests.support.apache_kafka.run_tool` returns. A run that does not answer within its timeout kills the
JVM (the next run starts a new one) and fails naming the command and what it printed so far. Tools' logging
(Log4j 2, WARN and above) goes to the run's stderr.

Threading: one run at a time; a runner belongs to the thread that uses it (pytest's main thread).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import select
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

from tests.support.apache_kafka import (
    JVM_OPTIONS,
    TOOL_HEAP,
    TOOLS,
    PeerUnavailable,
    cache_dir,
    ensure_fetched,
    find_java,
)

__all__ = ["ToolRunner"]

SOURCE = Path(__file__).resolve().parent / "java" / "ToolRunner.java"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0

# Log4j 2 for the tools: WARN and above to the CURRENT System.err (``follow``: the runner swaps it per run).
_LOG4J = """\
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.follow = true
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
"""


def _built_jar(java: str, libs: Path) -> Path:
    """The runner's jar, compiled first when this source and Java build have none yet."""
    version = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    digest = hashlib.sha256(SOURCE.read_bytes() + java.encode() + version.encode()).hexdigest()[:16]
    home = cache_dir() / "tool-runner" / digest
    jar = home / "tool-runner.jar"
    if jar.is_file():
        return jar
    javac = Path(java).resolve().parent / "javac"
    if not os.access(javac, os.X_OK):
        raise PeerUnavailable(
            f"running Apache Kafka's tools in one JVM needs javac beside {java} ({javac} is missing): install "
            "a JDK 17+ rather than a JRE (Debian/Ubuntu: apt-get install openjdk-17-jdk-headless)"
        )
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jar.is_file():
            return jar
        with tempfile.TemporaryDirectory(dir=home) as classes:
            built = subprocess.run(
                [str(javac), "-nowarn", "-cp", str(libs / "*"), "-d", classes, str(SOURCE)],
                capture_output=True,
                text=True,
                timeout=180,
            )
            if built.returncode != 0:
                raise PeerUnavailable(
                    f"javac of {SOURCE.name} failed (exit {built.returncode}): "
                    + " | ".join(built.stderr.strip().splitlines()[:3])
                )
            partial = home / f"tool-runner.{os.getpid()}.jar.tmp"
            with zipfile.ZipFile(partial, "w") as out:
                for path in sorted(Path(classes).rglob("*.class")):
                    out.write(path, path.relative_to(classes).as_posix())
            os.replace(partial, jar)
    return jar


class ToolRunner:
    """A JVM running Kafka's tools on demand; :meth:`run` is :func:`~tests.support.apache_kafka.run_tool` with
    one JVM start for all runs. Call :meth:`close` at the end (the fixture does)."""

    def __init__(self) -> None:
        self._java = find_java()
        self._libs = ensure_fetched()
        self._jar = _built_jar(self._java, self._libs)
        self._work = Path(tempfile.mkdtemp(prefix="kafka-tool-runs-"))
        self._log4j = self._work / "log4j2.properties"
        self._log4j.write_text(_LOG4J)
        self._process: subprocess.Popen[bytes] | None = None
        self._runs = 0
        #: Seconds spent in runs (for a report of what the runner saved), and the JVM starts.
        self.busy_s = 0.0
        self.starts = 0

    def _start(self) -> subprocess.Popen[bytes]:
        archive = self._jar.parent / "ToolRunner.jsa"
        if archive.is_file():
            cds = [f"-XX:SharedArchiveFile={archive}"]
        else:
            cds = [f"-XX:ArchiveClassesAtExit={self._jar.parent / f'ToolRunner.{os.getpid()}.jsa.tmp'}"]
        argv = [
            self._java,
            "-Xlog:disable",
            "-Xlog:all=warning:stderr",
            "-Xlog:cds*=off:stderr",
            *cds,
            *TOOL_HEAP,
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={self._log4j}",
            "-cp",
            f"{self._jar}{os.pathsep}{self._libs / '*'}",
            "ToolRunner",
        ]
        self.starts += 1
        with open(self._work / "runner.log", "ab") as log:
            self._process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True
            )
        return self._process

    def run(
        self,
        tool: str,
        *args: str,
        input: str | None = None,
        timeout: float = 60.0,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run a tool (a :data:`~tests.support.apache_kafka.TOOLS` name or a main class) with ``args`` and
        ``input`` on its stdin; with ``check``, a non-zero exit raises AssertionError with its output."""
        main_class = TOOLS.get(tool, tool)
        if any("\n" in arg for arg in args):
            raise ValueError(
                f"an argument of {tool} holds a newline (the runner's args are one a line): {args}"
            )
        self._runs += 1
        run_dir = self._work / f"run-{self._runs}"
        run_dir.mkdir()
        (run_dir / "args").write_text("\n".join([main_class, *args]) + "\n", encoding="utf-8")
        if input is not None:
            (run_dir / "stdin").write_text(input, encoding="utf-8")
        fresh = self._process is None or self._process.poll() is not None
        process = self._start() if fresh else self._process
        assert process.stdin is not None and process.stdout is not None
        started = time.monotonic()
        process.stdin.write(f"{run_dir}\n".encode())
        process.stdin.flush()
        answer = self._read_line(process, timeout + (START_TIMEOUT_S if fresh else 0.0))
        self.busy_s += time.monotonic() - started
        out = _read(run_dir / "stdout")
        err = _read(run_dir / "stderr")
        command = f"{tool} {' '.join(args)}"
        if answer is None:
            self._kill()
            raise AssertionError(
                f"{command} did not finish within {timeout:.0f} s (its JVM was killed)\n--- stdout\n{out[-4000:]}"
                f"\n--- stderr\n{err[-4000:]}"
            )
        if not answer.startswith("exit "):
            log = _read(self._work / "runner.log")
            self._kill()
            raise AssertionError(
                f"{command}: the tool runner's JVM ended ({answer!r}); its log:\n{log[-4000:]}"
                f"\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}"
            )
        code = int(answer.split()[1])
        done = subprocess.CompletedProcess([main_class, *args], code, out, err)
        if check and code != 0:
            raise AssertionError(
                f"{command} exited {code}\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}"
            )
        return done

    @staticmethod
    def _read_line(process: subprocess.Popen[bytes], timeout: float) -> str | None:
        """The runner's next protocol line; '' when the JVM ended; None after ``timeout``."""
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], timeout)
        if not ready:
            return None
        return process.stdout.readline().decode(errors="replace").strip() or "(end of output)"

    def _kill(self) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            self._process.wait(timeout=STOP_TIMEOUT_S)
            self._process = None

    def close(self) -> None:
        """End the JVM (end of its stdin: it exits, dumping its class-data archive the first time)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            assert process.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                process.stdin.close()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT_S)
        for dumped in self._jar.parent.glob(f"ToolRunner.{os.getpid()}.jsa.tmp"):
            with contextlib.suppress(OSError):
                if dumped.stat().st_size > 0:
                    os.replace(dumped, self._jar.parent / "ToolRunner.jsa")
                else:
                    dumped.unlink()
        shutil.rmtree(self._work, ignore_errors=True)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
