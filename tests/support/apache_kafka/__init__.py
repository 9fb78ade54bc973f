"""Apache Kafka as a test peer: one pinned release, fetched once by Maven, run as KRaft nodes on loopback.

The release is the ``kafka.version`` of ``pom.xml`` beside this file (the one home of the version): its
``kafka_2.13``, ``kafka-tools``, ``kafka-clients`` and ``kafka-storage`` artifacts with their runtime
dependencies, plus the SLF4J binding of the Log4j 2 they bring (the release's ``libs/`` ship it; the artifacts
leave it out). No shell script of the release is used: the launcher runs the main classes that
``bin/kafka-storage.sh``, ``bin/kafka-server-start.sh`` and the tools' scripts run, with ``java -cp``.

Cache (outside the source tree): ``$PYLOG_APACHE_KAFKA_CACHE`` when set, else
``${XDG_CACHE_HOME:-~/.cache}/pylog/apache-kafka-<version>/``. ``libs/`` holds every jar; ``fetched`` holds the
SHA-256 of ``pom.xml`` once ``mvn dependency:copy-dependencies`` has finished, so a fetch cut short or a changed
pom fetches again (into an emptied ``libs/``); ``fetch.log`` is Maven's output of the last fetch. Maven's own
repository (``~/.m2``) keeps the downloads too. A fetch holds an exclusive lock on ``<cache>.lock`` so that two
test processes fetch once.

Failures: no ``java``, a Java older than 17, no ``mvn`` or a failed fetch raise :class:`PeerUnavailable` with ONE
line saying what is missing and how to fix it; the fixtures turn it into a test failure, never a skip. A node
that exits or does not answer in time raises it too, naming its log.

Nodes: :class:`KafkaNode` is one combined broker+controller (``process.roles=broker,controller``) with static
voters (``controller.quorum.voters``); :class:`KafkaCluster` is N such nodes, every one a voter. Each node gets
two free loopback ports (PLAINTEXT, CONTROLLER), a directory under the caller's ``base`` holding
``server.properties``, ``log4j2.properties``, its data (``data/``), ``server.log`` (Log4j 2 at WARN) and
``stdout.log`` (what the JVM printed). Storage is formatted with ``kafka.tools.StorageTool format`` before the
first start. A node is ready when Metadata (pylog's client) lists every broker of the cluster; starting prints
the bootstrap address and the log path to stderr. :meth:`KafkaNode.stop` sends SIGTERM (Kafka's controlled
shutdown), waits, and SIGKILLs with a message after ``STOP_TIMEOUT_S``; :meth:`KafkaCluster.stop` signals every
node at once and gives a node that outlives the quorum only ``QUORUM_LOST_GRACE_S`` (see there).
:meth:`KafkaNode.kill` is a crash (SIGKILL, no controlled shutdown), for failover tests.

Secured nodes (``KafkaCluster(..., secured=SaslSsl(...))``): the client listener is SASL_SSL instead of
PLAINTEXT (PEM key store and trust store, ``sasl.enabled.mechanisms=SCRAM-SHA-512``), brokers talk to each other
on it as the SCRAM user ``SaslSsl.admin``, the CONTROLLER listener stays PLAINTEXT on loopback (KRaft cannot
authenticate controllers with SCRAM: its credentials live in the metadata log the controllers serve), and
``StandardAuthorizer`` decides every request: ``super.users`` are the admin and ``User:ANONYMOUS`` (the
controller listener's principal); everyone else needs ACLs (``allow.everyone.if.no.acl.found`` stays false).
The SCRAM users are written into the bootstrap metadata by ``kafka-storage format --add-scram``, so they exist
before the first broker starts. With ``SaslSsl.oauth`` (a test identity provider, tests/support/oauth.py) the
SASL_SSL listener also takes OAUTHBEARER: Kafka's ``OAuthBearerValidatorCallbackHandler`` verifies tokens against
the provider's JWKS written to a file (``oauth_jwks``; the JVM property ``org.apache.kafka.sasl.oauthbearer.
allowed.urls`` names it, as Kafka 4 requires), expecting the provider's audience and issuer; the tokens' subject
:data:`OAUTH_SUBJECT` is a super user.

Threading: none of this is thread-safe; the fixtures use it from pytest's main thread.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "JVM_OPTIONS",
    "OAUTH_SUBJECT",
    "SCRAM_MECHANISM",
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "TOOLS",
    "KafkaCluster",
    "KafkaNode",
    "PeerUnavailable",
    "JavaCommand",
    "SaslSsl",
    "cache_dir",
    "ensure_fetched",
    "find_java",
    "kafka_version",
    "run_tool",
]

POM = Path(__file__).resolve().parent / "pom.xml"
#: Environment variable naming the cache directory (instead of the XDG default).
CACHE_ENV = "PYLOG_APACHE_KAFKA_CACHE"
#: Options of every JVM started here: a modest heap, the client compiler only and the serial collector (they
#: start faster and leave the 2 cores of a CI machine to the tests; the suite's Spark JVMs run the same way).
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
NODE_HEAP = ("-Xms64m", "-Xmx512m")
TOOL_HEAP = ("-Xms32m", "-Xmx256m")
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
QUORUM_LOST_GRACE_S = 5.0
FETCH_TIMEOUT_S = 1200.0

#: The command-line tools by their script's name (``bin/<name>.sh``) -> the main class that script runs in 4.x.
TOOLS: dict[str, str] = {
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-server-start": "kafka.Kafka",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
}

# Log4j 2 for the nodes: WARN and above to the node's server.log. For the tools: WARN and above to stderr, so
# their stdout is only what the tool prints.
_NODE_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
"""
_TOOL_LOG4J = """\
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
"""


#: The subject of the OAUTHBEARER tokens a secured node with ``SaslSsl.oauth`` lets do anything.
OAUTH_SUBJECT = "oauth-peer"
#: The SASL mechanism of a secured node's client listener (Kafka's name).
SCRAM_MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class SaslSsl:
    """What makes a node secured (see the module docstring): its TLS material (PEM files: ``keystore`` holds the
    key, encrypted with ``key_password`` unless that is None, and the certificate chain; ``truststore`` the CA)
    and its SCRAM-SHA-512 users, ``admin`` (the brokers' own principal, a super user) among them."""

    keystore: Path
    key_password: str | None
    truststore: Path
    users: Mapping[str, str] = field(repr=False)
    admin: str = "admin"
    #: The identity provider whose tokens the listener also takes (OAUTHBEARER), and its JWKS file.
    oauth: Any = field(default=None, repr=False, compare=False)
    oauth_jwks: Path | None = None

    def __post_init__(self) -> None:
        if self.admin not in self.users:
            raise ValueError(f"the admin user {self.admin!r} needs a password in users")

    def jaas(self, user: str) -> str:
        """``sasl.jaas.config`` of a client logging in as ``user``."""
        return (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{self.users[user]}";'
        )

    def client_properties(self, user: str) -> dict[str, str]:
        """Kafka client settings (no prefix) of ``user`` on the SASL_SSL listener."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.jaas.config": self.jaas(user),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.truststore),
        }

    def jvm_options(self) -> tuple[str, ...]:
        """Kafka 4 reads OAUTHBEARER URLs only when this JVM property lists them."""
        if self.oauth_jwks is None:
            return ()
        return (f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.oauth_jwks.as_uri()}",)

    def oauth_properties(self) -> dict[str, str]:
        if self.oauth_jwks is None:
            return {}
        from tests.support.oauth import AUDIENCE, ISSUER

        prefix = "listener.name.sasl_ssl.oauthbearer."
        return {
            "sasl.enabled.mechanisms": f"{SCRAM_MECHANISM},OAUTHBEARER",
            f"{prefix}sasl.jaas.config": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
            ),
            f"{prefix}sasl.server.callback.handler.class": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
            ),
            f"{prefix}sasl.oauthbearer.jwks.endpoint.url": self.oauth_jwks.as_uri(),
            f"{prefix}sasl.oauthbearer.expected.audience": AUDIENCE,
            f"{prefix}sasl.oauthbearer.expected.issuer": ISSUER,
        }

    def node_properties(self, port: int, controller_port: int) -> dict[str, str]:
        return {
            "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": self.jaas(self.admin),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            **({"ssl.key.password": self.key_password} if self.key_password is not None else {}),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.truststore),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{self.admin};User:ANONYMOUS"
            + (f";User:{OAUTH_SUBJECT}" if self.oauth_jwks is not None else ""),
            **self.oauth_properties(),
        }

    def format_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments creating every user's SCRAM credential."""
        out = []
        for user, password in sorted(self.users.items()):
            out += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]"]
        return out


class PeerUnavailable(Exception):
    """Apache Kafka cannot be run as a peer here; the message is one line: what and how to fix it."""


# --------------------------------------------------------------------------------------- java, maven, cache


@lru_cache(maxsize=1)
def kafka_version() -> str:
    """The pinned release: ``kafka.version`` of ``pom.xml``."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(POM).getroot().find("m:properties/m:kafka.version", ns)
    if node is None or not (node.text or "").strip():
        raise PeerUnavailable(f"{POM} has no <kafka.version> property: put the pinned release there")
    return (node.text or "").strip()


def cache_dir() -> Path:
    """Where the release's jars are kept (see the module docstring)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pylog" / f"apache-kafka-{kafka_version()}"


def find_java() -> str:
    """The ``java`` to run (``$JAVA_HOME/bin/java`` when set, else the one on PATH), checked to be 17 or newer."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={java_home} has no bin/java" if java_home else "no 'java' on PATH"
        raise PeerUnavailable(
            f"Apache Kafka {kafka_version()} as a test peer needs Java 17 or newer: {where}; install a JDK 17+ "
            "(Debian/Ubuntu: apt-get install openjdk-17-jdk-headless) or set JAVA_HOME to one"
        )
    return _checked_java(java)


@lru_cache(maxsize=8)
def _checked_java(java: str) -> str:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PeerUnavailable(
            f"{java} -version failed ({e}); install a JDK 17+ or set JAVA_HOME to one"
        ) from e
    found = re.search(r'version "([^"]+)"', out.stderr + out.stdout)
    version = found.group(1) if found else "?"
    parts = version.split(".")
    major = parts[1] if parts[0] == "1" and len(parts) > 1 else parts[0]
    if not major.isdigit() or int(major) < 17:
        raise PeerUnavailable(
            f"Apache Kafka {kafka_version()} as a test peer needs Java 17 or newer; {java} is Java '{version}': "
            "install a JDK 17+ (Debian/Ubuntu: apt-get install openjdk-17-jdk-headless) or set JAVA_HOME to one"
        )
    _JAVA_IDENTITY[java] = hashlib.sha256((java + out.stderr + out.stdout).encode()).hexdigest()[:16]
    return java


#: java path -> a digest of its path and ``-version`` output: the class-data archives of one JVM build.
_JAVA_IDENTITY: dict[str, str] = {}


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def _fetched(cache: Path) -> bool:
    stamp = cache / "fetched"
    return (
        stamp.is_file() and stamp.read_text().strip() == _pom_digest() and any((cache / "libs").glob("*.jar"))
    )


def ensure_fetched() -> Path:
    """The ``libs`` directory of the pinned release, fetching it with Maven first when the cache lacks it."""
    cache = cache_dir()
    if _fetched(cache):
        return cache / "libs"
    version = kafka_version()
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PeerUnavailable(
            f"Apache Kafka {version} is not in {cache} and fetching it needs Maven: no 'mvn' on PATH; install "
            "Maven 3.6+ (Debian/Ubuntu: apt-get install maven), or set "
            f"{CACHE_ENV} to a directory holding the release's jars in libs/"
        )
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / f"{cache.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be fetching: wait for it, then reuse
        if _fetched(cache):
            return cache / "libs"
        shutil.rmtree(cache / "libs", ignore_errors=True)
        (cache / "fetched").unlink(missing_ok=True)
        log = cache / "fetch.log"
        command = [
            mvn,
            "-B",
            "--no-transfer-progress",
            "-f",
            str(POM),
            f"-Dpylog.kafka.cache={cache}",
            "dependency:copy-dependencies",
        ]
        print(f"fetching Apache Kafka {version} with Maven into {cache} (once)", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            with open(log, "w") as out:
                code = subprocess.run(
                    command, stdout=out, stderr=subprocess.STDOUT, timeout=FETCH_TIMEOUT_S, cwd=cache
                ).returncode
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(
                f"fetching Apache Kafka {version} with Maven took over {FETCH_TIMEOUT_S:.0f} s and was stopped; "
                f"check that Maven reaches its repository (~/.m2/settings.xml, the network), see {log}"
            ) from None
        if code != 0:
            raise PeerUnavailable(
                f"fetching Apache Kafka {version} with Maven failed (exit {code}): {_first_error(log)}; check that "
                f"Maven reaches its repository (~/.m2/settings.xml, the network) and rerun; full output in {log}"
            )
        (cache / "fetched").write_text(_pom_digest() + "\n")
        jars = list((cache / "libs").glob("*.jar"))
        size = sum(j.stat().st_size for j in jars)
        print(
            f"fetched Apache Kafka {version}: {len(jars)} jars, {size / 2**20:.0f} MiB in "
            f"{time.monotonic() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    return cache / "libs"


def _first_error(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    errors = [line.removeprefix("[ERROR]").strip() for line in lines if line.startswith("[ERROR]")]
    errors = [e for e in errors if e and not e.startswith(("->", "Re-run", "To see", "For more", "[Help"))]
    return (errors or [line for line in lines if line] or ["no output"])[0]


class JavaCommand:
    """``java ... -cp <libs>/*[:CLASSPATH] MAIN ARGS`` for the pinned release (fetched first when needed), with a
    class-data sharing archive of ``MAIN`` (and of ``classpath``: jars that must not change once archived, e.g.
    named by their content's hash).

    CDS: the first run of a main class (per Java build and fetched release) dumps the classes it loaded into
    ``<cache>/cds/<java>/<MAIN>.jsa`` when it exits (``-XX:ArchiveClassesAtExit``, to a name of its own, moved
    into place by :meth:`publish_archive`); later runs map that archive and start about 1 s faster (measured:
    kafka-topics --describe 0.9 s instead of 1.7 s). An archive the JVM cannot use only costs that second (CDS's
    own messages are off). Other JVM warnings go to stderr (``-Xlog``), never into a tool's stdout.
    """

    def __init__(
        self,
        main_class: str,
        args: Sequence[str],
        *,
        heap: Sequence[str],
        log4j: Path,
        classpath: Sequence[Path] = (),
    ) -> None:
        java = find_java()
        libs = ensure_fetched()
        archives = libs.parent / "cds" / _JAVA_IDENTITY.get(java, "unknown")
        # Jars after the release's (``classpath``): the archive is one of that classpath too (CDS refuses an
        # archive dumped with another one), so its name carries their digest.
        extra = hashlib.sha256("\0".join(map(str, classpath)).encode()).hexdigest()[:12] if classpath else ""
        self.archive = archives / (f"{main_class}.{extra}.jsa" if extra else f"{main_class}.jsa")
        self.dumping: Path | None = None
        if self.archive.is_file():
            cds = [f"-XX:SharedArchiveFile={self.archive}"]
        else:
            archives.mkdir(parents=True, exist_ok=True)
            self.dumping = archives / f"{main_class}.{os.getpid()}.{uuid.uuid4().hex[:6]}.jsa.tmp"
            cds = [f"-XX:ArchiveClassesAtExit={self.dumping}"]
        self.argv = [
            java,
            "-Xlog:disable",
            "-Xlog:all=warning:stderr",
            "-Xlog:cds*=off:stderr",  # a dump lists hundreds of classes it skips; an unusable archive is only slower
            *cds,
            *heap,
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            os.pathsep.join([str(libs / "*"), *map(str, classpath)]),
            main_class,
            *args,
        ]

    def publish_archive(self) -> None:
        """After the JVM exited: move the archive it dumped (if any) into place."""
        if self.dumping is not None:
            with contextlib.suppress(OSError):
                if self.dumping.is_file() and self.dumping.stat().st_size > 0:
                    os.replace(self.dumping, self.archive)
                else:
                    self.dumping.unlink(missing_ok=True)
            self.dumping = None


def _tool_log4j() -> Path:
    path = cache_dir() / "tools-log4j2.properties"
    if not path.is_file() or path.read_text() != _TOOL_LOG4J:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_TOOL_LOG4J)
    return path


def run_tool(
    tool: str,
    *args: str,
    input: str | None = None,
    timeout: float = 120.0,
    check: bool = True,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka command-line tool (a :data:`TOOLS` name such as ``kafka-topics``, or a main class) with the
    release's classpath; its logging (WARN+) goes to stderr. With ``check``, a non-zero exit raises
    AssertionError with the command and the end of its output."""
    main_class = TOOLS.get(tool, tool)
    command = JavaCommand(main_class, args, heap=TOOL_HEAP, log4j=_tool_log4j())
    done = subprocess.run(
        command.argv,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env} if env else None,
        stdin=None if input is not None else subprocess.DEVNULL,
    )
    command.publish_archive()
    if check and done.returncode != 0:
        raise AssertionError(
            f"{tool} {' '.join(args)} exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}"
            f"\n--- stderr\n{done.stderr[-4000:]}"
        )
    return done


# ----------------------------------------------------------------------------------------------------- nodes


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (all held open together while they are picked)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def _cluster_id() -> str:
    """A random cluster id as Kafka's ``Uuid.randomUuid().toString()`` makes one (URL-safe base64, no padding,
    not starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaNode:
    """One Apache Kafka KRaft node (broker and controller in one JVM); see the module docstring.

    Built by :class:`KafkaCluster`, which allocates the ports and the cluster id."""

    def __init__(
        self,
        node_id: int,
        directory: Path,
        port: int,
        controller_port: int,
        voters: str,
        cluster_id: str,
        props: Mapping[str, str],
        secured: SaslSsl | None = None,
    ) -> None:
        self.node_id = node_id
        self.secured = secured
        self.directory = directory
        self.port = port
        self.controller_port = controller_port
        self.cluster_id = cluster_id
        self.log_path = directory / "server.log"
        self.stdout_path = directory / "stdout.log"
        self.data_dir = directory / "data"
        self.properties = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            # A first consumer group should not wait 3 s for more members.
            "group.initial.rebalance.delay.ms": "0",
            **(secured.node_properties(port, controller_port) if secured else {}),
            **props,
        }
        self._process: subprocess.Popen[bytes] | None = None
        self._command: JavaCommand | None = None
        #: After a stop: the JVM's exit status (143 after SIGTERM), whether it had to be SIGKILLed, and why.
        self.exit_code: int | None = None
        self.killed = False
        self.killed_why: str | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def write_config(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        lines = [f"{k}={v}" for k, v in self.properties.items()]
        (self.directory / "server.properties").write_text("\n".join(lines) + "\n")
        (self.directory / "log4j2.properties").write_text(_NODE_LOG4J.format(log=self.log_path))

    def format_command(self) -> JavaCommand:
        """``kafka-storage format`` of this node's data directory with the cluster id (static voters)."""
        return JavaCommand(
            TOOLS["kafka-storage"],
            [
                "format",
                "--cluster-id",
                self.cluster_id,
                "--config",
                str(self.directory / "server.properties"),
                *(self.secured.format_arguments() if self.secured else []),
            ],
            heap=(*TOOL_HEAP, *(self.secured.jvm_options() if self.secured else ())),
            log4j=self.directory / "log4j2.properties",
        )

    def launch(self) -> None:
        """Start the JVM (the storage must be formatted); returns at once, see :meth:`KafkaCluster.wait_ready`."""
        if self.running:
            raise RuntimeError(f"Apache Kafka node {self.node_id} is already running")
        self._command = JavaCommand(
            TOOLS["kafka-server-start"],
            [str(self.directory / "server.properties")],
            heap=(*NODE_HEAP, *(self.secured.jvm_options() if self.secured else ())),
            log4j=self.directory / "log4j2.properties",
        )
        with open(self.stdout_path, "ab") as out:
            self._process = subprocess.Popen(
                self._command.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        print(
            f"Apache Kafka {kafka_version()} node {self.node_id}: {self.bootstrap} (pid {self._process.pid}), "
            f"log {self.log_path}",
            file=sys.stderr,
            flush=True,
        )

    def signal_stop(self) -> None:
        if self.running:
            assert self._process is not None
            self._process.send_signal(signal.SIGTERM)

    def wait_stopped(self, deadline: float, why: str | None = None) -> None:
        """Wait for the JVM to exit until ``deadline`` (monotonic), then SIGKILL it, saying so (and ``why``)."""
        process = self._process
        if process is None:
            return
        self.killed, self.killed_why = False, None
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.killed, self.killed_why = True, why or "timeout"
            print(
                f"Apache Kafka node {self.node_id} ({self.bootstrap}) did not stop after SIGTERM"
                f" ({why or f'within {STOP_TIMEOUT_S:.0f} s'}): killed (log {self.log_path})",
                file=sys.stderr,
                flush=True,
            )
            process.kill()
            process.wait(timeout=30)
        self.exit_code = process.returncode
        self._process = None
        if self._command is not None:
            self._command.publish_archive()

    def kill(self) -> None:
        """SIGKILL the JVM at once (a crash: no controlled shutdown) and wait for it to exit."""
        process = self._process
        if process is None:
            return
        process.kill()
        process.wait(timeout=30)
        self.exit_code, self.killed, self.killed_why = process.returncode, True, "killed by the test"
        self._process = None

    def stop(self) -> None:
        """SIGTERM (Kafka's controlled shutdown), wait up to ``STOP_TIMEOUT_S``, then SIGKILL with a message."""
        self.signal_stop()
        self.wait_stopped(time.monotonic() + STOP_TIMEOUT_S)

    def failure(self, what: str) -> PeerUnavailable:
        """An error naming this node, ``what`` happened, its last logged error and where its logs are."""
        last = ""
        for path in (self.log_path, self.stdout_path):
            if path.is_file():
                lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
                errors = [line for line in lines if " ERROR " in line or "Exception" in line]
                if errors or lines:
                    last = (errors or lines)[-1].strip()
                    break
        return PeerUnavailable(
            f"Apache Kafka {kafka_version()} node {self.node_id} ({self.bootstrap}) {what}"
            + (f"; last logged: {last[:300]}" if last else "")
            + f"; logs: {self.log_path}, {self.stdout_path}"
        )


class KafkaCluster:
    """``size`` Apache Kafka KRaft nodes on loopback (every node a broker and a voter), under ``base``.

    ``props`` are added to (and override) every node's ``server.properties``; ``secured`` makes every node a
    secured one (see the module docstring). Use as a context manager, or call :meth:`start` and :meth:`stop`."""

    def __init__(
        self,
        base: Path,
        size: int = 1,
        props: Mapping[str, str] | None = None,
        secured: SaslSsl | None = None,
    ) -> None:
        self.secured = secured
        if size < 1:
            raise ValueError(f"a cluster has at least one node, not {size}")
        # The internal topics' replication as Kafka's own single-node config/server.properties sets it, and
        # fewer partitions for them than Kafka's 50: a first group or transaction then starts in well under a
        # second on a loaded 2-core machine. ``props`` can set any of these back.
        props = {
            "offsets.topic.replication.factor": str(min(3, size)),
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": str(min(3, size)),
            "transaction.state.log.min.isr": str(min(2, size)),
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": str(min(3, size)),
            "share.coordinator.state.topic.min.isr": str(min(2, size)),
            **(props or {}),
        }
        ports = _free_ports(2 * size)
        self.cluster_id = _cluster_id()
        voters = ",".join(f"{n + 1}@127.0.0.1:{ports[2 * n + 1]}" for n in range(size))
        self.nodes = [
            KafkaNode(
                n + 1,
                base / f"node{n + 1}",
                ports[2 * n],
                ports[2 * n + 1],
                voters,
                self.cluster_id,
                props,
                secured,
            )
            for n in range(size)
        ]

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> KafkaCluster:
        """Format every node's storage (the first time), start the JVMs and wait until all brokers answer."""
        for node in self.nodes:
            node.write_config()
        self._format()
        for node in self.nodes:
            node.launch()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _format(self) -> None:
        pending = [node for node in self.nodes if not (node.data_dir / "meta.properties").is_file()]
        commands = [(node, node.format_command()) for node in pending]
        running = [
            (
                node,
                command,
                subprocess.Popen(command.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
            )
            for node, command in commands
        ]
        for node, command, process in running:
            out, _ = process.communicate(timeout=120)
            command.publish_archive()
            if process.returncode != 0:
                tail = (out or "").strip().splitlines()[-1:] or ["no output"]
                raise PeerUnavailable(
                    f"kafka-storage format of Apache Kafka node {node.node_id} failed (exit {process.returncode}): "
                    f"{tail[0][:300]}; config {node.directory / 'server.properties'}"
                )

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until Metadata through every node lists all the cluster's brokers; a node that exits meanwhile fails."""
        from broker_runtime.client import KafkaClient
        from broker_runtime.security.client_security import ClientSecurity

        security = (
            ClientSecurity.from_properties(self.secured.client_properties(self.secured.admin))
            if self.secured
            else None
        )
        deadline = time.monotonic() + timeout
        waiting = list(self.nodes)
        while waiting:
            node = waiting[0]
            if not node.running:
                raise node.failure("exited while starting")
            try:
                with KafkaClient(
                    node.bootstrap, request_timeout_ms=2000, retries=0, security=security
                ) as client:
                    brokers = client.metadata().brokers
                if len(brokers) == len(self.nodes):
                    waiting.pop(0)
                    continue
            except Exception:  # not listening yet, or not yet a registered broker
                pass
            if time.monotonic() > deadline:
                raise node.failure(
                    f"did not answer Metadata with all {len(self.nodes)} brokers within {timeout:.0f} s"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop every node at once: SIGTERM to all, so that every broker asks for its controlled shutdown while
        the controller quorum still stands; SIGKILL with a message after ``STOP_TIMEOUT_S``.

        A node still running once a majority of the voters has exited cannot finish a controlled shutdown (its
        broker waits for a quorum that is gone, up to Kafka's 5 minutes): it gets ``QUORUM_LOST_GRACE_S`` more,
        then SIGKILL, with a message saying so."""
        for node in self.nodes:
            node.signal_stop()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        majority = len(self.nodes) // 2 + 1
        while time.monotonic() < deadline:
            alive = [node for node in self.nodes if node.running]
            if not alive:
                break
            if len(self.nodes) - len(alive) >= majority:
                why = f"{len(self.nodes) - len(alive)} of the {len(self.nodes)} voters had stopped: no quorum left"
                for node in alive:
                    node.wait_stopped(min(deadline, time.monotonic() + QUORUM_LOST_GRACE_S), why)
                break
            time.sleep(0.05)
        for node in self.nodes:
            node.wait_stopped(deadline)


@contextlib.contextmanager
def started(base: Path, size: int = 1, props: Mapping[str, str] | None = None) -> Iterator[KafkaCluster]:
    """A started :class:`KafkaCluster` of ``size`` nodes, stopped on exit."""
    with KafkaCluster(base, size, props) as cluster:
        yield cluster
