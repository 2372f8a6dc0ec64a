"""Who may connect: a second Unix user (made here with useradd, removed at teardown) cannot
reach a user's daemon by txctl, the Python client or a raw gRPC call, and a daemon refuses to
serve on a socket other users could reach. Needs root (useradd, running as another user)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from txd_testing import TXCTL, Daemon, clean_env, remove_tree, short_tmpdir

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("useradd") and shutil.which("setpriv")),
    reason="needs root, useradd and setpriv to make and be a second Unix user",
)

TIMEOUT = 30
# The other user's programs may lie where only root may look (pyenv under /root, a clone in a
# 0700 temp dir): they start with CAP_DAC_READ_SEARCH to read the code. `twice` runs the code
# once so (its output dropped: every module it needs is then loaded), gives up every
# capability (capset), and runs it again: that run is the other user's, nothing more.
_CAPS = ("--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search")
_PRELUDE = """\
import contextlib, ctypes, io, sys

class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

class _Data(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]

def twice(body):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with contextlib.suppress(SystemExit):
            body()
    none = (_Data * 2)()
    if ctypes.CDLL(None).capset(ctypes.byref(_Header(0x20080522, 0)), none):  # version 3
        sys.exit("capset failed")
    with open("/proc/self/status") as f:
        assert "CapEff:\\t0000000000000000" in f.read()
    body()
"""


@dataclass
class OtherUser:
    name: str
    uid: int
    gid: int
    home: Path

    def run_python(self, code: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Python `code` as this user (its own uid and gid, no supplementary groups, and no
        capability left once _PRELUDE has run)."""
        ids = (f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups")
        return subprocess.run(
            ["setpriv", *ids, *_CAPS, sys.executable, "-c", _PRELUDE + code, *args],
            capture_output=True,
            text=True,
            env=clean_env(
                HOME=str(self.home),
                XDG_STATE_HOME=str(self.home / "state"),
                XDG_RUNTIME_DIR=str(self.home / "run"),
            ),
            cwd=self.home,
            timeout=TIMEOUT,
        )

    def txctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run_python(
            "from txd.client.cli import main\ntwice(lambda: sys.exit(main()))", *args
        )


@pytest.fixture(scope="module")
def other_user() -> Iterator[OtherUser]:
    name = f"txdt-{uuid.uuid4().hex[:10]}"
    for _ in range(3):  # another test run may hold /etc/passwd's lock for a moment
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        if made.returncode == 0:
            break
    assert made.returncode == 0, made.stderr
    home = short_tmpdir("txdt-home-")
    try:
        entry = pwd.getpwnam(name)
        os.chown(home, entry.pw_uid, entry.pw_gid)
        yield OtherUser(name, entry.pw_uid, entry.pw_gid, home)
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=TIMEOUT)
        remove_tree(home)


# The Python client and a raw call on a generated stub, as the other user: each prints what
# became of its call, as JSON.
_CLIENTS = """
import json
import grpc
from txd.client import Client, TxdError
from txd.v1 import runner_pb2, runner_pb2_grpc

def body():
    sock = sys.argv[1]
    out = {}
    try:
        with Client(sock, timeout=10) as c:
            out["client"] = {"ok": [s.handle for s in c.list()]}
    except TxdError as e:
        out["client"] = {"error": type(e).__name__, "message": str(e)}
    with grpc.insecure_channel(f"unix:{sock}") as channel:
        try:
            runner_pb2_grpc.RunnerStub(channel).List(runner_pb2.ListRequest(), timeout=10)
            out["grpc"] = {"ok": True}
        except grpc.RpcError as e:
            out["grpc"] = {"error": e.code().name, "message": e.details()}
    print(json.dumps(out))

twice(body)
"""


def _refused_everywhere(user: OtherUser, d: Daemon) -> None:
    """txctl (autostart allowed), the client and raw gRPC, as `user`, all fail with EACCES;
    txctl says so in one line, exit 3, and starts no daemon of its own."""
    proc = user.txctl("--socket", str(d.socket), "list")
    assert proc.returncode == 3, proc
    assert proc.stderr.strip() == (
        f"txctl: error: cannot connect to txd on {d.socket}: permission denied (the socket or "
        "its folder is another user's; use your own with --socket or TXD_SOCKET)"
    )
    assert not (user.home / "state").exists()  # no autostart: it would log there
    proc = user.run_python(_CLIENTS, str(d.socket))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["client"]["error"] == "UnavailableError", got
    assert "Permission denied" in got["client"]["message"], got
    assert got["grpc"]["error"] == "UNAVAILABLE", got
    assert "Permission denied" in got["grpc"]["message"], got


def _owner_lists(d: Daemon) -> None:
    """The control: the daemon's own user is served all along."""
    proc = subprocess.run(
        [*TXCTL, "--socket", str(d.socket), "--no-autostart", "list", "--json"],
        capture_output=True,
        text=True,
        env=d.txctl_env(),
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []  # a fresh daemon of the test's own


def test_another_user_cannot_connect(daemon: Daemon, other_user: OtherUser) -> None:
    assert stat.S_IMODE(daemon.socket.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o600
    _owner_lists(daemon)
    _refused_everywhere(other_user, daemon)  # stopped by the folder
    # A folder opened after the start (a mistake): the socket file's own 0600 still holds.
    os.chmod(daemon.socket.parent, 0o755)
    _refused_everywhere(other_user, daemon)
    _owner_lists(daemon)
    assert daemon.running()


def _start(socket_path: Path, state_dir: Path) -> subprocess.CompletedProcess[str]:
    argv = ["--socket", str(socket_path), "--state-dir", str(state_dir)]
    return subprocess.run(
        [sys.executable, "-m", "txd.daemon", *argv],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=TIMEOUT,
    )


@pytest.mark.parametrize("mode", [0o755, 0o1777, 0o711, 0o750], ids=oct)
def test_refused_where_others_can_enter(mode: int) -> None:
    """A --socket whose folder others can enter (and no folder above it of the user's keeps
    them out: /tmp is root's, 1777) is refused before anything is served."""
    folder = short_tmpdir()
    state = short_tmpdir()
    try:
        os.chmod(folder, mode)
        proc = _start(folder / "txd.sock", state)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip() == (
            f"txd: the socket's folder {folder} (mode {mode:04o}) lets other users in, and no "
            f"folder of yours above it keeps them out: chmod 700 {folder}, or choose a --socket "
            "in a folder only you can enter"
        )
        assert os.listdir(folder) == []
        assert stat.S_IMODE(folder.stat().st_mode) == mode  # left as it was
    finally:
        remove_tree(folder)
        remove_tree(state)


def test_refused_in_another_users_folder(other_user: OtherUser) -> None:
    """A folder someone else owns (a /tmp/txd-UID made in advance by another user, say) is
    refused even at 0700: its owner decides who gets in."""
    folder = short_tmpdir()
    state = short_tmpdir()
    try:
        os.chown(folder, other_user.uid, other_user.gid)
        proc = _start(folder / "txd.sock", state)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip() == (
            f"txd: the socket's folder {folder} belongs to uid {other_user.uid}, not to you "
            f"(uid {os.geteuid()}): choose a folder of your own with --socket or TXD_SOCKET"
        )
        assert os.listdir(folder) == []
    finally:
        remove_tree(folder)
        remove_tree(state)


def test_served_under_a_private_folder() -> None:
    """What is accepted: an open folder below a private one of the user's (mkdir -p with umask
    022 under a 0700 home), and a missing folder, made 0700."""
    private = short_tmpdir()  # 0700
    try:
        opened = private / "open"
        opened.mkdir(mode=0o755)
        os.chmod(opened, 0o755)
        for sock in (opened / "txd.sock", private / "new" / "sub" / "txd.sock"):
            d = Daemon(private)
            d.socket = sock
            d.state_dir = private / f"state-{sock.parent.name}"
            try:
                d.start()
                _owner_lists(d)
            finally:
                d.close()
        assert stat.S_IMODE((private / "new" / "sub").stat().st_mode) == 0o700
    finally:
        remove_tree(private)


@pytest.mark.parametrize("mode", [0o700, 0o777], ids=oct)
def test_another_users_state_dir_is_refused_in_one_line(other_user: OtherUser, mode: int) -> None:
    """txctl (its autostart) and txd, as the other user, given this user's state dir: one line
    naming it and why, exit 3 (txctl) and 2 (txd), and nothing written there; one behind a
    folder they cannot enter is named too."""
    home = short_tmpdir()  # this user's, which others may enter, as a home often is
    try:
        os.chmod(home, 0o755)
        theirs = home / "state"
        theirs.mkdir()
        os.chmod(theirs, mode)
        sock = other_user.home / "run" / "txd.sock"
        why = (
            f"the state dir {theirs} belongs to uid {os.geteuid()}, not to you (uid "
            f"{other_user.uid}): use one of your own with --state-dir or TXD_STATE_DIR"
        )
        proc = other_user.txctl("--socket", str(sock), "--state-dir", str(theirs), "list")
        assert (proc.returncode, proc.stderr) == (3, f"txctl: error: cannot start txd: {why}\n")
        proc = other_user.run_python(
            "from txd.daemon.main import main\ntwice(lambda: sys.exit(main()))",
            *("--socket", str(sock), "--state-dir", str(theirs)),
        )
        assert (proc.returncode, proc.stderr) == (2, f"txd: {why}\n")
        assert os.listdir(theirs) == [] and not sock.parent.exists()
        os.chmod(home, 0o700)
        proc = other_user.txctl("--socket", str(sock), "--state-dir", str(theirs), "list")
        assert (proc.returncode, proc.stderr) == (
            3,
            f"txctl: error: cannot start txd: cannot use the state dir {theirs}: "
            "Permission denied\n",
        )
    finally:
        remove_tree(home)
