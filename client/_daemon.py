"""Finding the daemon, and starting one in the background when none answers."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

from txd import defaults

START_TIMEOUT = 15.0


def is_listening(path: Path) -> bool:
    """True when something accepts connections on the Unix socket (costs well under 1 ms)."""
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False


def start_daemon(path: Path) -> int | None:
    """Starts `txd` detached from this process and returns its pid once it serves on `path`,
    or None when another client's autostart won the race and its daemon now answers.

    The daemon reports readiness by writing to a pipe (--ready-fd), so nothing polls.
    Raises RuntimeError with the daemon's log file when no daemon comes up.
    """
    log_path = defaults.state_dir() / "txd.log"
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
        ready, _, _ = select.select([read_end], [], [], START_TIMEOUT)
        ok = bool(ready) and os.read(read_end, 16).startswith(b"ready")
    finally:
        os.close(read_end)
    if not ok:
        # Several clients may autostart at once; the losers' daemons exit ("already running")
        # as soon as the winner holds the state dir, which may be a moment before the winner
        # serves: give it until START_TIMEOUT (a start-up race only, so a short poll is fine).
        if proc.wait(START_TIMEOUT) != 0 and _until_listening(path, START_TIMEOUT):
            return None
        raise RuntimeError(f"txd did not start (exit code {proc.poll()}); see {log_path}")
    return proc.pid


def _until_listening(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not is_listening(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
