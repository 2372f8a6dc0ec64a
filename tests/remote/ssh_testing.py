"""Two SSH login nodes on loopback, and the laptop that reaches them with the real `ssh`.

`SshCluster.start(root)` (the `ssh_cluster` fixture of tests/remote/conftest.py) starts two real
`sshd` processes, login1 on 127.0.0.2 and login2 on 127.0.0.3 (ports from scripts/free-ports,
so two clusters can run at once), each in a UTS namespace of its own (its hostname) and a mount
namespace of its own (its own /tmp and /run/user, so its own daemon socket), sharing one home
directory of the test user USER (a folder of this cluster's, bind-mounted at that user's home
on both nodes). USER2, a second Unix user with a home of its own, is there for refusals. Key
auth only, with keys generated here; the laptop is this process's host, using `ssh -F
cluster.ssh_config` (host aliases login1, login2; `ssh://login1` logs in as USER,
`ssh://txdssh2@login1` as USER2). The remote txctl is this tree's venv (REMOTE_TXCTL, readable
by every user).

API (small on purpose; h19-cluster builds on it):
- `cluster.nodes` / `cluster.node("login1")`: LoginNode with `.name`, `.address`, `.port`,
  `.url(user=None)` ("ssh://login1"), `.ssh(command, user=...)` and `.txctl(*args, user=...)`
  (run over ssh as that user, a CompletedProcess with text), `.pids()` (every process in the
  node's namespaces: its sshd, sessions and daemons).
- `cluster.home`: USER's shared home (on the laptop's side), `cluster.ssh_config`,
  `cluster.laptop_env(**extra)`: the environment of a laptop txctl (TXD_SSH_COMMAND with the
  config, its own runtime and config folders, TXD_REMOTE_COMMAND = REMOTE_TXCTL),
  `cluster.laptop_txctl(*args, env=None, timeout=...)`.
- `node.session_pids(pid)`: the sshd session serving the laptop's ssh process `pid`;
  `node.commands(text)`, `laptop_commands(text)`: processes by command line, on either side.
- `master_dies_while_frozen(cluster, node, handle)`: issue 33's frozen node, scripted.
- `cluster.close()`: kills every process of the nodes' namespaces and the laptop's tunnels.
Needs root (users, namespaces); `skip_reason()` says why it cannot run otherwise.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REMOTE_TXCTL = str(Path(sys.executable).parent / "txctl")
USER = "txdssh1"
USER2 = "txdssh2"
SSHD = "/usr/sbin/sshd"
NODES = (("login1", "127.0.0.2"), ("login2", "127.0.0.3"))
START_TIMEOUT = 20.0
CALL_TIMEOUT = 60.0


def skip_reason() -> str | None:
    if os.getuid() != 0:
        return "the SSH login nodes need root (users, namespaces)"
    for tool in (SSHD, "ssh", "ssh-keygen", "unshare", "useradd"):
        if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
            return f"{tool} is missing (scripts/install-backends installs openssh-server)"
    return None


def ensure_users() -> None:
    """USER and USER2 exist (bash as their shell, an unlocked password field so that sshd
    without PAM lets keys in); their homes are mount points the nodes bind over."""
    for user in (USER, USER2):
        try:
            pwd.getpwnam(user)
        except KeyError:
            subprocess.run(
                ["useradd", "-M", "-d", f"/home/{user}", "-s", "/bin/bash", user],
                check=True,
                capture_output=True,
            )
        subprocess.run(["usermod", "-p", "*", user], check=True, capture_output=True)
        Path(f"/home/{user}").mkdir(parents=True, exist_ok=True)


def _free_ports(n: int) -> list[int]:
    out = subprocess.run(
        [str(REPO / "scripts" / "free-ports"), str(n)], capture_output=True, text=True, check=True
    )
    return [int(p) for p in out.stdout.split()]


def _chown_tree(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for dirpath, _dirs, files in os.walk(path):
        os.chown(dirpath, entry.pw_uid, entry.pw_gid)
        for name in files:
            os.chown(os.path.join(dirpath, name), entry.pw_uid, entry.pw_gid)


COVERED = (Path("/tmp"), Path("/run/user"))  # each node gets empty ones of its own


def _kept_visible() -> tuple[list[str], list[str]]:
    """Shell lines that keep this interpreter's installation and this tree (its venv runs the
    nodes' txctl) readable by the test users in a node's namespace, at their own paths: each is
    bound aside read-only first; then a folder above it that is private (a pyenv under /root) is
    covered by an open tmpfs; after the node's own /tmp and /run/user are mounted (a clone under
    /tmp would vanish), each is bound back. Returns (before, after) those mounts."""
    paths = sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), REPO})
    kept = [p for p in paths if not any(q != p and q in p.parents for q in paths)]
    before: list[str] = []
    after: list[str] = []
    for k, path in enumerate(kept):
        closed = next((p for p in reversed(path.parents) if not os.stat(p).st_mode & 0o005), None)
        covered = any(c == path or c in path.parents for c in COVERED)
        if closed is None and not covered:
            continue
        q, aside = shlex.quote(str(path)), f"/mnt/kept{k}"
        before += [f"mkdir {aside}", f"mount --bind -o ro {q} {aside}"]
        if closed is not None:
            before.append(f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(closed))}")
        after += [f"mkdir -p {q}", f"mount --bind {aside} {q}"]
    return before, after


@dataclass
class LoginNode:
    cluster: SshCluster
    name: str
    address: str
    port: int
    proc: subprocess.Popen[bytes] | None = None
    log: Path = Path()
    listening: threading.Event = field(default_factory=threading.Event)
    drain: threading.Thread | None = None

    def url(self, user: str | None = None) -> str:
        return f"ssh://{user + '@' if user else ''}{self.name}"

    def ssh(
        self, command: str, *, user: str = USER, timeout: float = CALL_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """`command` run by the user's login shell on this node, over the real ssh."""
        return subprocess.run(
            ["ssh", "-F", str(self.cluster.ssh_config), f"{user}@{self.name}", command],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def txctl(
        self, *args: str, user: str = USER, timeout: float = CALL_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """The node's txctl (REMOTE_TXCTL) run there as `user`, over ssh."""
        return self.ssh(shlex.join([REMOTE_TXCTL, *args]), user=user, timeout=timeout)

    def daemon_pids(self) -> list[int]:
        """The txd daemons running in this node's namespace."""
        out = []
        for pid in self.pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"txd.daemon" in cmdline:
                out.append(pid)
        return out

    def session_pids(self, client_pid: int) -> list[int]:
        """The node's processes holding the server end of a TCP connection of the laptop's
        process `client_pid` (an ssh client): the sshd session serving it."""
        ends = {_tcp_ends().get(inode) for inode in _socket_inodes(client_pid)} - {None}
        peers = {inode for inode, (a, b) in _tcp_ends().items() if (b, a) in ends}
        return [pid for pid in self.pids() if _socket_inodes(pid) & peers]

    def commands(self, text: str) -> list[int]:
        """The node's processes whose command line contains `text`."""
        return [pid for pid in self.pids() if text in command_line(pid)]

    def pids(self) -> list[int]:
        """Every process in this node's mount namespace (sshd, sessions, daemons)."""
        if self.proc is None:
            return []
        try:
            ns = os.readlink(f"/proc/{self.proc.pid}/ns/mnt")
        except OSError:
            return []
        own = os.readlink("/proc/self/ns/mnt")
        if ns == own:  # the unshare has not entered its namespace (or is gone)
            return [self.proc.pid]
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/ns/mnt") == ns:
                        out.append(int(entry))
        return out

    def _start(self, extra_options: Mapping[str, str]) -> None:
        fix = self.cluster.root
        conf = fix / f"sshd_{self.name}.conf"
        options = {
            "Port": str(self.port),
            "ListenAddress": self.address,
            "HostKey": "/mnt/fix/host_key",
            "PidFile": "none",
            "UsePAM": "no",
            "StrictModes": "no",
            "AuthorizedKeysFile": "/mnt/fix/authorized_keys",
            "PasswordAuthentication": "no",
            "KbdInteractiveAuthentication": "no",
            "AllowUsers": f"{USER} {USER2}",
            "AllowStreamLocalForwarding": "yes",
            "X11Forwarding": "no",
            "PrintMotd": "no",
            "LogLevel": "VERBOSE",
            **extra_options,
        }
        conf.write_text("".join(f"{k} {v}\n" for k, v in options.items()))
        homes = {USER: self.cluster.home, USER2: self.cluster.home2}
        kept_before, kept_after = _kept_visible()
        script = "\n".join(
            [
                "set -e",
                f"hostname {self.name}",
                "mount -t tmpfs -o mode=755 tmpfs /mnt",
                "mkdir /mnt/fix",
                f"mount --bind {shlex.quote(str(fix))} /mnt/fix",
                *(f"mount --bind {shlex.quote(str(h))} /home/{u}" for u, h in homes.items()),
                *kept_before,
                "mount -t tmpfs -o mode=1777 tmpfs /tmp",
                "mkdir -p /run/user",
                "mount -t tmpfs -o mode=755 tmpfs /run/user",
                *kept_after,
                f"exec {SSHD} -D -e -f /mnt/fix/{conf.name}",
            ]
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.log = fix / f"sshd_{self.name}.log"
        self.proc = subprocess.Popen(
            ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()

    def _drain(self) -> None:
        """Copies sshd's log to self.log; sets `listening` at its "Server listening" line."""
        assert self.proc is not None and self.proc.stderr is not None
        with self.log.open("wb") as out, self.proc.stderr:
            for line in self.proc.stderr:
                out.write(line)
                out.flush()
                if b"Server listening on" in line:
                    self.listening.set()
        self.listening.set()  # exited: start() sees it is not running


def command_line(pid: int) -> str:
    """The process's arguments joined by spaces ("" once it has exited)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def laptop_commands(text: str) -> list[int]:
    """The processes of this host (not of a login node's namespaces) whose command line
    contains `text`, this one excepted."""
    own = os.readlink("/proc/self/ns/mnt")
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/mnt") == own and text in command_line(int(entry)):
                    out.append(int(entry))
    return out


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    out.add(link[len("socket:[") : -1])
    return out


def _tcp_ends() -> dict[str, tuple[str, str]]:
    """Every TCP socket of this network namespace: inode -> (local, remote) address."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                out[fields[9]] = (fields[1], fields[2])
    return out


def unix_connections(path: Path) -> int:
    """How many connected sockets are bound to `path` (a listener's accepted connections)."""
    with open("/proc/net/unix") as f:
        next(f)
        rows = [line.split(maxsplit=7) for line in f]
    return sum(1 for r in rows if len(r) == 8 and r[5] == "03" and r[7].strip() == str(path))


def master_dies_while_frozen(cluster: SshCluster, node: LoginNode, handle: str) -> list[int]:
    """Issue 33's wedge, scripted: the node's sshd session serving the laptop's tunnel master
    is stopped (SIGSTOP), `txctl status HANDLE` sent through the tunnel, the master killed
    (SIGKILL) once that call waits in it, the session continued (SIGCONT). Returns the
    session's pids, once that status has ended."""
    (folder,) = (cluster.laptop / "run" / "txd" / "tunnels").iterdir()
    master = int((folder / "ssh.pid").read_text())
    session = node.session_pids(master)
    assert session, "no sshd session serves the tunnel's master"
    for pid in session:
        os.kill(pid, signal.SIGSTOP)
    try:
        frozen = subprocess.Popen(
            [REMOTE_TXCTL, "--host", node.url(), "status", handle],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=cluster.laptop_env(),
        )
        try:
            # The call waits in the master, for a channel the node does not open.
            deadline = time.monotonic() + CALL_TIMEOUT
            while unix_connections(folder / "fwd.sock") == 0:
                assert time.monotonic() < deadline, "the status call never reached the master"
                time.sleep(0.02)
            os.kill(master, signal.SIGKILL)
            frozen.wait(timeout=CALL_TIMEOUT)  # it ends, one way or another
        finally:
            frozen.kill()
            frozen.wait()
    finally:
        for pid in session:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    return session


class SshCluster:
    def __init__(self, root: Path, sshd_options: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.home = root / "home"
        self.home2 = root / "home2"
        self.laptop = root / "laptop"
        self.ssh_config = root / "ssh_config"
        self.key = root / "id_ed25519"
        ports = _free_ports(len(NODES))
        self.nodes = [LoginNode(self, n, a, p) for (n, a), p in zip(NODES, ports, strict=True)]
        self.sshd_options = dict(sshd_options or {})

    @classmethod
    def start(cls, root: Path, sshd_options: Mapping[str, str] | None = None) -> SshCluster:
        cluster = cls(root, sshd_options)
        try:
            cluster._start()
        except BaseException:
            cluster.close()
            raise
        return cluster

    def node(self, name: str) -> LoginNode:
        return next(n for n in self.nodes if n.name == name)

    def _start(self) -> None:
        ensure_users()
        os.chmod(self.root, 0o755)
        for home, user in ((self.home, USER), (self.home2, USER2)):
            home.mkdir(mode=0o755)
            (home / ".profile").write_text("")
            (home / ".bashrc").write_text("")
            _chown_tree(home, user)
        (self.laptop / "run").mkdir(parents=True, mode=0o700)
        (self.laptop / "config").mkdir(mode=0o700)
        for key in (self.root / "host_key", self.key):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
            )
        (self.root / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())
        os.chmod(self.root / "authorized_keys", 0o644)
        self.ssh_config.write_text(
            "".join(
                f"Host {n.name}\n  HostName {n.address}\n  Port {n.port}\n  User {USER}\n"
                for n in self.nodes
            )
            + f"Host *\n  IdentityFile {self.key}\n  IdentitiesOnly yes\n  BatchMode yes\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
            "  ConnectTimeout 10\n"
        )
        for node in self.nodes:
            node._start(self.sshd_options)
        for node in self.nodes:
            if not node.listening.wait(START_TIMEOUT) or node.proc.poll() is not None:  # type: ignore[union-attr]
                raise RuntimeError(f"sshd of {node.name} did not start: {node.log.read_text()}")

    def laptop_env(self, **extra: str) -> dict[str, str]:
        drop = ("TXD_SOCKET", "TXD_NO_AUTOSTART", "TXD_CONFIG", "TXD_HOST", "TXD_STATE_DIR")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env.update(
            XDG_RUNTIME_DIR=str(self.laptop / "run"),
            XDG_CONFIG_HOME=str(self.laptop / "config"),
            TXD_SSH_COMMAND=f"ssh -F {self.ssh_config}",
            TXD_REMOTE_COMMAND=REMOTE_TXCTL,
        )
        env.update(extra)
        return env

    def laptop_txctl(
        self, *args: str, env: Mapping[str, str] | None = None, timeout: float = CALL_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [REMOTE_TXCTL, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else self.laptop_env(),
            stdin=subprocess.DEVNULL,
        )

    def tunnel_pids(self) -> list[int]:
        """The laptop's tunnel processes (each records its pid in its folder)."""
        out = []
        for pidfile in (self.laptop / "run").glob("txd/tunnels/*/tunnel.pid"):
            with contextlib.suppress(OSError, ValueError):
                out.append(int(pidfile.read_text()))
        return out

    def close(self) -> None:
        for pid in self.tunnel_pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        for node in self.nodes:
            for pid in node.pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if node.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(timeout=10)
            if node.drain is not None:
                node.drain.join(timeout=10)
