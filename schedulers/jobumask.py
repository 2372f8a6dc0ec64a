"""The umask of the processes txd starts for the user's jobs.

The daemon keeps what it writes to itself (umask 077, txd.daemon.main: its job store, its job
logs, its state dir's folders), but a job must behave as if started from the user's shell: the
processes a backend starts for a job (local replicas, sbatch and bsub, which hand their umask to
the job, ssh) run with `user_umask()`, the umask the daemon was started with.
"""

from __future__ import annotations

import os

PRIVATE = 0o077

_user: int | None = None


def keep_private() -> None:
    """From here on, everything this process creates is its owner's alone (umask 077); the
    umask it had is kept for the user's jobs."""
    global _user
    previous = os.umask(PRIVATE)
    if _user is None:
        _user = previous


def user_umask() -> int:
    """The umask the user's jobs get: the process's before keep_private(), else its current."""
    if _user is not None:
        return _user
    current = os.umask(PRIVATE)
    os.umask(current)
    return current
