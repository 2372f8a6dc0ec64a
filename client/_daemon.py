"""Finding the daemon, and starting one in the background when none answers."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from txd import defaults

START_TIMEOUT = 15.0
# How long a client waits for a live daemon to bind its removed socket again (it checks its
# socket every second: txd.daemon.sockwatch).
RECOVER_WAIT = 5.0


def is_listening(path: Path) -> bool:
    """True when something accepts connections on the Unix socket (costs well under 1 ms)."""
    return connect_error(path) is None


def connect_error(path: Path) -> OSError | None:
    """Why connecting to the Unix socket fails (PermissionError: another user's socket or
    folder), or None when something accepts."""
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
            return None
        except OSError as e:
            return e


def spawn(
    socket_path: Path,
    state_dir: Path,
    log_path: Path,
    *,
    args: Sequence[str] = (),
    prefix: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = START_TIMEOUT,
) -> tuple[subprocess.Popen[bytes], str]:
    """Starts `python -m txd.daemon` on `socket_path` and `state_dir` in a session of its own,
    its output appended to `log_path`, and returns it with the first line it wrote on its
    --ready-fd pipe: `ready`, `busy: ...` (another daemon serves, or is about to serve, this
    socket) or `error: ...`; "" when it exited, or said nothing for `timeout` seconds. Nothing
    polls: the pipe says. `args` go after txd's own; `prefix` is a command that execs its
    arguments (the daemon keeps its pid). The one way txd is started: txctl's autostart and
    the tests' (and the bench's) daemons alike."""
    log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # A txctl run by a systemd service of its own (a CI runner, say) has NOTIFY_SOCKET: the
    # daemon it starts must not speak for that service.
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "NOTIFY_SOCKET"}
    read_end, write_end = os.pipe()
    try:
        try:
            # The daemon's log is the user's alone, as everything in its state dir.
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            with open(os.open(log_path, flags, 0o600), "ab") as log:
                proc = subprocess.Popen(
                    [
                        *prefix,
                        sys.executable,
                        "-m",
                        "txd.daemon",
                        "--socket",
                        str(socket_path),
                        "--state-dir",
                        str(state_dir),
                        "--ready-fd",
                        str(write_end),
                        *args,
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(write_end,),
                    start_new_session=True,
                    close_fds=True,
                    cwd=cwd,
                    env=env,
                )
        finally:
            os.close(write_end)  # the daemon's copy is what is left: EOF when it exits
        return proc, _read_line(read_end, timeout)
    finally:
        os.close(read_end)


def start_daemon(path: Path, state_dir: Path, *, timeout: float = START_TIMEOUT) -> int | None:
    """Starts `txd` detached from this process, on `path` with `state_dir`, and returns its pid
    once it serves, or None when another daemon serves `path` (another client's autostart won
    the race). Raises RuntimeError with the daemon's own reason, or with its log file when it
    gave none."""
    try:
        defaults.own_state_dir(state_dir)
    except defaults.StateDirError as e:
        raise RuntimeError(str(e)) from None
    log_path = state_dir / "txd.log"
    proc, line = spawn(path, state_dir, log_path, timeout=timeout)
    if line == "ready":
        return proc.pid
    if line:
        # A daemon that said it will not serve is on its way out: reap it, so that when this
        # returns only the daemon that serves is left (and no zombie is).
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=START_TIMEOUT)
    kind, _, why = line.partition(": ")
    if kind == "busy":
        # The winner of a start-up race may hold the state dir a moment before it serves:
        # give it until START_TIMEOUT (a start-up race only, so a short poll is fine).
        if _until_listening(path, START_TIMEOUT):
            return None
        raise RuntimeError(
            f"{why}, but nothing answers on {path} within {START_TIMEOUT:g}s: see why in "
            f"{log_path}; if that txd is stuck, stop it (its jobs stay in the state dir) and "
            "run the command again"
        )
    if kind == "error":
        raise RuntimeError(why)
    if is_listening(path):  # died for some other reason, yet another daemon serves here
        return None
    # Its pipe ends as it exits, a moment before it can be reaped.
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=1.0)
    code = proc.poll()
    state = f"exited with code {code}" if code is not None else f"is not ready after {timeout}s"
    said = last_line(log_path) if code is not None else ""
    raise RuntimeError(
        f"txd {state}: {said} (see {log_path})" if said else f"txd {state}; see {log_path}"
    )


def last_line(log_path: Path, tail: int = 4096) -> str:
    """The last line a daemon wrote to its log: after a crash at start (a module missing, say)
    it names the cause, as a traceback's last line does."""
    try:
        with open(log_path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - tail))
            lines = log.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


class NoDaemon(Exception):
    """No daemon answers on the socket and none could be started: the message says why."""


def ensure_local(
    path: Path,
    state_dir: Path,
    *,
    autostart: bool,
    timeout: float = START_TIMEOUT,
    remote: bool = False,
) -> str | None:
    """Sees that a daemon answers on `path`, as txctl and the Runner need one: a daemon of
    `state_dir` that lost its socket file gets time to bind it again; else, when `autostart`,
    one is started (through the user's systemd unit where `txd unit install` made one for this
    socket). Returns the line saying what was started, or None. Raises NoDaemon otherwise.
    `remote`: for the tunnel of a client on another host (remote-socket, dial-stdio), whose
    user cannot "start one with `txd`" where they are."""
    error = connect_error(path)
    if error is None:
        return None
    # A daemon serving the state dir on this very socket, whose socket file was removed,
    # binds it again within seconds: wait for that rather than start a second one.
    lost = until_back(path, state_dir)
    if lost is None:
        return None
    if lost:
        raise NoDaemon(lost)
    if isinstance(error, PermissionError):  # another user's: never start a daemon over it
        raise NoDaemon(
            f"cannot connect to txd on {path}: permission denied (the socket or its folder is "
            "another user's; use your own with --socket or TXD_SOCKET)"
        )
    if not autostart:
        if remote:
            raise NoDaemon(
                f"no txd daemon answers on {path} on host {socket.gethostname()}, and the "
                "tunnel was opened with --no-autostart (without it, txctl starts one there)"
            )
        raise NoDaemon(f"no txd daemon answers on {path} (start one with `txd`)")
    # Where `txd unit install` put a unit for this socket and systemd's user manager runs,
    # the daemon is started by it: outside this (SSH) session's scope, so logout spares it.
    systemctl = unit_systemctl(path, state_dir)
    try:
        if systemctl is not None:
            pid = start_unit(systemctl, path, timeout=timeout)
        else:
            pid = start_daemon(path, state_dir, timeout=timeout)
    except RuntimeError as e:
        raise NoDaemon(f"cannot start txd: {e}") from None
    if pid is None:  # another client's start won the race
        return None
    how = " with systemctl --user start txd" if systemctl is not None else ""
    return f"started txd (pid {pid}) on {path}{how}"


def autostart_allowed() -> bool:
    """TXD_NO_AUTOSTART=1 (txctl's --no-autostart) turns every client's autostart off."""
    return os.environ.get("TXD_NO_AUTOSTART") != "1"


def unit_systemctl(path: Path, state_dir: Path) -> str | None:
    """systemctl, when txctl should start the daemon through the user unit: `txd unit install`
    wrote it for this very socket and state dir, and the user's systemd manager answers. None
    otherwise (no unit, one for another socket, no manager): txctl starts txd itself."""
    from txd import userunit

    try:
        text = userunit.unit_path().read_text(errors="replace")
    except OSError:
        return None
    served = userunit.served_paths(text)
    if served is None or served != (os.path.abspath(path), os.path.abspath(state_dir)):
        return None
    if userunit.manager_problem():
        return None
    return userunit.systemctl()


def start_unit(systemctl: str, path: Path, *, timeout: float = START_TIMEOUT) -> int | None:
    """`systemctl --user start txd.service`, which returns once txd said READY=1 (it serves
    `path`; Type=notify), so the daemon runs in the user manager's scope, not this session's.
    Returns its pid; None when another daemon serves `path` instead (the unit's txd found it
    busy). Raises RuntimeError with systemd's reason."""
    from txd import userunit

    unit = userunit.NAME
    try:
        done = subprocess.run(
            [systemctl, "--user", "start", unit],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"`systemctl --user start {unit}` did not return within {timeout:g}s; see "
            f"`systemctl --user status {unit}`"
        ) from None
    if done.returncode != 0:
        if is_listening(path):  # the unit's txd found another daemon serving here: use it
            return None
        said = _unit_property(systemctl, "StatusText")  # txd's own "cannot start: ..."
        why = said or done.stderr.strip() or f"exit code {done.returncode}"
        raise RuntimeError(
            f"systemd could not start {unit}: {why} (see `systemctl --user status {unit}` and "
            f"`journalctl --user -u {unit}`; after repeated failures, `systemctl --user "
            f"reset-failed {unit}`)"
        )
    pid = _unit_property(systemctl, "MainPID")
    return int(pid) if pid.isdigit() and pid != "0" else None


def _unit_property(systemctl: str, name: str) -> str:
    from txd import userunit

    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(
            [systemctl, "--user", "show", "--property", name, "--value", userunit.NAME],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    return ""


def _read_line(fd: int, timeout: float) -> str:
    """The first line written to the pipe, without its newline; what came before EOF or the
    timeout otherwise (bounded in bytes and time)."""
    data = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in data and len(data) < 65536:
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            break
        data += chunk
    return data.partition(b"\n")[0].decode(errors="replace")


def _until_listening(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not is_listening(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def serving_record(state_dir: Path) -> tuple[int, str] | None:
    """(pid, socket) of the daemon that holds `state_dir`, as its lock file names them, when
    that process is alive on this host; None otherwise. The one place the client reads the
    lock file (txd.daemon.serving writes it). A state dir whose serving record names another
    host was last held there: the lock file's pid is that host's (alive here only by chance,
    or in a pid namespace the hosts share), never one to wait for or to kill here."""
    from txd.client._serving import record_host

    host = record_host(state_dir)
    if host is not None and host != socket.gethostname():
        return None
    try:
        text = (state_dir / "txd.lock").read_text(errors="replace")
    except OSError:
        return None
    pid_text, _, sock = text.partition("\n")
    try:
        pid = int(pid_text)
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return None
    except PermissionError:
        pass  # alive, another user's: its cmdline below says whether it is a txd
    with contextlib.suppress(OSError):  # a reused pid is no txd
        if b"txd" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
    return pid, sock.strip()


def until_back(path: Path, state_dir: Path) -> str | None:
    """When the daemon holding `state_dir` serves `path` but `path` does not answer (its file
    or folder was removed, say at logout): waits up to RECOVER_WAIT seconds for the daemon to
    bind it again. None once it answers; "" when no live daemon names `path` (start one);
    else what is wrong and what to do, for the user."""
    record = serving_record(state_dir)
    if record is None or record[1] != str(path):
        return ""
    pid = record[0]
    head = f"txd (pid {pid}) serves the state dir {state_dir}, but its socket {path}"
    blocked = blocking(path)
    if blocked:
        return (
            f"{head} is taken: {blocked}. txd never removes it: remove it or move it away, "
            "and txd serves there again within a few seconds"
        )
    if _until_listening(path, RECOVER_WAIT):
        return None
    return (
        f"{head} is gone, and txd did not re-create it within {RECOVER_WAIT:g}s (it checks "
        f"every second): try again; if it still fails, see why in {state_dir / 'txd.log'}, or "
        f"stop that txd (kill {pid}; its jobs stay in the state dir) and run the command again"
    )


def blocking(path: Path) -> str:
    """What sits at the socket's path (or in place of its folder) that txd will not remove:
    another user's file, or a file that is no socket; "" when nothing does."""
    from txd.filekind import describe  # an error's path only: txctl's start stays lean

    uid = os.geteuid()
    folder = path.parent
    with contextlib.suppress(OSError):
        st = folder.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            return f"its folder {folder} is now {describe(st)}"
    with contextlib.suppress(OSError):
        st = path.lstat()
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != uid:
            return f"{path} is now {describe(st)}"
    return ""
