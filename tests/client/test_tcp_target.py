"""txd.client._tcp: a tcp:// target's address, and where its token comes from (never argv)."""

from __future__ import annotations

from pathlib import Path

import pytest
from txd.client import _tcp


def test_address() -> None:
    assert _tcp.is_tcp("tcp://h:1") and not _tcp.is_tcp("/run/txd.sock")
    assert _tcp.address("tcp://127.0.0.1:7443") == "127.0.0.1:7443"
    assert _tcp.address("tcp://[::1]:7443") == "[::1]:7443"
    for bad in ("tcp://h", "tcp://h:1/x", "tcp://h:70000"):
        with pytest.raises(_tcp.TcpSetupError):
            _tcp.address(bad)


def test_token_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_tcp.TOKEN_ENV, raising=False)
    monkeypatch.delenv(_tcp.TOKEN_FILE_ENV, raising=False)
    with pytest.raises(_tcp.TcpSetupError, match="needs a token: set TXD_TOKEN"):
        _tcp.resolve_token()
    file = tmp_path / "t"
    file.write_text("txd_file\n")
    monkeypatch.setenv(_tcp.TOKEN_FILE_ENV, str(file))
    assert _tcp.resolve_token() == "txd_file"
    monkeypatch.setenv(_tcp.TOKEN_ENV, "txd_env")
    assert _tcp.resolve_token() == "txd_env"
    assert _tcp.resolve_token(token="txd_given") == "txd_given"
    assert _tcp.resolve_token(token_file=file) == "txd_file"
    with pytest.raises(_tcp.TcpSetupError, match="cannot read the token file"):
        _tcp.resolve_token(token_file=tmp_path / "missing")
    with pytest.raises(_tcp.TcpSetupError, match="spaces"):
        _tcp.resolve_token(token="txd_a b")


def test_a_client_certificate_needs_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_tcp.KEY_ENV, raising=False)
    with pytest.raises(_tcp.TcpSetupError, match="both the certificate and its key"):
        _tcp.credentials(token="txd_x", client_cert="c.pem")
