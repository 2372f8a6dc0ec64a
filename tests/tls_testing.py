"""TLS material for tests and benches of the TCP listener, made with `cryptography` (installed
with asyncssh, a dependency of the slurm and lsf extras): a CA and a server certificate for
127.0.0.1 and localhost, a client CA with a client certificate, and a self-signed stranger."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Pair:
    cert: Path
    key: Path


def _name(cn: str) -> Any:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _issue(
    folder: Path,
    stem: str,
    cn: str,
    issuer: tuple[Any, Any] | None,
    *,
    ca: bool = False,
    server: bool = False,
) -> tuple[Pair, Any, Any]:
    """A certificate for `cn`, signed by `issuer` (cert, key), or self-signed; written as
    STEM.pem and STEM.key (0600)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer[0].subject if issuer else _name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    pair = Pair(folder / f"{stem}.pem", folder / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pair.key.chmod(0o600)
    return pair, cert, key


@dataclass
class Pki:
    ca: Path  # the server's CA
    server: Pair
    client_ca: Path  # the CA a --client-ca daemon trusts
    client: Pair  # signed by client_ca
    stranger: Pair  # self-signed: no daemon trusts it


def make_pki(folder: Path) -> Pki:
    """Every certificate a TCP test needs, written into `folder` (keys 0600)."""
    ca, ca_cert, ca_key = _issue(folder, "ca", "txd test CA", None, ca=True)
    server, _, _ = _issue(folder, "server", "localhost", (ca_cert, ca_key), server=True)
    cca, cca_cert, cca_key = _issue(folder, "client-ca", "txd client CA", None, ca=True)
    client, _, _ = _issue(folder, "client", "ci", (cca_cert, cca_key))
    stranger, _, _ = _issue(folder, "stranger", "ci", None)
    return Pki(ca.cert, server, cca.cert, client, stranger)
