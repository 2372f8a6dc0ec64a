"""A tunnel folder's lock held by a process that does not serve: real processes, no ssh
(tests/remote has the login nodes)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from txd.client._tunnel import HOLDER_SLACK, TunnelError, _served_or_gone
from txd_testing import short_tmpdir

# A tunnel process as the lock file sees it: holds the lock, records its pid and deadline
# (seconds from now; "null": serving), says so, then waits for nothing.
HOLDER = textwrap.dedent(
    """
    import fcntl, json, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    until = json.loads(sys.argv[2])
    record = {"pid": os.getpid(), "until": None if until is None else time.time() + until}
    os.pwrite(fd, json.dumps(record).encode(), 0)
    print("holding", flush=True)
    time.sleep(120)
    """
)


def _holder(lock: Path, until: float | None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock), json.dumps(until)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "holding\n"
    return proc


def test_a_holder_past_its_deadline_is_ended_and_named() -> None:
    """A tunnel wedged while it stopped kept the lock: every command waited 180 s, then said
    only that "the tunnel process" did not serve. It is now ended at once, and named."""
    folder = short_tmpdir()
    lock = folder / "tunnel.lock"
    notes: list[str] = []
    with _holder(lock, -60.0) as wedged:
        try:
            start = time.monotonic()
            assert _served_or_gone(folder / "txd.sock", lock, 60.0, notes) is False
            assert time.monotonic() - start < 30
            assert wedged.wait(10) == -9
        finally:
            wedged.kill()
    assert notes == [
        f"ended tunnel process {wedged.pid}, which held {lock} 60 s past its deadline without "
        f"serving (see {folder / 'tunnel.log'})"
    ]


def test_a_holder_within_its_deadline_is_waited_for_and_named() -> None:
    folder = short_tmpdir()
    lock = folder / "tunnel.lock"
    with _holder(lock, 600.0) as starting:
        try:
            with pytest.raises(TunnelError) as info:
                _served_or_gone(folder / "txd.sock", lock, 2 * HOLDER_SLACK, [])
            assert starting.poll() is None  # not ended: it may still serve
        finally:
            starting.kill()
    assert str(info.value) == (
        f"the tunnel process {starting.pid} holding {lock} has not served in "
        f"{2 * HOLDER_SLACK:g} s (see {folder / 'tunnel.log'})"
    )
