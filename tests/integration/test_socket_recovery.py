"""A socket that disappears is recovered: a real txd whose socket file, or the socket's whole
folder, is removed under it (logind at logout, a tmp cleaner) serves there again within
seconds, its running job and the streams already open unaffected; a file that is not a stale
socket of the user's is never removed, and txctl names it. Also `txctl where` (and --json)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txd.client import Client
from txd.install import version
from txd.v1 import AppState
from txd_testing import (
    TXCTL,
    Daemon,
    Gates,
    clean_env,
    kill_recorded_replicas,
    own_daemon,
    remove_tree,
    sh_app,
    short_tmpdir,
)

LOG_WAIT = 20.0  # seconds for the daemon to log a line it logs within ~1 s on an idle machine


@pytest.fixture
def daemon(request: Any) -> Iterator[Daemon]:
    """A daemon whose socket sits in a folder of its own (root/run), which a test may remove."""
    d = Daemon(short_tmpdir())
    d.socket = d.root / "run" / "txd.sock"
    with own_daemon(d, request):
        yield d


def txctl(d: Daemon, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """txctl on the daemon's socket, knowing its state dir (as a user's default txctl does)."""
    return d.txctl("--state-dir", str(d.state_dir), *args, timeout=timeout)


def until_logged(d: Daemon, text: str, after: int = 0) -> None:
    """Waits until the daemon's log holds `text` past its first `after` characters (the
    daemon's doing, logged once: a bounded look every 50 ms)."""
    deadline = time.monotonic() + LOG_WAIT
    while text not in d.log()[after:]:
        assert time.monotonic() < deadline, f"not logged within {LOG_WAIT}s: {text}\n{d.log()}"
        time.sleep(0.05)


def remove(d: Daemon, what: str) -> None:
    if what == "socket":
        d.socket.unlink()
    else:
        shutil.rmtree(d.socket.parent)


@pytest.mark.parametrize("what", ["socket", "folder"])
def test_removed_socket_is_recovered_job_and_streams_unaffected(daemon: Daemon, what: str) -> None:
    with Gates(daemon.root) as gates:
        gate = gates.new("go")
        with Client(daemon.socket) as client:
            handle = client.run(sh_app(f"echo before; {gate.wait}; echo after", name="kept"))
            with subprocess.Popen(
                [*TXCTL, "--socket", str(daemon.socket), "--no-autostart", "logs", "-f", handle],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=daemon.txctl_env(),
            ) as follow:
                try:
                    assert follow.stdout is not None
                    assert follow.stdout.readline().endswith("before\n")  # the stream is open
                    watch = client.watch(handle)
                    first = next(watch)
                    assert first.state == AppState.RUNNING
                    logged = len(daemon.log())

                    remove(daemon, what)
                    # Waits (up to 5 s, txd's own bound) for the daemon to serve there again.
                    status = txctl(daemon, "status", "--json", handle)
                    assert status.returncode == 0, status.stderr
                    assert json.loads(status.stdout)["state"] == "RUNNING"
                    assert "serving there again" in daemon.log()[logged:]
                    mode = daemon.socket.parent.stat().st_mode & 0o777
                    assert mode == 0o700, oct(mode)
                    assert daemon.socket.stat().st_mode & 0o777 == 0o600

                    gate.open()
                    out, err = follow.communicate(timeout=30)
                    assert follow.returncode == 0, err
                    assert out.endswith("after\n"), out
                    states = [s.state for s in watch]
                    assert states[-1] == AppState.SUCCEEDED, states
                finally:
                    if follow.poll() is None:
                        follow.kill()
                        follow.wait()
        # A new client on the new socket works, the same job known.
        assert json.loads(txctl(daemon, "status", "--json", handle).stdout)["state"] == (
            "SUCCEEDED"
        )
        # And again: a second removal is recovered as the first was.
        logged = len(daemon.log())
        remove(daemon, what)
        until_logged(daemon, "serving there again", logged)
        assert txctl(daemon, "where").returncode == 0


@pytest.mark.parametrize("owner", ["mine", "another uid"])
def test_foreign_file_at_the_path_is_never_removed(daemon: Daemon, owner: str) -> None:
    if owner != "mine" and os.geteuid() != 0:
        pytest.skip("giving a file to another uid needs root")
    logged = len(daemon.log())
    daemon.socket.unlink()
    daemon.socket.write_text("not txd's\n")
    if owner != "mine":
        os.chown(daemon.socket, 65534, 65534)
    until_logged(daemon, "cannot serve there again yet", logged)

    proc = txctl(daemon, "list")
    assert proc.returncode == 3, proc.stderr
    assert f"txd (pid {daemon.pid}) serves the state dir {daemon.state_dir}" in proc.stderr
    kind = "a regular file (yours)" if owner == "mine" else "a regular file of uid 65534"
    assert f"{daemon.socket} is now {kind}" in proc.stderr, proc.stderr
    assert "remove it or move it away" in proc.stderr
    assert "already running" not in proc.stderr
    assert daemon.socket.read_text() == "not txd's\n"  # the daemon never took it away
    assert daemon.running()

    # Once the user moves it away, the daemon serves there again.
    daemon.socket.unlink()
    assert txctl(daemon, "list").returncode == 0


def test_a_daemon_that_does_not_come_back_is_named(daemon: Daemon) -> None:
    """A stopped (SIGSTOP) daemon cannot bind again: txctl waits its 5 s, then says what is
    wrong and what to do, never "already running"; once the daemon runs on, txctl works."""
    daemon.socket.unlink()
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        proc = txctl(daemon, "list")
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    assert proc.returncode == 3, proc.stderr
    assert (
        f"txd (pid {daemon.pid}) serves the state dir {daemon.state_dir}, but its socket "
        f"{daemon.socket} is gone, and txd did not re-create it within 5s" in proc.stderr
    ), proc.stderr
    assert f"see why in {daemon.state_dir / 'txd.log'}" in proc.stderr
    assert "already running" not in proc.stderr
    assert txctl(daemon, "list").returncode == 0


def test_foreign_file_outlives_the_daemon(daemon: Daemon) -> None:
    """Stopping the daemon removes its own socket only, never what replaced it."""
    logged = len(daemon.log())
    daemon.socket.unlink()
    daemon.socket.write_text("not txd's\n")
    until_logged(daemon, "cannot serve there again yet", logged)
    assert daemon.stop() == 0
    assert daemon.socket.read_text() == "not txd's\n"


def test_folder_replaced_by_another_users_is_named(daemon: Daemon) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another uid needs root")
    folder = daemon.socket.parent
    logged = len(daemon.log())
    shutil.rmtree(folder)
    folder.mkdir(mode=0o777)
    os.chown(folder, 65534, 65534)
    until_logged(daemon, "cannot serve there again yet", logged)
    assert "belongs to uid 65534" in daemon.log()[logged:]

    proc = txctl(daemon, "status", "local_cwd://txd/none")
    assert proc.returncode == 3
    assert f"its folder {folder} is now a folder of uid 65534" in proc.stderr, proc.stderr
    assert not daemon.socket.exists()  # nothing served where another user could reach

    folder.rmdir()
    assert txctl(daemon, "where").returncode == 0
    assert folder.stat().st_uid == os.geteuid()


def test_start_refuses_a_file_at_the_path(request: Any) -> None:
    """At start too, a file that is no stale socket of the user's is left alone."""
    d = Daemon(short_tmpdir())
    d.socket.write_text("keep me\n")
    try:
        with pytest.raises(RuntimeError, match=r"is a regular file \(yours\), not a stale socket"):
            d.start()
        assert d.socket.read_text() == "keep me\n"
    finally:
        d.close()
        remove_tree(d.root)


def test_where_names_the_daemon(daemon: Daemon) -> None:
    first = json.loads(txctl(daemon, "where", "--json").stdout)
    assert first["host"] == socket.gethostname()
    assert first["pid"] == daemon.pid
    assert first["socket"] == str(daemon.socket)
    assert first["state_dir"] == str(daemon.state_dir)
    assert first["version"] == version()
    assert first["user"] and isinstance(first["uptime_seconds"], float)
    assert first["started"].endswith("+00:00")
    assert first["systemd_unit"] == ""  # started by hand, not by systemd
    second = json.loads(txctl(daemon, "where", "--json").stdout)
    assert second["uptime_seconds"] >= first["uptime_seconds"]
    assert second["started"] == first["started"]
    with Client(daemon.socket) as client:  # the Python client's where(): the same daemon
        where = client.where()
    assert (where.pid, where.host, where.state_dir) == (
        daemon.pid,
        first["host"],
        first["state_dir"],
    )
    assert where.uptime.ToNanoseconds() > 0

    text = txctl(daemon, "where").stdout
    for name, value in [
        ("host", first["host"]),
        ("pid", str(daemon.pid)),
        ("socket", str(daemon.socket)),
        ("state dir", str(daemon.state_dir)),
        ("version", first["version"]),
        ("unit", "none (not started by systemd)"),
    ]:
        assert f"{name:<10} {value}\n" in text, text
    assert "(up 0h 0m" in text or "(up 0h 1m" in text, text


def test_where_autostarts() -> None:
    root = short_tmpdir()
    state = root / "state"
    env = clean_env(TXD_SOCKET=str(root / "run" / "txd.sock"), TXD_STATE_DIR=str(state))
    pid = 0
    try:
        proc = subprocess.run(
            [*TXCTL, "where", "--json"], capture_output=True, text=True, env=env, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        pid = json.loads(proc.stdout)["pid"]
        assert f"started txd (pid {pid})" in proc.stderr
        assert json.loads(proc.stdout)["state_dir"] == str(state)
    finally:
        if pid:
            os.kill(pid, 15)
            deadline = time.monotonic() + 30
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.05)  # not our child: no wait() for it
        kill_recorded_replicas(state)
        remove_tree(root)
