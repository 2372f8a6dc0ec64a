"""Errors that mean the host ran out of something (disk space, file descriptors, memory), not
that txd has a bug: wherever the daemon meets them, the client is told RESOURCE_EXHAUSTED with
what ran out, and may try again once the load or the full disk is gone."""

from __future__ import annotations

import errno
import sqlite3

EXHAUSTED_ERRNOS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EMFILE: "txd has as many files open as its limit allows (RLIMIT_NOFILE)",
    errno.ENFILE: "the system has as many files open as it allows",
    errno.ENOMEM: "out of memory",
    errno.EAGAIN: "out of processes or threads",
}


def exhausted(e: BaseException) -> str | None:
    """What ran out, for an error that says the host ran out of something; else None."""
    if isinstance(e, sqlite3.OperationalError) and getattr(e, "sqlite_errorcode", None) in (
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_NOMEM,
    ):
        return f"the job store cannot be written: {e}"
    if isinstance(e, sqlite3.OperationalError) and "unable to open" in str(e):
        return f"the job store cannot be opened: {e}"
    if isinstance(e, OSError) and e.errno in EXHAUSTED_ERRNOS:
        where = f" ({e.filename})" if e.filename else ""
        return f"{EXHAUSTED_ERRNOS[e.errno]}: {e.strerror}{where}"
    return None
