"""`txd --listen tcp://HOST:PORT`: an opt-in TCP listener beside the Unix socket, for clients
that cannot use SSH. It serves only over TLS (optionally requiring client certificates) and
only to calls with a live token (txd.daemon.auth): without TLS material or without a token the
daemon refuses to start. There is no insecure switch.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import grpc
from txd.daemon.auth import BearerAuth
from txd.daemon.tokens import TokenError, TokenStore


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
    mode = _mode(key, "--tls-key")
    if mode & 0o077:
        raise ListenError(
            f"--tls-key {key}: other users may read it (mode {mode:04o}): chmod 600 {key}"
        )
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
    credentials = grpc.ssl_server_credentials(
        [(listen.key, listen.cert)],
        root_certificates=listen.client_ca,
        require_client_auth=listen.client_ca is not None,
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
