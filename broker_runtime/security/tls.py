"""Kafka's ``ssl.*`` settings turned into :class:`ssl.SSLContext` objects, for both sides.

Settings read (Kafka's names; a broker may prefix each with ``listener.name.<listener>.``, which wins):

* ``ssl.keystore.type`` = JKS | PKCS12 | PEM; ``ssl.keystore.location``: the store file. JKS and PKCS12 stores
  (:mod:`.keystores`; Java reads a file of either format under either type, and so does pylog) need
  ``ssl.keystore.password``; their key is recovered with ``ssl.key.password``, else the store password. A PEM
  file holds the private key and the certificate chain (``ssl.key.password``, else ``ssl.keystore.password``,
  decrypts the key); or inline ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain`` (PEM text, type PEM).
  Without a type the file's own format decides (Kafka's default type, JKS, reads JKS and PKCS12 files; a PEM
  file is read as PEM, as pylog always did);
* ``ssl.truststore.type`` = JKS | PKCS12 | PEM; ``ssl.truststore.location`` (a store of CA certificates;
  ``ssl.truststore.password`` optional, see :mod:`.keystores`) or inline ``ssl.truststore.certificates`` (PEM);
  without either the system's default CAs are trusted;
* server: ``ssl.client.auth`` = none | requested | required (``CERT_NONE`` / ``CERT_OPTIONAL`` /
  ``CERT_REQUIRED``);
* client: ``ssl.endpoint.identification.algorithm`` = https (the default: the broker's certificate must name
  the host connected to) or empty (the chain is still verified, the host name is not).

Every problem is a :class:`~broker_runtime.errors.ConfigError` naming the key and the file. Python's ssl module
loads keys from files only: a key read from a JKS/PKCS12 store is written, encrypted with a one-time password, to
a private (0600) temporary file while ``load_cert_chain`` reads it; inline PEM keys likewise, as given; both are
deleted at once. Contexts are built once and shared; ``ssl.SSLContext`` is thread-safe for wrapping sockets.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import ssl
import tempfile
from collections.abc import Iterator, Mapping

from broker_runtime.errors import ConfigError
from broker_runtime.security.keystores import (
    STORE_TYPES,
    KeyEntry,
    file_format,
    read_key_store,
    read_trust_store,
)

__all__ = ["CLIENT_AUTH", "SSL_KEYS", "client_context", "peer_principal", "server_context", "ssl_setting"]

#: ``ssl.client.auth`` values and the ssl module's verify modes.
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}

#: The ``ssl.*`` names this module interprets.
SSL_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.truststore.password",
    "ssl.client.auth",
    "ssl.endpoint.identification.algorithm",
)


def ssl_setting(props: Mapping[str, str], key: str, listener: str | None = None) -> tuple[str, str | None]:
    """``(name as found, value)`` of ``key``: ``listener.name.<listener lower>.<key>`` first, then ``key``."""
    if listener is not None:
        scoped = f"listener.name.{listener.lower()}.{key}"
        if scoped in props:
            return scoped, props[scoped]
    return key, props.get(key)


def _get(props: Mapping[str, str], key: str, listener: str | None) -> tuple[str, str]:
    name, value = ssl_setting(props, key, listener)
    return name, (value or "").strip()


def _store_format(props: Mapping[str, str], kind: str, location: str, listener: str | None) -> str:
    """The format of the ``kind`` ("keystore", "truststore") file at ``location`` -- PEM, JKS or PKCS12 -- checked
    against ``ssl.<kind>.type`` (unset: the file's own format)."""
    type_name, declared = _declared_type(props, kind, listener)
    loc_name = _get(props, f"ssl.{kind}.location", listener)[0]
    if not os.path.isfile(location):
        what = "key store (its private key and certificate chain)" if kind == "keystore" else "trust store"
        raise ConfigError(f"{loc_name}={location!r}: no such file (the {what}: JKS, PKCS12 or PEM)")
    try:
        found = file_format(location)
    except OSError as exc:
        raise ConfigError(f"{loc_name}={location!r}: cannot read it: {exc.strerror}") from None
    if found in ("JCEKS", "unknown"):
        raise ConfigError(
            f"{loc_name}={location!r}: {'a JCEKS store' if found == 'JCEKS' else 'not a JKS, PKCS12 or PEM file'}; "
            "pylog reads JKS, PKCS12 and PEM stores (keytool -importkeystore -srckeystore <store> -destkeystore "
            "<store.p12> -deststoretype PKCS12)"
        )
    # Java (keystore.type.compat, on since JDK 9) reads a JKS or a PKCS12 file under either type; PEM is Kafka's.
    if declared == "PEM" and found != "PEM":
        raise ConfigError(f"{loc_name}={location!r} is a {found} store, not PEM: set {type_name}={found}")
    if declared in ("JKS", "PKCS12") and found == "PEM":
        raise ConfigError(
            f"{loc_name}={location!r} is a PEM file, not a {declared} store: set {type_name}=PEM"
        )
    return found


def _declared_type(props: Mapping[str, str], kind: str, listener: str | None) -> tuple[str, str]:
    """``(name as found, value upper-cased)`` of ``ssl.<kind>.type``, one of :data:`STORE_TYPES` or empty."""
    type_name, declared = _get(props, f"ssl.{kind}.type", listener)
    if declared and declared.upper() not in STORE_TYPES:
        raise ConfigError(
            f"{type_name}={declared!r}: expected one of {', '.join(STORE_TYPES)} (convert other stores to PKCS12: "
            "keytool -importkeystore -srckeystore <store> -destkeystore <store.p12> -deststoretype PKCS12)"
        )
    return type_name, declared.upper()


def _no_inline_with(
    props: Mapping[str, str], kind: str, inline: tuple[str, ...], listener: str | None
) -> None:
    """Kafka's rule: inline PEM (``ssl.keystore.key`` ...) only with the type PEM (or, here, no type)."""
    type_name, declared = _declared_type(props, kind, listener)
    for key in inline:
        name, value = _get(props, key, listener)
        if value and declared not in ("", "PEM"):
            raise ConfigError(f"{name} is inline PEM, but {type_name}={declared}: set {type_name}=PEM")


@contextlib.contextmanager
def _pem_file(text: str | bytes) -> Iterator[str]:
    fd, path = tempfile.mkstemp(prefix="pylog-pem-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode() if isinstance(text, str) else text)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _load_key_entry(ctx: ssl.SSLContext, entry: KeyEntry) -> None:
    """``ctx.load_cert_chain`` of a key read from a JKS/PKCS12 store. Python's ssl loads keys from files only: the
    file holds the key encrypted with a one-time password (never the clear key), exists while it is read, 0600."""
    from cryptography.hazmat.primitives import serialization  # only for a key read from a store

    one_time = secrets.token_urlsafe(24)
    pem = serialization.Encoding.PEM
    text = entry.key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(one_time.encode())
    ) + b"".join(cert.public_bytes(pem) for cert in entry.chain)
    with _pem_file(text) as path:
        ctx.load_cert_chain(path, password=one_time)


def _load_keystore(
    ctx: ssl.SSLContext, props: Mapping[str, str], listener: str | None, *, required: bool
) -> bool:
    loc_name, location = _get(props, "ssl.keystore.location", listener)
    key_name, key_text = _get(props, "ssl.keystore.key", listener)
    chain_name, chain_text = _get(props, "ssl.keystore.certificate.chain", listener)
    _no_inline_with(props, "keystore", ("ssl.keystore.key", "ssl.keystore.certificate.chain"), listener)
    key_pw_name, key_password = _get(props, "ssl.key.password", listener)
    store_pw_name, store_password = _get(props, "ssl.keystore.password", listener)
    if location and _store_format(props, "keystore", location, listener) != "PEM":
        if not store_password:
            raise ConfigError(
                f"{store_pw_name} is not set: the key store {loc_name}={location!r} needs its store password "
                "(Kafka's rule)"
            )
        fmt = file_format(location)
        entry = read_key_store(
            location, fmt, store_password, key_password or None, lambda k: ssl_setting(props, k, listener)[0]
        )
        try:
            _load_key_entry(ctx, entry)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(
                f"{loc_name}={location!r}: the key and chain of this {fmt} store: {exc}"
            ) from None
        return True
    pw = key_password or store_password or None
    if location:
        try:
            ctx.load_cert_chain(location, password=pw)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"{loc_name}={location!r}: cannot load a PEM key and certificate chain from it "
                f"(wrong {key_pw_name}?): {exc}"
            ) from None
        return True
    if key_text or chain_text:
        if not (key_text and chain_text):
            missing = chain_name if key_text else key_name
            raise ConfigError(f"{missing} is missing: inline PEM key stores need both the key and the chain")
        with _pem_file(chain_text) as chain_path, _pem_file(key_text) as key_path:
            try:
                ctx.load_cert_chain(chain_path, key_path, password=pw)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(
                    f"{key_name}/{chain_name}: cannot load the inline PEM key and chain (wrong ssl.key.password?): "
                    f"{exc}"
                ) from None
        return True
    if required:
        raise ConfigError(
            f"{loc_name} is not set: listener {listener} of listeners uses TLS and needs a key store "
            "(ssl.keystore.location: JKS, PKCS12 or PEM; or ssl.keystore.key with ssl.keystore.certificate.chain)"
        )
    return False


def _load_truststore(ctx: ssl.SSLContext, props: Mapping[str, str], listener: str | None) -> bool:
    loc_name, location = _get(props, "ssl.truststore.location", listener)
    certs_name, certs = _get(props, "ssl.truststore.certificates", listener)
    _no_inline_with(props, "truststore", ("ssl.truststore.certificates",), listener)
    fmt = _store_format(props, "truststore", location, listener) if location else "PEM"
    pw_name, pw = _get(props, "ssl.truststore.password", listener)
    if fmt == "PEM" and pw and (location or certs):
        # Kafka's clients and brokers refuse this too: a PEM trust store has no password, and accepting one would
        # let a user believe a JKS/PKCS12 store (or its integrity check) is in force.
        raise ConfigError(
            f"{pw_name} is set but the trust store is PEM ({loc_name if location else certs_name}), which has no "
            "password: remove the password, or point ssl.truststore.location at a JKS or PKCS12 store"
        )
    try:
        if location and fmt != "PEM":
            _, password = _get(props, "ssl.truststore.password", listener)
            trusted = read_trust_store(
                location, fmt, password or None, lambda k: ssl_setting(props, k, listener)[0]
            )
            from cryptography.hazmat.primitives import serialization

            pem = serialization.Encoding.PEM
            ctx.load_verify_locations(cadata="".join(c.public_bytes(pem).decode() for c in trusted))
            return True
        if location:
            ctx.load_verify_locations(cafile=location)
            return True
        if certs:
            ctx.load_verify_locations(cadata=certs)
            return True
    except ssl.SSLError as exc:
        name = loc_name if location else certs_name
        raise ConfigError(f"{name}: cannot load {fmt} CA certificates: {exc}") from None
    return False


def server_context(props: Mapping[str, str], listener: str) -> ssl.SSLContext:
    """The TLS context of a broker listener (its key store, trust store and ``ssl.client.auth``)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_keystore(ctx, props, listener, required=True)
    auth_name, auth = _get(props, "ssl.client.auth", listener)
    auth = auth.lower() or "none"
    if auth not in CLIENT_AUTH:
        raise ConfigError(f"{auth_name}={auth!r}: expected one of {', '.join(CLIENT_AUTH)}")
    ctx.verify_mode = CLIENT_AUTH[auth]
    if not _load_truststore(ctx, props, listener) and auth != "none":
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """The TLS context of a client (trust store, optional key store, ``ssl.endpoint.identification.algorithm``)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    algo_name, algo = _get(props, "ssl.endpoint.identification.algorithm", None)
    if algo_name not in props:
        algo = "https"
    if algo.lower() not in ("https", ""):
        raise ConfigError(f"{algo_name}={algo!r}: expected https (verify the host name) or empty (do not)")
    ctx.check_hostname = algo.lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not _load_truststore(ctx, props, None):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    _load_keystore(ctx, props, None, required=False)
    return ctx


def peer_principal(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """``User:<DN>`` of a verified client certificate (RFC 2253 order, as Kafka's default principal builder), or
    None when the peer sent none."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    rdns = cert.get("subject", ())
    parts = [
        "+".join(f"{_short(k)}={_escape(v)}" for k, v in rdn)  # type: ignore[misc]
        for rdn in reversed(rdns)  # type: ignore[arg-type]
    ]
    return "User:" + ",".join(parts)


_SHORT = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _short(name: str) -> str:
    return _SHORT.get(name, name)


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out
