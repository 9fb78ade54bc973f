"""Kafka's file-based key and trust stores of type JKS and PKCS12, read into a private key, its certificate chain
and trusted certificates for :mod:`.tls` (which turns them into an :class:`ssl.SSLContext`).

Formats (told by the file's first bytes, whatever the type says, as Java does with ``keystore.type.compat=true``,
its default since JDK 9: a store of type JKS or PKCS12 may be a file of either format):

* **PKCS12** (RFC 7292; a DER ``SEQUENCE``): read by ``cryptography``'s ``pkcs12.load_pkcs12``.
* **JKS** (Java's own format, magic ``FE ED FE ED``): converted by the Java runtime's ``keytool -importkeystore``
  into a PKCS12 file under a fresh ``0700`` temporary directory, protected by a random one-time password, then
  read as above and deleted at once. Passwords reach ``keytool`` through its environment (``-srcstorepass:env``)
  and its standard input (a key password differing from the store's), never its command line, which other local
  users can read. Why not a Python reader: the one on PyPI (pyjks) has had no release since 2020 and drags in
  unmaintained native code; JKS's key protection is a proprietary XOR-with-SHA-1 scheme and its integrity check a
  SHA-1 digest keyed with the password, which only the JDK has a reason to keep implementing correctly. Java is
  present wherever Spark runs (driver and executors); ``keytool`` is looked for in ``$JAVA_HOME/bin``, on
  ``PATH``, then beside ``java``. Each conversion starts one JVM (~0.5 s); a store is converted once per process
  (cached by path, size, modification time and passwords).
* JCEKS and other Java types: refused, with the ``keytool`` command that converts them to PKCS12.

Kafka's rules (``DefaultSslEngineFactory``): a key store file needs ``ssl.keystore.password``; its key is
recovered with ``ssl.key.password``, else the store password. A trust store's password is optional: without it
Java skips the integrity check and still reads the certificates stored in clear -- JKS stores them in clear, and
this module does the same (``keytool`` is not given a password). A PKCS12 trust store usually encrypts its
certificates (Java's and OpenSSL's default): without the password Java reads no certificate from it and every
handshake then fails; here that is a configuration error naming ``ssl.truststore.password`` at once.

Contents: a key store must hold a private key with its certificate (the first private key when there are several,
as Python's ssl presents one chain); its chain is that certificate plus its issuers found in the store. A trust
store's trusted certificates are every certificate in it, and there must be one at least.

Every problem is a :class:`~broker_runtime.errors.ConfigError` naming the setting (as found: listener-scoped or
not) and the fix; no message carries a password. Thread-safe (the cache is ``functools.lru_cache``).
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker_runtime.errors import ConfigError

if TYPE_CHECKING:  # cryptography is imported by the first store read, not by every broker's start
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
    from cryptography.hazmat.primitives.serialization import pkcs12

__all__ = ["STORE_TYPES", "KeyEntry", "file_format", "read_key_store", "read_trust_store"]

#: The values of ``ssl.keystore.type`` / ``ssl.truststore.type`` pylog reads (Kafka's default engine's list).
STORE_TYPES = ("JKS", "PKCS12", "PEM")

#: Names a setting as the user wrote it (e.g. ``listener.name.ssl.ssl.keystore.password``).
Namer = Callable[[str], str]

_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JCEKS_MAGIC = b"\xce\xce\xce\xce"
_KEYTOOL_TIMEOUT_S = 60.0
#: A short-lived JVM: English messages (matched below), quick start (no C2, serial GC, no perf-data file).
KEYTOOL_JVM_OPTIONS = (
    "-J-Duser.language=en",
    "-J-XX:TieredStopAtLevel=1",
    "-J-XX:+UseSerialGC",
    "-J-XX:-UsePerfData",
)


@dataclass(frozen=True)
class KeyEntry:
    """A key store's private key and its chain (leaf first)."""

    key: PrivateKeyTypes
    chain: tuple[x509.Certificate, ...]


def file_format(path: str) -> str:
    """``PEM``, ``JKS``, ``PKCS12``, ``JCEKS`` or ``unknown``, from the first bytes of the file at ``path``."""
    with open(path, "rb") as f:
        head = f.read(64)
    if head.startswith(_JKS_MAGIC):
        return "JKS"
    if head.startswith(_JCEKS_MAGIC):
        return "JCEKS"
    if head.lstrip().startswith(b"-----BEGIN"):
        return "PEM"
    if head[:1] == b"\x30":
        return "PKCS12"
    return "unknown"


def read_key_store(path: str, fmt: str, password: str, key_password: str | None, name: Namer) -> KeyEntry:
    """The private key and chain of the JKS or PKCS12 (``fmt``, from :func:`file_format`) key store at ``path``."""
    store = _load(path, fmt, password, key_password, name, "ssl.keystore.location", "ssl.keystore.password")
    if store.key is None or store.cert is None:
        raise ConfigError(
            f"{name('ssl.keystore.location')}={path!r}: this {fmt} store holds no private key with its "
            "certificate (is it a trust store?); a key store needs one, e.g. keytool -genkeypair or "
            "openssl pkcs12 -export"
        )
    chain = [store.cert.certificate]
    others = [c.certificate for c in store.additional_certs]
    while chain[-1].issuer != chain[-1].subject and len(chain) <= len(others):
        issuer = next((c for c in others if c.subject == chain[-1].issuer and c not in chain), None)
        if issuer is None:
            break
        chain.append(issuer)
    return KeyEntry(store.key, tuple(chain))


def read_trust_store(path: str, fmt: str, password: str | None, name: Namer) -> list[x509.Certificate]:
    """Every certificate of the JKS or PKCS12 trust store at ``path`` (at least one)."""
    store = _load(path, fmt, password, None, name, "ssl.truststore.location", "ssl.truststore.password")
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.insert(0, store.cert.certificate)
    if not certs:
        raise ConfigError(
            f"{name('ssl.truststore.location')}={path!r}: this {fmt} store holds no certificate to trust; add the "
            "CA that signed the broker's certificate (keytool -importcert -alias ca -file ca.pem)"
        )
    return certs


def _load(
    path: str,
    fmt: str,
    password: str | None,
    key_password: str | None,
    name: Namer,
    loc_key: str,
    pw_key: str,
) -> pkcs12.PKCS12KeyAndCertificates:
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"{name(loc_key)}={path!r}: cannot read it: {exc.strerror}") from None
    return _load_cached(
        path, os.path.realpath(path), stat.st_size, stat.st_mtime_ns, fmt, password, key_password, name(loc_key),
        name(pw_key), name("ssl.key.password"),
    )  # fmt: skip


@functools.lru_cache(maxsize=16)
def _load_cached(
    path: str,
    real_path: str,
    size: int,
    mtime_ns: int,
    fmt: str,
    password: str | None,
    key_password: str | None,
    loc_name: str,
    pw_name: str,
    key_pw_name: str,
) -> pkcs12.PKCS12KeyAndCertificates:
    del size, mtime_ns  # the cache key only (with real_path): a changed file is read again
    from cryptography.hazmat.primitives.serialization import pkcs12

    if fmt == "JKS":
        with tempfile.TemporaryDirectory(prefix="pylog-keytool-") as tmp:
            one_time = secrets.token_urlsafe(24)
            names = (loc_name, pw_name, key_pw_name)
            out = _keytool_to_pkcs12(path, password, key_password, one_time, Path(tmp), names)
            try:
                return pkcs12.load_pkcs12(out.read_bytes(), one_time.encode())
            finally:
                out.unlink()
    data = Path(path).read_bytes()
    try:
        return pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        if password:
            raise ConfigError(
                f"{loc_name}={path!r}: cannot open this PKCS12 store with {pw_name} (wrong password, or a "
                "corrupt file)"
            ) from None
        raise ConfigError(
            f"{loc_name}={path!r}: this PKCS12 store cannot be read without a password (its integrity check or "
            f"its encrypted certificates need one, and Kafka's Java client would read no certificate from it "
            f"either): set {pw_name}"
        ) from None


def keytool() -> str | None:
    """The ``keytool`` of the Java runtime: ``$JAVA_HOME/bin/keytool``, else on ``PATH``, else beside ``java``."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = os.path.join(java_home, "bin", "keytool")
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("keytool")
    if found:
        return found
    java = shutil.which("java")
    if java:
        candidate = os.path.join(os.path.dirname(os.path.realpath(java)), "keytool")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _keytool_to_pkcs12(
    path: str,
    password: str | None,
    key_password: str | None,
    one_time: str,
    tmp: Path,
    names: tuple[str, str, str],
) -> Path:
    loc_name, pw_name, key_pw_name = names
    tool = keytool()
    if tool is None:
        raise ConfigError(
            f"{loc_name}={path!r} is a JKS store, which pylog reads through the Java runtime's keytool, and no "
            "keytool was found (set JAVA_HOME, or put keytool on PATH); or convert it once to PKCS12: keytool "
            "-importkeystore -srckeystore <store.jks> -destkeystore <store.p12> -deststoretype PKCS12"
        )
    out = tmp / "store.p12"
    env = {**os.environ, "PYLOG_KEYTOOL_DEST": one_time, "PYLOG_KEYTOOL_SRC": password or ""}
    command = [
        tool,
        *KEYTOOL_JVM_OPTIONS,
        "-importkeystore",
        "-noprompt",
        "-srckeystore",
        path,
        "-srcstoretype",
        "JKS",
        "-destkeystore",
        str(out),
        "-deststoretype",
        "PKCS12",
        "-deststorepass:env",
        "PYLOG_KEYTOOL_DEST",
    ]
    if password:
        command += ["-srcstorepass:env", "PYLOG_KEYTOOL_SRC"]
    # keytool asks for the store password on stdin when not given (an empty answer: no integrity check, as Java
    # with no trust store password), then for each key the store password does not recover.
    answers = ("" if password else "\n") + (f"{key_password}\n" * 64 if key_password else "")
    try:
        done = subprocess.run(
            command,
            input=answers,
            env=env,
            capture_output=True,
            text=True,
            timeout=_KEYTOOL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(
            f"{loc_name}={path!r}: keytool ({tool}) could not convert this JKS store: {exc}"
        ) from None
    if done.returncode == 0 and out.is_file():
        return out
    lines = [line for line in (done.stderr + "\n" + done.stdout).splitlines() if line.strip()]
    error = next((x for x in lines if x.startswith("keytool error")), lines[-1] if lines else "no output")
    if "password was incorrect" in error or "tampered" in error:
        raise ConfigError(f"{loc_name}={path!r}: {pw_name} does not open this JKS store (wrong password)")
    if (
        "Cannot recover key" in error or "Too many failures" in error
    ):  # keytool's answer to wrong key passwords
        raise ConfigError(
            f"{loc_name}={path!r}: the private key of this JKS store cannot be recovered: set {key_pw_name} to "
            "the key's password (Kafka uses the store password when it is not set)"
        )
    raise ConfigError(f"{loc_name}={path!r}: keytool cannot read it as a JKS store: {error}")
