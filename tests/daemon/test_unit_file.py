"""`txd unit install|show|uninstall`: the unit it writes passes `systemd-analyze --user
verify` (its own parser, with no warning), and where no systemd user manager runs (this
machine's case unless a test starts one: tests/integration/test_user_manager.py) install
says why and writes only with --force."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from txd import userunit
from txd_testing import clean_env, remove_tree, short_tmpdir

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


class Home:
    """A user's config and runtime folders of the test's own; no systemd user manager runs
    there (no $XDG_RUNTIME_DIR/systemd/private)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config = root / "config"
        self.runtime = root / "run"
        self.runtime.mkdir(mode=0o700)
        self.unit = self.config / "systemd" / "user" / "txd.service"
        self.env = clean_env(
            XDG_CONFIG_HOME=str(self.config),
            XDG_RUNTIME_DIR=str(self.runtime),
            XDG_STATE_HOME=str(root / "state"),
            HOME=str(root),
            USER="alice",
        )

    def txd(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        merged = {**self.env, **env}
        for key in [k for k, v in merged.items() if v == "<unset>"]:
            del merged[key]
        return subprocess.run(
            [sys.executable, "-m", "txd.daemon", "unit", *args],
            capture_output=True,
            text=True,
            env=merged,
            timeout=60,
        )

    @contextlib.contextmanager
    def manager_socket(self) -> Iterator[None]:
        folder = self.runtime / "systemd"
        folder.mkdir(exist_ok=True)
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(folder / "private"))
            s.listen()
            try:
                yield
            finally:
                (folder / "private").unlink()

    def verify(self, unit: Path) -> subprocess.CompletedProcess[str]:
        assert ANALYZE is not None
        return subprocess.run(
            [ANALYZE, "--user", "verify", str(unit)],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
        )


@pytest.fixture
def home() -> Iterator[Home]:
    root = short_tmpdir("txdt-unit-")
    try:
        yield Home(root)
    finally:
        remove_tree(root)


def _setting(text: str, key: str) -> str:
    values = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]
    assert len(values) == 1, (key, text)
    return values[0]


@needs_analyze
def test_install_force_without_manager_writes_a_unit_systemd_accepts(home: Home) -> None:
    proc = home.txd("install", "--force")
    assert proc.returncode == 0, proc.stderr
    text = home.unit.read_text()
    assert text.startswith(userunit.MARK)
    assert _setting(text, "Type") == "notify"
    assert _setting(text, "NotifyAccess") == "main"
    assert _setting(text, "KillMode") == "mixed"
    assert _setting(text, "Restart") == "on-failure"
    assert _setting(text, "WantedBy") == "default.target"
    # The same socket and state dir as txctl's autostart (the defaults for this environment),
    # this interpreter: the unit runs this very txd.
    assert userunit.served_paths(text) == (
        str(home.runtime / "txd" / "txd.sock"),
        str(home.root / "state" / "txd"),
    )
    assert _setting(text, "ExecStart").startswith(f"{sys.executable} -m txd.daemon ")
    # systemd's own parser: no error, and no warning either (verify exits 0 on a bad setting).
    verified = home.verify(home.unit)
    assert verified.returncode == 0 and verified.stdout + verified.stderr == "", verified
    # It said plainly why the unit cannot be used here, and what to run where it can.
    assert "cannot be used here" in proc.stderr
    assert f"no systemd user manager answers on {home.runtime}/systemd/private" in proc.stderr
    assert "systemctl --user daemon-reload && systemctl --user enable --now txd" in proc.stderr
    assert "loginctl enable-linger alice" in proc.stderr
    assert "logs out" in proc.stderr


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({}, "no systemd user manager answers on {runtime}/systemd/private (it does not exist)"),
        ({"XDG_RUNTIME_DIR": "<unset>"}, "XDG_RUNTIME_DIR is not set"),
        ({"PATH": "/nonexistent"}, "systemctl is not installed"),
    ],
)
def test_install_without_manager_refuses_and_says_why(
    home: Home, env: dict[str, str], why: str
) -> None:
    proc = home.txd("install", **env)
    assert proc.returncode == 1
    assert why.format(runtime=home.runtime) in proc.stderr, proc.stderr
    assert "--force" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not home.unit.exists()


@needs_analyze
def test_odd_paths_are_quoted_for_systemd(home: Home) -> None:
    """Spaces, '%' (a specifier to systemd), '$' (a variable on an Exec line) and quotes in
    the socket and state dir survive: systemd accepts the unit and the paths read back."""
    sock = home.root / "a dir %i %Z $HOME" / "t's.sock"
    state = home.root / 'st "x" \\ y'
    proc = home.txd("install", "--force", "--socket", str(sock), "--state-dir", str(state))
    assert proc.returncode == 0, proc.stderr
    text = home.unit.read_text()
    assert userunit.served_paths(text) == (str(sock), str(state))
    verified = home.verify(home.unit)
    assert verified.returncode == 0 and verified.stdout + verified.stderr == "", verified


def test_stop_timeout_exceeds_the_daemons_own_shutdown(home: Home) -> None:
    text = home.txd("show", "--grace", "20").stdout
    assert "--grace 20" in _setting(text, "ExecStart")
    # Submissions, local jobs and calls are each given --grace in turn.
    assert int(_setting(text, "TimeoutStopSec")) > 3 * 20


def test_install_keeps_a_different_unit_unless_forced(home: Home) -> None:
    # A socket that accepts at the manager's address: what install checks (a stand-in for
    # the manager; the real one: tests/integration/test_user_manager.py).
    with home.manager_socket():
        first = home.txd("install")
        assert first.returncode == 0, first.stderr
        assert "cannot be used here" not in first.stderr
        again = home.txd("install")
        assert again.returncode == 0 and "is already this unit" in again.stderr
        edited = home.unit.read_text().replace("RestartSec=2", "RestartSec=9")
        home.unit.write_text(edited)
        refused = home.txd("install")
        assert refused.returncode == 1 and "exists and differs" in refused.stderr
        assert home.unit.read_text() == edited
        forced = home.txd("install", "--force")
        assert forced.returncode == 0, forced.stderr
        assert home.unit.read_text() == home.txd("show").stdout


def test_uninstall_removes_only_its_own_unit(home: Home) -> None:
    assert home.txd("uninstall").returncode == 0  # nothing there: nothing to do
    assert home.txd("install", "--force").returncode == 0
    proc = home.txd("uninstall")
    assert proc.returncode == 0, proc.stderr
    assert not home.unit.exists()
    assert "daemon-reload" in proc.stderr
    home.unit.parent.mkdir(parents=True, exist_ok=True)
    home.unit.write_text("[Service]\nExecStart=/bin/true\n")
    foreign = home.txd("uninstall")
    assert foreign.returncode == 1 and "not written by `txd unit install`" in foreign.stderr
    assert home.unit.exists()


def test_unit_path_follows_xdg_config_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", "/x/cfg")
    assert userunit.unit_path() == Path("/x/cfg/systemd/user/txd.service")
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", "/home/alice")
    assert userunit.unit_path() == Path("/home/alice/.config/systemd/user/txd.service")


def test_served_paths_needs_both_flags() -> None:
    assert userunit.served_paths("[Service]\nExecStart=/x/txd --socket /s\n") is None
    assert userunit.served_paths("[Service]\n") is None
    assert userunit.served_paths(
        "ExecStart=/p -m txd.daemon --socket /r/t.sock --state-dir /st\n"
    ) == ("/r/t.sock", "/st")
