"""txd under a real systemd user manager (Debian's systemd 252, `systemd --user`), end to end:
`txd unit install` finds the manager, txctl's autostart starts the daemon with `systemctl
--user start txd` (so it runs in the unit's cgroup, a child of the manager, not of the
session), `systemctl --user stop` ends its jobs through txd's own shutdown (KillMode=mixed),
and without a unit for the socket txctl starts txd itself, as before.

This machine boots no systemd (PID 1 is something else) and logs nobody in through
pam_systemd, so the test starts the user manager itself, as root, the way logind's
user@UID.service would: in a cgroup of its own (delegated, in every hierarchy it uses; the
manager then puts only itself and its units there), and in a private mount namespace whose
/run/systemd/system exists (systemd refuses to run as a user instance on a machine "not
booted with systemd", and that folder is how it tells). Everything else is the real thing:
the manager's own socket in XDG_RUNTIME_DIR, its notify socket, its cgroups and kill logic.
Skipped, saying why, where that cannot be done (not root, no unshare, no systemd).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from txd_testing import (
    TXCTL,
    PidWatch,
    clean_env,
    kill_recorded_replicas,
    open_to_others,
    pids_with_marker,
    remove_tree,
    short_tmpdir,
)

SYSTEMD = Path("/usr/lib/systemd/systemd")
WAIT = 60.0  # a bound on each wait, never the result
# Hierarchies the manager uses on a cgroup v1/hybrid machine (this one); cpuset is left out:
# a new cpuset cgroup has no CPUs until it is given some, so nothing could join it.
V1_HIERARCHIES = ("systemd", "unified", "pids", "memory", "cpu")


def _cgroup_roots() -> list[Path]:
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.procs").exists():  # cgroup v2 only
        return [base]
    return [base / h for h in V1_HIERARCHIES if (base / h / "cgroup.procs").exists()]


def _why_not() -> str:
    if os.geteuid() != 0:
        return "starting a user manager by hand needs root (a cgroup and a mount namespace)"
    for tool in ("unshare", "systemctl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not SYSTEMD.exists():
        return f"{SYSTEMD} is not installed"
    if not _cgroup_roots():
        return "no cgroup file system"
    return ""


pytestmark = pytest.mark.skipif(bool(_why_not()), reason=_why_not() or "-")


class UserManager:
    """`systemd --user` for a user whose config, runtime and state folders are the test's."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runtime = root / "run"
        self.runtime.mkdir(mode=0o700)
        self.home = root / "home"
        self.home.mkdir()
        self.env = clean_env(
            XDG_RUNTIME_DIR=str(self.runtime),
            XDG_CONFIG_HOME=str(root / "config"),
            XDG_STATE_HOME=str(root / "state"),
            HOME=str(self.home),
            USER="alice",
        )
        self.env.pop("NOTIFY_SOCKET", None)
        self.socket = self.runtime / "txd" / "txd.sock"
        self.state_dir = root / "state" / "txd"
        self.cgroup = f"txd-test-usermgr-{uuid.uuid4().hex[:8]}"
        self.cgroups = [r / self.cgroup for r in _cgroup_roots()]
        # systemd --user says READY=1 on $NOTIFY_SOCKET once it is up, as txd does.
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(str(root / "manager-notify"))
        script = "set -e\n"
        for cg in self.cgroups:
            script += f'mkdir "{cg}"; echo $$ > "{cg}/cgroup.procs"\n'
        script += (
            "mount -t tmpfs tmpfs /run/systemd\n"
            "mkdir /run/systemd/system\n"
            f"exec {SYSTEMD} --user --log-target=console\n"
        )
        self.log_path = root / "manager.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                env={**self.env, "NOTIFY_SOCKET": str(root / "manager-notify")},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.notify.settimeout(WAIT)
        try:
            while b"READY=1" not in self.notify.recv(4096):
                pass  # bounded: each recv waits at most WAIT, and the manager sends few
        except TimeoutError:
            raise AssertionError(f"systemd --user not ready:\n{self.log()}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["systemctl", "--user", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=WAIT,
        )

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(command), capture_output=True, text=True, env=self.env, cwd=self.home, timeout=WAIT
        )

    def txctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(*TXCTL, *args)

    def txd_unit(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "-m", "txd.daemon", "unit", *args)

    def main_pid(self) -> int:
        return int(self.systemctl("show", "--property", "MainPID", "--value", "txd").stdout)

    def close(self) -> None:
        self.systemctl("stop", "txd")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # stops its units, then exits
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.notify.close()
        kill_recorded_replicas(self.state_dir)
        for cg in self.cgroups:  # whatever is left in them, then the folders, deepest first
            if not cg.exists():
                continue
            for procs in cg.rglob("cgroup.procs"):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            for folder in sorted((p for p in cg.rglob("*") if p.is_dir()), reverse=True):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            with contextlib.suppress(OSError):
                cg.rmdir()


@pytest.fixture
def manager() -> Iterator[UserManager]:
    root = short_tmpdir("txdt-usermgr-")
    m = None
    try:
        m = UserManager(root)
        yield m
    finally:
        if m is not None:
            m.close()
        remove_tree(root)


def _health_now(socket_path: Path) -> int:
    """One Health check that does not wait for the socket: it answers at once or fails."""
    with grpc.insecure_channel(f"unix:{socket_path}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(), timeout=5, wait_for_ready=False)
        return int(response.status)


def _cgroup_of(pid: int) -> str:
    """The pid's cgroup in systemd's own hierarchy (v1 name=systemd, else v2)."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "name=systemd":
            return path
    return next(line.split(":", 2)[2] for line in lines if line.startswith("0::"))


def _parent(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    raise AssertionError(f"no PPid for {pid}")


def test_autostart_through_the_unit(manager: UserManager) -> None:
    installed = manager.txd_unit("install")
    assert installed.returncode == 0, installed.stderr
    assert "cannot be used here" not in installed.stderr
    assert manager.systemctl("daemon-reload").returncode == 0

    started = manager.txctl("list")
    assert started.returncode == 0, started.stderr + manager.log()
    assert "with systemctl --user start txd" in started.stderr, started.stderr
    assert manager.systemctl("is-active", "txd").stdout.strip() == "active"
    pid = manager.main_pid()
    assert f"started txd (pid {pid})" in started.stderr
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"txd.daemon" in cmdline and str(manager.socket).encode() in cmdline
    # The unit's cgroup, a child of the manager: not txctl's session.
    assert _cgroup_of(pid) == f"/{manager.cgroup}/app.slice/txd.service"
    assert _parent(pid) == manager.proc.pid
    # `where` names the unit the daemon runs in.
    where = manager.txctl("where", "--json")
    assert where.returncode == 0, where.stderr
    assert json.loads(where.stdout)["systemd_unit"] == "txd.service", where.stdout
    # txd's own STATUS= line, as systemctl shows it.
    status = manager.systemctl("status", "txd").stdout
    assert f"serving on {manager.socket}" in status, status

    # Type=notify: `systemctl --user start` returns once txd said READY=1, by then it serves.
    assert manager.systemctl("stop", "txd").returncode == 0
    assert manager.systemctl("start", "txd").returncode == 0
    assert _health_now(manager.socket) == health_pb2.HealthCheckResponse.SERVING
    pid = manager.main_pid()

    # A job, then `systemctl --user stop`: SIGTERM to txd alone (KillMode=mixed), whose own
    # shutdown ends the job and records it; the next txctl starts the unit again.
    run = manager.txctl("run", "--", "utils.sh", "sleep", "300")
    assert run.returncode == 0, run.stderr
    handle = run.stdout.splitlines()[0]
    job_pids = [p for p in _cgroup_procs(_cgroup_of(pid)) if p != pid]
    assert job_pids, "the job's processes are in the unit's cgroup"
    with PidWatch([pid, *job_pids]) as watch:
        stopped = manager.systemctl("stop", "txd")
        assert stopped.returncode == 0, stopped.stderr
        assert watch.wait(WAIT) == []
    again = manager.txctl("status", handle)
    assert again.returncode == 0, again.stderr
    assert "with systemctl --user start txd" in again.stderr
    assert "CANCELLED" in again.stdout, again.stdout
    assert manager.main_pid() not in (0, pid)

    refused = manager.txd_unit("uninstall")
    assert refused.returncode == 1 and "txd.service is still active:" in refused.stderr
    assert manager.systemctl("stop", "txd").returncode == 0
    removed = manager.txd_unit("uninstall")
    assert removed.returncode == 0, removed.stderr


def test_the_units_daemon_keeps_its_state_dir_private(manager: UserManager) -> None:
    """The unit's txd makes the state dir itself, in a home others may read (0755, as on many
    clusters): 0700, every file 0600 (the job store and the job's log, each with the job's
    secret), and user nobody reads nothing of it."""
    os.chmod(manager.root, 0o755)
    manager.state_dir.parent.mkdir(mode=0o755)  # ~/.local/state, there as in any home
    assert manager.txd_unit("install").returncode == 0
    assert manager.systemctl("daemon-reload").returncode == 0
    secret = "API_KEY=txdt-90d4e2"
    run = manager.txctl("run", "--wait", "utils.echo", "--msg", secret)
    assert run.returncode == 0, run.stderr + manager.log()
    assert "with systemctl --user start txd" in run.stderr
    files = [p for p in manager.state_dir.rglob("*") if p.is_file()]
    assert sum(secret.encode() in p.read_bytes() for p in files) >= 2  # the store, the log
    assert open_to_others(manager.state_dir) == []


def test_unit_for_another_socket_is_left_alone(manager: UserManager) -> None:
    """The unit serves the default socket; txctl --socket elsewhere starts its own txd, as
    without a unit."""
    assert manager.txd_unit("install").returncode == 0
    assert manager.systemctl("daemon-reload").returncode == 0
    other = manager.root / "other" / "txd.sock"
    started = manager.txctl("--socket", str(other), "list")
    assert started.returncode == 0, started.stderr
    assert "started txd" in started.stderr and "systemctl" not in started.stderr
    assert manager.systemctl("is-active", "txd").stdout.strip() == "inactive"
    for line in Path(f"/proc/{_daemon_pid(other)}/cgroup").read_text().splitlines():
        assert manager.cgroup not in line
    manager.txctl("--socket", str(other), "where")  # still answers
    os.kill(_daemon_pid(other), signal.SIGTERM)


def test_no_unit_starts_txd_as_before(manager: UserManager) -> None:
    started = manager.txctl("list")
    assert started.returncode == 0, started.stderr
    assert "started txd" in started.stderr and "systemctl" not in started.stderr
    assert manager.systemctl("is-active", "txd").stdout.strip() != "active"
    os.kill(_daemon_pid(manager.socket), signal.SIGTERM)


def _daemon_pid(socket_path: Path) -> int:
    pids = [
        p
        for p in pids_with_marker(str(socket_path))
        if b"txd.daemon" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    assert len(pids) == 1, f"txd on {socket_path}: {pids}"
    return pids[0]


def _cgroup_procs(cgroup: str) -> list[int]:
    """The pids in a cgroup of systemd's own hierarchy (v1 name=systemd, else v2)."""
    base = Path("/sys/fs/cgroup")
    root = base / "systemd" if (base / "systemd" / "cgroup.procs").exists() else base
    return [int(p) for p in (root / cgroup.lstrip("/") / "cgroup.procs").read_text().split()]


def test_unit_that_cannot_start_says_why(manager: UserManager) -> None:
    """Another txd holds the state dir on another socket: the unit's txd refuses, and txctl
    says txd's own reason (its STATUS=), not just systemd's."""
    assert manager.txd_unit("install").returncode == 0
    assert manager.systemctl("daemon-reload").returncode == 0
    other = manager.root / "other" / "txd.sock"
    holder = manager.run(
        *TXCTL, "--socket", str(other), "--state-dir", str(manager.state_dir), "list"
    )
    assert holder.returncode == 0, holder.stderr
    try:
        failed = manager.txctl("list")
        assert failed.returncode != 0
        assert "cannot start txd: systemd could not start txd.service: cannot start:" in (
            failed.stderr
        ), failed.stderr
        assert str(manager.state_dir) in failed.stderr
        assert "Traceback" not in failed.stderr
    finally:
        manager.systemctl("stop", "txd")
        os.kill(_daemon_pid(other), signal.SIGTERM)


def test_odd_paths_reach_txd_as_written(manager: UserManager) -> None:
    """'%' and '$' in the socket's path are systemd's specifier and variable syntax: the unit
    escapes them, so the manager runs txd on the path as written (and txctl, reading the unit
    back, finds it is the one it wants)."""
    odd = manager.root / "a %i $HOME dir" / "txd.sock"
    installed = manager.txd_unit("install", "--socket", str(odd))
    assert installed.returncode == 0, installed.stderr
    assert manager.systemctl("daemon-reload").returncode == 0
    started = manager.txctl("--socket", str(odd), "where")
    assert started.returncode == 0, started.stderr
    assert "with systemctl --user start txd" in started.stderr, started.stderr
    cmdline = Path(f"/proc/{manager.main_pid()}/cmdline").read_bytes().split(b"\0")
    assert str(odd).encode() in cmdline, cmdline
