"""A real txd serving its Unix socket and a TLS+token TCP listener on loopback, for the tests of
its logs and metrics (tests/integration/test_json_logs.py, test_metrics.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import grpc
from tls_testing import Pki, make_pki
from txd_testing import Daemon

SERVING = re.compile(r"txd serving on (tcp://127\.0\.0\.1:\d+)")


@dataclass
class Served:
    daemon: Daemon
    url: str  # tcp://127.0.0.1:PORT
    token: str
    pki: Pki

    @property
    def address(self) -> str:
        return self.url.removeprefix("tcp://")

    def channel(self) -> grpc.Channel:
        tls = grpc.ssl_channel_credentials(root_certificates=self.pki.ca.read_bytes())
        return grpc.secure_channel(self.address, tls)

    def metadata(self, token: str | None = None) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {token or self.token}")]


def start(root: Path, *extra: str) -> Served:
    """A daemon under `root` with --listen on a free loopback port and one live token."""
    from txd.daemon.tokens import TokenStore

    (root / "pki").mkdir(mode=0o700)
    pki = make_pki(root / "pki")
    d = Daemon(root)
    d.state_dir.mkdir(mode=0o700, exist_ok=True)
    token = TokenStore(d.state_dir).create("ci", expires=None)
    d.args = [
        "--listen", "tcp://127.0.0.1:0",
        "--tls-cert", str(pki.server.cert),
        "--tls-key", str(pki.server.key),
        *extra,
    ]  # fmt: skip
    d.start()
    found = SERVING.search(d.log())
    assert found, d.log()
    return Served(d, found[1], token, pki)
