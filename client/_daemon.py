"""Finding the daemon, and starting one in the background when none answers."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import time
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


def start_daemon(path: Path, state_dir: Path) -> int | None:
    """Starts `txd` detached from this process, on `path` with `state_dir`, and returns its pid
    once it serves, or None when another daemon serves `path` (another client's autostart won
    the race).

    The daemon says how its start went on a pipe (--ready-fd), so nothing polls: `ready`, or
    `busy: ...` (another daemon serves, or is about to serve, this socket), or `error: ...`.
    Raises RuntimeError with the daemon's own reason, or with its log file when it gave none.
    """
    log_path = state_dir / "txd.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    read_end, write_end = os.pipe()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "txd.daemon",
                "--socket",
                str(path),
                "--state-dir",
                str(state_dir),
                "--ready-fd",
                str(write_end),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(write_end,),
            start_new_session=True,
            close_fds=True,
        )
    os.close(write_end)
    try:
        line = _read_line(read_end, START_TIMEOUT)
    finally:
        os.close(read_end)
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
    state = (
        f"exited with code {code}" if code is not None else f"is not ready after {START_TIMEOUT}s"
    )
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
