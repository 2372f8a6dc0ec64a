"""A channel to a txd TCP listener (`txd --listen tcp://HOST:PORT`): TLS, with the token sent as
`authorization: Bearer ...` on every call by gRPC's call credentials, which gRPC sends only over
a secure channel.

The token comes from the caller, else TXD_TOKEN, else the file named by TXD_TOKEN_FILE: never
from a command line, where `ps` would show it. The server's CA from `ca` or TXD_CA (else the
system's roots); a client certificate and key, when the listener asks for one, from
`client_cert`/`client_key` or TXD_CLIENT_CERT/TXD_CLIENT_KEY.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc

SCHEME = "tcp://"
TOKEN_ENV = "TXD_TOKEN"
TOKEN_FILE_ENV = "TXD_TOKEN_FILE"
CA_ENV = "TXD_CA"
CERT_ENV = "TXD_CLIENT_CERT"
KEY_ENV = "TXD_CLIENT_KEY"


class TcpSetupError(ValueError):
    """A tcp:// target cannot be used as given: the message says what is missing or wrong."""


def is_tcp(target: object) -> bool:
    return isinstance(target, str) and target.startswith(SCHEME)


def address(target: str) -> str:
    """`tcp://HOST:PORT` -> `HOST:PORT` for gRPC (`[V6]:PORT` for an IPv6 address)."""
    try:
        parts = urlsplit(target)
        port = parts.port
    except ValueError as e:
        raise TcpSetupError(f"{target!r}: {e}") from None
    if not parts.hostname or port is None or parts.path not in ("", "/"):
        raise TcpSetupError(f"{target!r}: expected tcp://HOST:PORT")
    host = parts.hostname
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _file(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise TcpSetupError(f"cannot read {what} {path}: {e.strerror}") from None


def resolve_token(token: str | None = None, token_file: str | Path | None = None) -> str:
    """The token to send: `token`, else the file `token_file`, else TXD_TOKEN, else the file
    named by TXD_TOKEN_FILE."""
    if not token and not token_file:
        token = os.environ.get(TOKEN_ENV)
        token_file = os.environ.get(TOKEN_FILE_ENV)
    if not token and token_file:
        token = _file(token_file, "the token file").decode(errors="replace")
    token = (token or "").strip()
    if not token:
        raise TcpSetupError(
            f"a tcp:// daemon needs a token: set {TOKEN_ENV}, or {TOKEN_FILE_ENV} (txctl: "
            "--token-file) to a file holding it (`txd token create` on the daemon's host makes "
            "one)"
        )
    if any(c.isspace() or not c.isprintable() for c in token):
        raise TcpSetupError("the token has spaces or unprintable characters in it")
    return token


def credentials(
    *,
    token: str | None = None,
    token_file: str | Path | None = None,
    ca: str | Path | None = None,
    client_cert: str | Path | None = None,
    client_key: str | Path | None = None,
) -> grpc.ChannelCredentials:
    """TLS (the CA given, else the system's) composed with the bearer token."""
    ca = ca or os.environ.get(CA_ENV) or None
    client_cert = client_cert or os.environ.get(CERT_ENV) or None
    client_key = client_key or os.environ.get(KEY_ENV) or None
    if bool(client_cert) != bool(client_key):
        raise TcpSetupError(
            f"a client certificate needs both the certificate and its key ({CERT_ENV} and "
            f"{KEY_ENV}, or txctl --client-cert and --client-key)"
        )
    tls = grpc.ssl_channel_credentials(
        root_certificates=_file(ca, "the CA file") if ca else None,
        private_key=_file(client_key, "the client key") if client_key else None,
        certificate_chain=_file(client_cert, "the client certificate") if client_cert else None,
    )
    bearer = grpc.access_token_call_credentials(resolve_token(token, token_file))
    return grpc.composite_channel_credentials(tls, bearer)


def channel(
    target: str, credentials: grpc.ChannelCredentials, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Channel:
    """An asyncio channel to the tcp:// `target` with `credentials` (from credentials())."""
    return grpc.aio.secure_channel(address(target), credentials, options=list(options))
