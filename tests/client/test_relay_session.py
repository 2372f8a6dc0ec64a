"""The remote end of a tunnel (`txctl remote-socket`, `dial-stdio`) whose ssh session ends: a
real process, no ssh (tests/remote/test_frozen_remote.py has it on a login node)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from txd.client._relay import HANGUP_EXIT
from txd_testing import PidWatch

SESSION = textwrap.dedent(
    """
    import sys, time
    from txd.client._relay import end_with_session
    end_with_session()
    sys.stdin.read()
    print("stdin closed: still here", flush=True)
    time.sleep(120)
    """
)


def test_the_remote_end_exits_when_its_session_does_not_when_stdin_ends() -> None:
    """`txctl remote-socket` (and dial-stdio) on the login node, its ssh session gone, kept
    running: sshd sends no hangup to a session without a terminal. The tunnel gives it no
    stdin (at EOF at once), so the end of the session is its stdout's reader going away."""
    with subprocess.Popen(
        [sys.executable, "-c", SESSION],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "stdin closed: still here\n"
        with PidWatch([proc.pid]) as watch:
            proc.stdout.close()  # the session ends: sshd's end of the pipe closes
            assert watch.wait(10) == []
        assert proc.wait() == HANGUP_EXIT
