"""Kafka's ``ssl.*`` settings (PEM only) turned into :class:`ssl.SSLContext` objects, for both sides.

Settings read (Kafka's names; a broker may prefix each with ``listener.name.<listener>.``, which wins):

* ``ssl.keystore.type`` = PEM (the default here; JKS and PKCS12 are refused with "use PEM");
* ``ssl.keystore.location``: a PEM file holding the private key and the certificate chain; or inline
  ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain`` (PEM text); ``ssl.key.password`` decrypts the key;
* ``ssl.truststore.type`` = PEM; ``ssl.truststore.location`` (a PEM file of CA certificates) or inline
  ``ssl.truststore.certificates``; without either the system's default CAs are trusted;
* server: ``ssl.client.auth`` = none | requested | required (``CERT_NONE`` / ``CERT_OPTIONAL`` /
  ``CERT_REQUIRED``);
* client: ``ssl.endpoint.identification.algorithm`` = https (the default: the broker's certificate must name
  the host connected to) or empty (the chain is still verified, the host name is not).

Every problem is a :class:`~broker_runtime.errors.ConfigError` naming the key and the file. Inline PEM keys are
written to a private temporary file only while ``load_cert_chain`` reads them (Python's ssl module loads keys
from files only), then deleted. Contexts are built once and shared; ``ssl.SSLContext`` is thread-safe for
wrapping sockets.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping

from broker_runtime.errors import ConfigError

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


def _check_type(props: Mapping[str, str], key: str, listener: str | None) -> None:
    name, value = _get(props, key, listener)
    if value and value.upper() != "PEM":
        raise ConfigError(
            f"{name}={value!r}: only PEM key and trust stores are supported; use PEM "
            "(convert with: openssl pkcs12 -in store.p12 -nodes, or keytool -importkeystore to PKCS12 first)"
        )


@contextlib.contextmanager
def _pem_file(text: str) -> Iterator[str]:
    fd, path = tempfile.mkstemp(prefix="pylog-pem-", suffix=".pem")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _load_keystore(
    ctx: ssl.SSLContext, props: Mapping[str, str], listener: str | None, *, required: bool
) -> bool:
    _check_type(props, "ssl.keystore.type", listener)
    loc_name, location = _get(props, "ssl.keystore.location", listener)
    key_name, key_text = _get(props, "ssl.keystore.key", listener)
    chain_name, chain_text = _get(props, "ssl.keystore.certificate.chain", listener)
    _, password = _get(props, "ssl.key.password", listener)
    if not password:
        _, password = _get(props, "ssl.keystore.password", listener)
    pw = password or None
    if location:
        if not os.path.isfile(location):
            raise ConfigError(
                f"{loc_name}={location!r}: no such file (a PEM file with the key and its certificate chain)"
            )
        try:
            ctx.load_cert_chain(location, password=pw)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"{loc_name}={location!r}: cannot load a PEM key and certificate chain from it "
                f"(wrong ssl.key.password?): {exc}"
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
            f"{loc_name} is not set: listener {listener} of listeners uses TLS and needs a PEM key store "
            "(ssl.keystore.location, or ssl.keystore.key with ssl.keystore.certificate.chain)"
        )
    return False


def _load_truststore(ctx: ssl.SSLContext, props: Mapping[str, str], listener: str | None) -> bool:
    _check_type(props, "ssl.truststore.type", listener)
    loc_name, location = _get(props, "ssl.truststore.location", listener)
    certs_name, certs = _get(props, "ssl.truststore.certificates", listener)
    try:
        if location:
            if not os.path.isfile(location):
                raise ConfigError(f"{loc_name}={location!r}: no such file (a PEM file of CA certificates)")
            ctx.load_verify_locations(cafile=location)
            return True
        if certs:
            ctx.load_verify_locations(cadata=certs)
            return True
    except ssl.SSLError as exc:
        name = loc_name if location else certs_name
        raise ConfigError(f"{name}: cannot load PEM CA certificates: {exc}") from None
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
