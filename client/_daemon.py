"""Finding the daemon, and starting one in the background when none answers."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

START_TIMEOUT = 15.0


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
    log_path.parent.mkdir(parents=True, exist_ok=True)
    read_end, write_end = os.pipe()
    try:
        try:
            with open(log_path, "ab") as log:
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
        raise RuntimeError(f"{why}, but nothing answers on {path}")
    if kind == "error":
        raise RuntimeError(why)
    if is_listening(path):  # died for some other reason, yet another daemon serves here
        return None
    code = proc.poll()
    state = f"exited with code {code}" if code is not None else f"is not ready after {timeout}s"
    raise RuntimeError(f"txd {state}; see {log_path}")


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
