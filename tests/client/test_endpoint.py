"""ssh:// URLs, saved endpoints and which one a client reaches (no ssh here: tests/remote)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from txd.client._endpoint import EndpointError, load_hosts, parse_url, resolve, save_hosts


def test_urls_parse_and_bad_ones_say_what_is_expected() -> None:
    ep = parse_url("ssh://me@login1.example.org:2222")
    assert (ep.user, ep.host, ep.port) == ("me", "login1.example.org", 2222)
    assert ep.ssh_target() == ["-l", "me", "-p", "2222", "login1.example.org"]
    assert parse_url("ssh://login1").ssh_target() == ["login1"]
    for bad in ("login1", "http://login1", "ssh://", "ssh://a@b@c", "ssh://h:99999"):
        with pytest.raises(EndpointError, match="ssh://"):
            parse_url(bad)


def test_resolution_order_flag_env_saved_local(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path)  # hosts_file() reads the process's
    try:
        assert resolve(environ=env) is None  # nothing saved: the local daemon
        save_hosts(
            {
                "current": "c1",
                "hosts": {"c1": {"url": "ssh://a@h1", "command": "~/v/bin/txctl", "idle": 5}},
            }
        )
        assert os.stat(tmp_path / "txd" / "hosts.toml").st_mode & 0o777 == 0o600
        ep = resolve(environ=env)
        assert ep is not None and (ep.name, ep.host, ep.command, ep.idle) == (
            "c1",
            "h1",
            "~/v/bin/txctl",
            5.0,
        )
        ep = resolve(environ={**env, "TXD_HOST": "ssh://h2", "TXD_SSH_COMMAND": "ssh -F cfg"})
        assert ep is not None and (ep.host, ep.command, ep.ssh) == (
            "h2",
            "txctl",
            ("ssh", "-F", "cfg"),
        )
        ep = resolve("c1", command="/opt/txctl", environ={**env, "TXD_REMOTE_COMMAND": "x"})
        assert ep is not None and ep.command == "/opt/txctl"
        assert resolve("local", environ=env) is None
        with pytest.raises(EndpointError, match=r"unknown host 'c9'.*c1"):
            resolve("c9", environ=env)
        assert load_hosts()["current"] == "c1"
    finally:
        del os.environ["XDG_CONFIG_HOME"]


def test_a_local_txctl_imports_no_remote_machinery(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        from txd.client import cli
        try:
            cli.main(["--socket", sys.argv[1], "--no-autostart", "list"])
        finally:
            print(sorted(m for m in sys.modules if m.startswith("txd.client._")))
        """
    )
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    env.pop("TXD_HOST", None)
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "none.sock")],
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    assert "txd.client._exitcodes" in out, out  # the list was printed
    assert "_endpoint" not in out and "_tunnel" not in out, out


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("--socket", "--socket names a local daemon's socket"),
        ("--state-dir", "--state-dir names the state dir of a daemon txctl starts here"),
    ],
)
def test_local_daemon_flags_with_a_remote_host_are_refused(
    tmp_path: Path, flag: str, says: str
) -> None:
    """Refused before any ssh (its command here records a call): the flag would be ignored."""
    calls = tmp_path / "ssh-calls"
    ssh = tmp_path / "ssh"
    ssh.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 255\n')
    ssh.chmod(0o755)
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_RUNTIME_DIR": str(tmp_path / "run"),
        "TXD_SSH_COMMAND": str(ssh),
    }
    txctl = [sys.executable, "-m", "txd.client.cli"]
    out = subprocess.run(
        [*txctl, "--host", "ssh://login9", flag, str(tmp_path / "x"), "list"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and says in out.stderr, out
    assert not calls.exists()
