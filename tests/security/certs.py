"""Test certificates made on the fly with ``cryptography``: a CA, a server certificate for 127.0.0.1/localhost
and a client certificate, written as PEM files (key + chain in one file, as ``ssl.keystore.location`` takes)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path  # CA certificate (PEM)
    server: Path  # server key + certificate (PEM)
    server_key: Path  # server key alone (encrypted with ``key_password``)
    server_cert: Path  # server certificate alone
    client: Path  # client key + certificate (PEM), subject CN=alice,O=pylog
    client_key: Path  # client key alone (unencrypted)
    client_cert: Path  # client certificate alone
    ca_key: Path  # CA key (unencrypted): signs a renewed server certificate (``renew_server``)
    key_password: str


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pylog"), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )


def issue_certificate(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    """A certificate for ``subject``'s ``key``, signed by ``issuer_key``, valid from 5 minutes ago for 2 days."""
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _server_cert(
    key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, ca_key: ec.EllipticCurvePrivateKey
) -> x509.Certificate:
    sans: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    return issue_certificate(_name("localhost"), key, ca_name, ca_key, ca=False, sans=sans)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    algo: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, algo)


def renew_server(pki: Pki, path: Path, key_password: str) -> int:
    """Write a renewed server key + certificate (same subject and names, a new key and serial, signed by the same
    CA) to ``path``, as ``ssl.keystore.location`` takes it; returns the new certificate's serial number."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_cert = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _server_cert(key, ca_cert.subject, ca_key)
    pem = serialization.Encoding.PEM
    path.write_bytes(_key_pem(key, key_password) + cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    return cert.serial_number


def make_pki(directory: Path, key_password: str = "keypass") -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("pylog test CA")
    ca_cert = issue_certificate(ca_name, ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _server_cert(server_key, ca_name, ca_key)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = issue_certificate(_name("alice"), client_key, ca_name, ca_key, ca=False)
    pem = serialization.Encoding.PEM

    def key_bytes(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
        algo: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(password.encode())
            if password
            else serialization.NoEncryption()
        )
        return key.private_bytes(pem, serialization.PrivateFormat.PKCS8, algo)

    paths = {
        "ca": ca_cert.public_bytes(pem),
        "server": key_bytes(server_key, key_password)
        + server_cert.public_bytes(pem)
        + ca_cert.public_bytes(pem),
        "server_key": key_bytes(server_key, key_password),
        "server_cert": server_cert.public_bytes(pem),
        "client": key_bytes(client_key, None) + client_cert.public_bytes(pem),
        "client_key": key_bytes(client_key, None),
        "client_cert": client_cert.public_bytes(pem),
        "ca_key": key_bytes(ca_key, None),
    }
    out: dict[str, Path] = {}
    for name, data in paths.items():
        path = directory / f"{name}.pem"
        path.write_bytes(data)
        out[name] = path
    return Pki(key_password=key_password, **out)
