"""The token store (txd.daemon.tokens) and the bearer header's parsing (txd.daemon.auth), on
real files: what is kept (a hash, never the secret), what a running daemon sees change, and what
a damaged store grants (nothing)."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest
from txd.daemon import tokens
from txd.daemon.auth import bearer
from txd.daemon.tcp import ListenError, parse_address
from txd.daemon.tokens import TokenError, TokenStore, parse_expiry


def test_create_keeps_only_a_hash_in_a_private_file(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "state")
    secret = store.create("ci", expires=None)
    assert secret.startswith("txd_") and len(secret) == 4 + 43
    text = store.path.read_text()
    assert secret not in text and secret[4:] not in text
    assert json.loads(text)["tokens"][0]["sha256"] == tokens.digest(secret).hex()
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.state_dir.stat().st_mode) == 0o700
    assert store.create("other", expires=None) != secret
    assert [t.name for t in store.all()] == ["ci", "other"]


def test_names_are_checked_and_unique(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    store.create("ci", expires=None)
    with pytest.raises(TokenError, match="exists: revoke it first"):
        store.create("ci", expires=None)
    for bad in ("", "-x", "a b", "a/b", "x" * 65):
        with pytest.raises(TokenError, match="token name"):
            store.create(bad, expires=None)
    with pytest.raises(TokenError, match="no token named 'nope'"):
        store.revoke("nope")


def test_check_sees_creation_revocation_and_expiry_without_a_restart(tmp_path: Path) -> None:
    daemon_view = TokenStore(tmp_path)  # the daemon's instance, kept across calls
    cli = TokenStore(tmp_path)  # `txd token ...`, another process's
    assert daemon_view.check("txd_x").reason == "unknown or revoked"
    secret = cli.create("ci", expires=None)
    assert daemon_view.check(secret).name == "ci"
    cli.revoke("ci")
    assert daemon_view.check(secret) == tokens.Verdict(None, "unknown or revoked")
    old = cli.create("old", expires=time.time() - 1)
    verdict = daemon_view.check(old)
    assert verdict.name is None and "token 'old' expired at" in verdict.reason
    assert old not in verdict.reason
    assert daemon_view.check("").reason == "missing"
    assert daemon_view.check(None).reason == "missing"


def test_a_use_is_recorded_at_most_once_a_minute(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    secret = store.create("ci", expires=None)
    assert store.check(secret).name == "ci"
    first = TokenStore(tmp_path).all()[0].last_used
    assert first is not None
    assert store.check(secret).name == "ci"
    assert TokenStore(tmp_path).all()[0].last_used == first


def test_a_damaged_store_grants_nothing(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    secret = store.create("ci", expires=None)
    assert store.check(secret).name == "ci"
    store.path.write_text('{"tokens": [{"name": "ci"')  # cut short
    assert store.check(secret).name is None
    with pytest.raises(TokenError, match="is damaged"):
        store.all()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("2w", 14 * 86400), ("10s", 10)],
)
def test_parse_expiry_durations(text: str, seconds: int) -> None:
    assert parse_expiry(text, 1000.0) == 1000.0 + seconds


def test_parse_expiry_dates_never_and_errors() -> None:
    assert parse_expiry("never", 0.0) is None
    assert parse_expiry("2100-01-01", 0.0) == 4102444800.0  # UTC when it does not say
    assert parse_expiry("2100-01-01T01:00:00+01:00", 0.0) == 4102444800.0
    with pytest.raises(TokenError, match="in the past"):
        parse_expiry("2000-01-01", time.time())
    with pytest.raises(TokenError, match="above zero"):
        parse_expiry("0d", 0.0)
    with pytest.raises(TokenError, match="expected a duration"):
        parse_expiry("soon", 0.0)


@pytest.mark.parametrize(
    ("metadata", "token", "why"),
    [
        ([("authorization", "Bearer txd_abc")], "txd_abc", ""),
        ([("authorization", "bearer  txd_abc ")], "txd_abc", ""),
        ([], None, "no token"),
        ([("x-forwarded-for", "127.0.0.1")], None, "no token"),
        ([("authorization", "Basic txd_abc")], None, "not `Bearer <token>`"),
        ([("authorization", "Bearer ")], None, "not `Bearer <token>`"),
        ([("authorization", "Bearer a"), ("authorization", "Bearer b")], None, "more than one"),
    ],
)
def test_bearer(metadata: list[tuple[str, str]], token: str | None, why: str) -> None:
    got, reason = bearer(metadata)
    assert got == token and why in reason
    assert "txd_abc" not in reason


def test_parse_listen_address() -> None:
    assert parse_address("tcp://127.0.0.1:7443") == "127.0.0.1:7443"
    assert parse_address("tcp://[::1]:0") == "[::1]:0"
    assert parse_address("tcp://box.example:7443/") == "box.example:7443"
    for bad in ("tcp://h", "http://h:1", "tcp://h:99999", "tcp://u@h:1", "tcp://h:1/x", "h:1"):
        with pytest.raises(ListenError, match=r"--listen"):
            parse_address(bad)


def test_a_store_others_can_write_grants_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = TokenStore(state)
    secret = store.create("ci", expires=None)
    assert store.check(secret).name == "ci"
    state.chmod(0o777)  # anyone could now swap tokens.json for one with their own hash
    assert store.check(secret).name is None
    with pytest.raises(TokenError, match="not private"):
        store.check_private()
    state.chmod(0o700)
    store.path.chmod(0o620)
    with pytest.raises(TokenError, match=r"tokens.json is not private"):
        store.check_private()
    assert store.check(secret).name is None
    store.path.chmod(0o600)
    assert store.check(secret).name == "ci"


def test_scopes_default_to_all_and_an_unknown_one_grants_nothing(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    reader = store.create("dash", None, scope="read")
    assert store.check(reader).scope == "read"
    with pytest.raises(TokenError, match="token scope 'rw'"):
        store.create("x", None, scope="rw")
    # A store written before scopes existed: its tokens are `all` tokens.
    data = json.loads(store.path.read_text())
    del data["tokens"][0]["scope"]
    store.path.write_text(json.dumps(data))
    assert store.check(reader) == tokens.Verdict("dash", scope="all")
    data["tokens"][0]["scope"] = "root"
    store.path.write_text(json.dumps(data))
    assert store.check(reader).name is None  # damaged: nothing granted


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sha256", "not hex"),
        ("sha256", 42),
        ("expires", "2030-01-01"),
        ("created", None),
        ("last_used", "yesterday"),
        ("name", ["ci"]),
        ("scope", None),
    ],
)
def test_a_store_with_a_malformed_entry_is_damaged_and_grants_nothing(
    tmp_path: Path, field: str, value: object
) -> None:
    """A store that parses as JSON but holds a field of the wrong kind used to raise out of
    check() (ValueError from a hash that is not hex, TypeError comparing a text expiry), so
    every call on the TCP listener ended in an exception instead of a refusal saying why."""
    store = TokenStore(tmp_path)
    secret = store.create("ci", expires=time.time() + 3600)
    data = json.loads(store.path.read_text())
    data["tokens"][0][field] = value
    store.path.write_text(json.dumps(data))
    assert store.check(secret) == tokens.Verdict(None, "unknown or revoked")
    with pytest.raises(TokenError, match="is damaged"):
        store.all()


def test_a_clock_set_back_does_not_stop_last_uses_being_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The once-a-minute limit on writing a last use is a duration: measured on the wall
    clock, a clock set back a day (NTP stepping a wrong clock) kept every last use of the
    token unrecorded for that day."""
    store = TokenStore(tmp_path)
    secret = store.create("ci", expires=None)
    real = time.time
    monkeypatch.setattr(tokens.time, "time", lambda: real() + 86400)  # a clock a day ahead
    assert store.check(secret).name == "ci"
    monkeypatch.setattr(tokens.time, "time", real)  # set right: a day back
    monkeypatch.setattr(tokens, "LAST_USE_EVERY", 0.0)  # no wait for the minute
    assert store.check(secret).name == "ci"
    last = TokenStore(tmp_path).all()[0].last_used
    assert last is not None and abs(last - real()) < 60
