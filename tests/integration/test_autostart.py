"""txctl starts a daemon in the background when none answers on the default socket."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txd.daemon import serving
from txd_testing import (
    TXCTL,
    PidWatch,
    clean_env,
    first_line,
    open_to_others,
    pids_with_marker,
    proc_stat,
    remove_tree,
    run_python,
    short_tmpdir,
)


class AutostartEnv:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.run_dir = root / "run"
        self.state_home = root / "state"
        self.home = root / "home"
        self.run_dir.mkdir(mode=0o700)
        self.home.mkdir()
        self.socket = self.run_dir / "txd" / "txd.sock"
        self.env = clean_env(
            XDG_RUNTIME_DIR=str(self.run_dir),
            XDG_STATE_HOME=str(self.state_home),
            HOME=str(self.home),
        )

    def txctl(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*TXCTL, *args], capture_output=True, text=True, cwd=cwd, env=self.env, timeout=60
        )

    def daemons(self) -> list[int]:
        """Live txd processes serving our socket (its path is unique to this test)."""
        return [
            p
            for p in pids_with_marker(str(self.socket))
            if b"txd.daemon" in Path(f"/proc/{p}/cmdline").read_bytes()
        ]

    def stop_daemons(self) -> list[int]:
        """SIGTERM to every daemon on our socket; returns those that did not exit."""
        pids = self.daemons()
        with PidWatch(pids) as watch:
            for pid in pids:
                os.kill(pid, signal.SIGTERM)
            left = watch.wait(30)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        return left


@pytest.fixture
def auto() -> Iterator[AutostartEnv]:
    """An autostart's folders under a root of the test's own (0700), with the usual umask."""
    previous = os.umask(0o022)  # what a login shell has: nothing here comes out private by it
    env = AutostartEnv(short_tmpdir("txdt-auto-"))
    try:
        yield env
    finally:
        env.stop_daemons()
        remove_tree(env.root)
        os.umask(previous)


def test_autostart_on_default_socket(auto: AutostartEnv, workdir: Path) -> None:
    proc = auto.txctl("list", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"started txd \(pid (\d+)\)", proc.stderr)
    assert m, proc.stderr
    pid = int(m[1])
    assert str(auto.socket) in proc.stderr
    assert proc.stdout.split() == ["HANDLE", "NAME", "STATE", "CREATED"]
    assert auto.daemons() == [pid]
    # Detached from txctl: a session of its own, alive after txctl exited.
    st = proc_stat(pid)
    assert st is not None and st[2] == pid
    # The default places: socket folder 0700 under XDG_RUNTIME_DIR, state under XDG_STATE_HOME.
    assert stat.S_IMODE(auto.socket.parent.stat().st_mode) == 0o700
    assert (auto.state_home / "txd" / "txd.log").exists()

    # The next call finds it: no second start.
    proc = auto.txctl("run", "--wait", "utils.echo", "--msg", "auto", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert "started txd" not in proc.stderr
    handle = first_line(proc.stdout)
    proc = auto.txctl("logs", handle, cwd=workdir)
    assert proc.stdout == "auto\n"
    assert (auto.state_home / "txd" / "jobs.db").exists()
    assert auto.daemons() == [pid]

    # SIGTERM: it exits (cleanly, removing its socket).
    with PidWatch([pid]) as watch:
        os.kill(pid, signal.SIGTERM)
        assert watch.wait(30) == []
    assert not auto.socket.exists()
    proc = auto.txctl("--no-autostart", "list", cwd=workdir)
    assert proc.returncode == 3


SECRET = "API_KEY=txdt-b3f9c1"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to be another user (nobody)")
def test_autostart_makes_the_state_dir_private(auto: AutostartEnv, workdir: Path) -> None:
    """A home others may read (0755, as on many clusters): the state dir txctl's autostart
    makes is 0700 and every file in it 0600, the job store and the job's log holding a secret
    included, and user nobody reads none of them."""
    os.chmod(auto.root, 0o755)
    proc = auto.txctl("run", "--wait", "utils.echo", "--msg", SECRET, cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert "started txd" in proc.stderr
    state = auto.state_home / "txd"
    files = [p for p in state.rglob("*") if p.is_file()]
    assert {"txd.log", "jobs.db"} <= {p.name for p in files}
    assert sum(SECRET.encode() in p.read_bytes() for p in files) >= 2  # the store and the log
    assert open_to_others(state) == []


_CLIENT_LISTS = """
from txd.client import Client
with Client(autostart=True) as c:
    c.list()
"""
_RUNNER_LISTS = """
from txd.client.runner import get_runner
with get_runner() as runner:
    runner.list("local_cwd")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to be another user (nobody)")
@pytest.mark.parametrize("code", [_CLIENT_LISTS, _RUNNER_LISTS], ids=["client", "runner"])
def test_the_python_clients_autostart_makes_the_state_dir_private(
    auto: AutostartEnv, workdir: Path, code: str
) -> None:
    os.chmod(auto.root, 0o755)
    proc = run_python(code, env=auto.env, cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert len(auto.daemons()) == 1
    state = auto.state_home / "txd"
    assert (state / "jobs.db").exists() and (state / "txd.log").exists()
    assert open_to_others(state) == []


def test_concurrent_autostarts_leave_one_daemon(auto: AutostartEnv, workdir: Path) -> None:
    procs = [
        subprocess.Popen(
            [*TXCTL, "list"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=workdir,
            env=auto.env,
        )
        for _ in range(3)
    ]
    results: list[Any] = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        results.append((p.returncode, out, err))
    assert [r[0] for r in results] == [0, 0, 0], results
    assert len(auto.daemons()) == 1, (
        f"{len(auto.daemons())} daemons run for one socket: {[r[2] for r in results]}"
    )
    proc = auto.txctl("--no-autostart", "list", cwd=workdir)
    assert proc.returncode == 0


def test_a_daemon_that_finds_the_state_dir_locked_but_unnamed_waits_for_the_name(
    tmp_path: Path,
) -> None:
    """The start race behind concurrent autostarts: the winner holds the flock of a new lock
    file but has not written its pid and socket yet. The loser must wait for them and say the
    daemon is already starting on its socket (busy: use it), not "in use by another txd
    (pid ?)" (an error, which made one of three concurrent txctl exit 3)."""
    state, sock = tmp_path / "state", tmp_path / "txd.sock"
    state.mkdir()
    lock = state / serving.LOCK
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused: list[BaseException] = []

        def loser() -> None:
            try:
                serving.acquire(state, sock).close()
            except BaseException as e:
                refused.append(e)

        thread = threading.Thread(target=loser)
        thread.start()
        # Name the holder only once the loser opened the lock file (a second descriptor on it).
        deadline = time.monotonic() + 10
        while _open_count(lock) < 2 and thread.is_alive():
            assert time.monotonic() < deadline, "the loser never opened the lock file"
            time.sleep(0.001)
        os.write(fd, f"{os.getpid()}\n{sock}\n".encode())
        thread.join(30)
    finally:
        os.close(fd)
    assert [type(e) for e in refused] == [serving.Busy], refused
    assert str(refused[0]) == (
        f"txd is already running (pid {os.getpid()}) on {sock} with the state dir {state}"
    )
    assert refused[0].socket_path == str(sock)


def _open_count(path: Path) -> int:
    """How many of this process's descriptors are open on `path`."""
    fds = Path("/proc/self/fd")
    count = 0
    for link in fds.iterdir():
        with contextlib.suppress(OSError):
            count += os.readlink(link) == str(path)
    return count


def test_private_daemons_each_with_a_state_dir(auto: AutostartEnv, workdir: Path) -> None:
    """A second daemon for a second socket needs a state dir of its own (--state-dir or
    TXD_STATE_DIR, passed on to the daemon txctl starts); without one, txctl prints the
    daemon's own reason for refusing."""
    first = auto.txctl("list", cwd=workdir)
    assert first.returncode == 0, first.stderr
    m = re.search(r"started txd \(pid (\d+)\)", first.stderr)
    assert m, first.stderr
    sock_b, sock_c = auto.root / "b.sock", auto.root / "c.sock"
    try:
        # Same (default) state dir: refused, with the daemon's reason, not a log file's name.
        proc = auto.txctl("--socket", str(sock_b), "list", cwd=workdir)
        assert proc.returncode == 3, proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"txctl: error: cannot start txd: the state dir {auto.state_home / 'txd'} is in use "
            f"by another txd (pid {m[1]}, socket {auto.socket}): give this one its own with "
            "--state-dir or TXD_STATE_DIR"
        ]
        assert not sock_b.exists()

        # Its own state dir, by flag and by environment: both serve, each its own jobs.
        state_b, state_c = auto.root / "state-b", auto.root / "state-c"
        proc = auto.txctl(
            "--socket", str(sock_b), "--state-dir", str(state_b), "run", "--wait",
            "utils.echo", "--msg", "on-b", cwd=workdir,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "started txd" in proc.stderr
        handle_b = first_line(proc.stdout)
        env_c = {**auto.env, "TXD_SOCKET": str(sock_c), "TXD_STATE_DIR": str(state_c)}
        proc = subprocess.run(
            [*TXCTL, "run", "--wait", "utils.echo", "--msg", "on-c"],
            capture_output=True, text=True, cwd=workdir, env=env_c, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        handle_c = first_line(proc.stdout)
        assert (state_b / "jobs.db").exists() and (state_b / "txd.log").exists()
        assert (state_c / "jobs.db").exists()
        listed_b = auto.txctl("--socket", str(sock_b), "--no-autostart", "list", cwd=workdir)
        assert handle_b in listed_b.stdout and handle_c not in listed_b.stdout
        logs_c = subprocess.run(
            [*TXCTL, "--no-autostart", "logs", handle_c],
            capture_output=True, text=True, cwd=workdir, env=env_c, timeout=60,
        )  # fmt: skip
        assert logs_c.stdout == "on-c\n", logs_c.stderr
        assert auto.txctl("--no-autostart", "list", cwd=workdir).returncode == 0  # the first
    finally:
        _stop_serving(sock_b, sock_c)


def _stop_serving(*sockets: Path) -> None:
    """SIGTERM to the daemons serving these sockets, and wait for them to exit."""
    pids = [
        p
        for sock in sockets
        for p in pids_with_marker(str(sock))
        if b"txd.daemon" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    with PidWatch(pids) as watch:
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        assert watch.wait(30) == []


def test_autostart_failure_shows_the_daemon_reason(auto: AutostartEnv, workdir: Path) -> None:
    """A daemon that cannot start says why on its ready pipe; txctl prints that one line."""
    bad = auto.root / "bad.toml"
    bad.write_text("[schedulers.local_cwd\n")
    auto.env["TXD_CONFIG"] = str(bad)
    proc = auto.txctl("list", cwd=workdir)
    assert proc.returncode == 3, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"txctl: error: cannot start txd: {bad}: "), line
    assert "txd.log" not in line
    assert auto.daemons() == []
    # txd refuses a session that would make `HANDLE/ROLE/K` ambiguous.
    proc = subprocess.run(
        [sys.executable, "-m", "txd.daemon", "--session", "a/b"],
        capture_output=True, text=True, env=auto.env, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "'a/b': a session name is not empty and has no '/'" in proc.stderr


def test_a_daemon_that_crashes_at_start_is_named_by_its_last_words(
    auto: AutostartEnv, workdir: Path
) -> None:
    """A daemon that dies before it can say why on its ready pipe (here, an install without a
    package it imports) is reported with the last line of its log, not just the log's path."""
    shadow = auto.root / "shadow" / "prometheus_client"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'prometheus_client'\")\n"
    )
    auto.env["PYTHONPATH"] = str(shadow.parent)
    proc = auto.txctl("list", cwd=workdir)
    assert proc.returncode == 3, proc.stderr
    log = auto.state_home / "txd" / "txd.log"
    assert proc.stderr == (
        "txctl: error: cannot start txd: txd exited with code 1: ModuleNotFoundError: "
        f"No module named 'prometheus_client' (see {log})\n"
    )
    assert auto.daemons() == []
