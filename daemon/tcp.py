"""`txd --listen tcp://HOST:PORT`: an opt-in TCP listener beside the Unix socket, for clients
that cannot use SSH. It serves only over TLS (optionally requiring client certificates) and
only to calls with a live token (txd.daemon.auth): without TLS material or without a token the
daemon refuses to start. There is no insecure switch.

The certificate, key and client CAs are read again when their files change (a renewed
certificate needs no restart): gRPC asks before every new connection's handshake, and a set
that does not load (a key that does not match, a file half written) is logged and the one in
use kept. Connections already open keep theirs.
"""

from __future__ import annotations

import logging
import os
import ssl
import stat
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import grpc
from txd.daemon.auth import BearerAuth
from txd.daemon.tokens import TokenError, TokenStore

log = logging.getLogger(__name__)


class ListenError(Exception):
    """--listen cannot be served; the message names what is missing or wrong."""


@dataclass(frozen=True)
class TcpListen:
    urls: list[str]  # as given: tcp://HOST:PORT
    addresses: list[str]  # as gRPC binds them: HOST:PORT, [V6]:PORT
    cert: bytes
    key: bytes
    client_ca: bytes | None
    tokens: TokenStore
    paths: tuple[str, str, str | None]  # cert, key, client CA: read again when they change


def parse_address(url: str) -> str:
    """`tcp://HOST:PORT` -> `HOST:PORT` (`[V6]:PORT` for an IPv6 address); port 0 picks one."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise ListenError(f"--listen {url!r}: {e}") from None
    if parts.scheme != "tcp" or not parts.hostname or port is None:
        raise ListenError(f"--listen {url!r}: expected tcp://HOST:PORT, e.g. tcp://0.0.0.0:7443")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ListenError(f"--listen {url!r}: only tcp://HOST:PORT, nothing after the port")
    host = parts.hostname
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def prepare(
    urls: list[str],
    cert: str | None,
    key: str | None,
    client_ca: str | None,
    state_dir: Path,
) -> TcpListen:
    """Checks everything a TCP listener needs before the daemon starts: addresses, TLS
    material that reads, a private key only its owner can read, and a live token."""
    addresses = [parse_address(url) for url in urls]
    if not cert or not key:
        raise ListenError(
            "--listen needs TLS: give --tls-cert CERT.pem and --tls-key KEY.pem (a token must "
            "never travel in clear text)"
        )
    _check_private_key(key)
    tokens = TokenStore(state_dir)
    try:
        tokens.check_private()
        live = tokens.live()
    except TokenError as e:
        raise ListenError(str(e)) from None
    if not live:
        raise ListenError(
            f"--listen needs at least one live token in {tokens.path}: make one with "
            f"`txd token create --name NAME --state-dir {state_dir}`"
        )
    return TcpListen(
        list(urls),
        addresses,
        _read(cert, "--tls-cert"),
        _read(key, "--tls-key"),
        _read(client_ca, "--client-ca") if client_ca else None,
        tokens,
        (cert, key, client_ca),
    )


def _check_private_key(key: str) -> None:
    mode = _mode(key, "--tls-key")
    if mode & 0o077:
        raise ListenError(
            f"--tls-key {key}: other users may read it (mode {mode:04o}): chmod 600 {key}"
        )


def _mode(path: str, flag: str) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError as e:
        raise ListenError(f"{flag} {path}: {e.strerror}") from None


def _read(path: str, flag: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ListenError(f"{flag} {path}: {e.strerror}") from None
    if b"-----BEGIN " not in data:
        raise ListenError(f"{flag} {path}: not a PEM file")
    return data


def server(
    listen: TcpListen,
    options: list[tuple[str, int]],
    outer: grpc.aio.ServerInterceptor | None = None,
) -> grpc.aio.Server:
    """A server whose every call goes through the token check, after `outer` (the access log,
    which sees refused calls too); its services are added by the caller, its ports by bind()."""
    interceptors = [outer] if outer is not None else []
    return grpc.aio.server(interceptors=[*interceptors, BearerAuth(listen.tokens)], options=options)


def bind(srv: grpc.aio.Server, listen: TcpListen) -> list[str]:
    """Adds the TLS ports; returns them as tcp://HOST:PORT with the ports bound (port 0 asks
    the system for one)."""
    certs = Certificates(listen)
    credentials = grpc.dynamic_ssl_server_credentials(
        certs.configuration(listen.cert, listen.key, listen.client_ca),
        # grpc's stubs want a configuration back; its docs (and code) take None: no change.
        typing.cast(Callable[[], grpc.ServerCertificateConfiguration], certs.fetch),
        require_client_authentication=listen.client_ca is not None,
    )
    bound = []
    for url, address in zip(listen.urls, listen.addresses, strict=True):
        try:
            port = srv.add_secure_port(address, credentials)
        except RuntimeError:
            port = 0  # gRPC says only "Failed to bind", its reason on stderr
        if not port:
            raise ListenError(
                f"cannot listen on {url}: the port is in use, or the address is not this host's"
            )
        bound.append(f"tcp://{address.rpartition(':')[0]}:{port}")
    return bound


class Certificates:
    """The listener's TLS files, read again when one changes (gRPC calls fetch() before each
    new connection's handshake: three stats when nothing changed)."""

    def __init__(self, listen: TcpListen) -> None:
        self.paths = listen.paths
        self.seen = self._signature()
        self.refused: tuple[object, ...] | None = None  # a changed set that did not load

    def _signature(self) -> tuple[object, ...]:
        out: list[object] = []
        for path in self.paths:
            try:
                st = os.stat(path) if path else None
            except OSError as e:
                out.append(e.errno)
            else:
                out.append(st and (st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(out)

    @staticmethod
    def configuration(
        cert: bytes, key: bytes, client_ca: bytes | None
    ) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=client_ca)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """A new configuration when the files changed and load as a matching set, else None
        (gRPC keeps the one in use). Never raises: it runs inside gRPC's handshake."""
        signature = self._signature()
        if signature in (self.seen, self.refused):
            return None
        try:
            config = self._load()
        except (ListenError, ssl.SSLError, OSError, ValueError) as e:
            self.refused = signature
            log.warning("TLS files changed but were not loaded (the ones in use are kept): %s", e)
            return None
        if self._signature() != signature:
            return None  # changed again while being read: the next connection looks again
        self.seen = signature
        log.info("TLS certificate reloaded from %s", self.paths[0])
        return config

    def _load(self) -> grpc.ServerCertificateConfiguration:
        cert_path, key_path, ca_path = self.paths
        _check_private_key(key_path)
        cert, key = _read(cert_path, "--tls-cert"), _read(key_path, "--tls-key")
        ca = _read(ca_path, "--client-ca") if ca_path else None
        # The key must match the certificate (ssl checks it); a CA file must parse.
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
        if ca is not None:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=ca.decode())
        return self.configuration(cert, key, ca)
