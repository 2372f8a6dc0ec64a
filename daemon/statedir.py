"""The state dir is its user's alone: the folder 0700 and every file in it 0600.

It holds what other users must not read: the job store (each job's environment, API keys
included), the job logs, the daemon's log. The daemon writes with umask 077
(txd.schedulers.jobumask), and a client that starts it makes the folder 0700 first; a state dir
found looser (made by an older txd, or opened by hand) is tightened here, at start, and the
daemon says once what it changed. What is in a 0700 folder no other user reaches, so only a
folder found open is walked (~0.4 s of CPU for 10,000 jobs' files), not every start's.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from txd.defaults import StateDirError, own_state_dir

log = logging.getLogger(__name__)

SHOWN = 5  # paths named in the warning; the rest are counted


def make_private(state_dir: Path) -> None:
    """Creates the state dir 0700 when it is missing; refuses one that is not the user's;
    takes group and other permissions off it and off everything under it (symbolic links left
    alone) when the folder itself is open, logging what it changed at WARNING, in one line.
    Raises StateDirError."""
    own_state_dir(state_dir)
    if not os.stat(state_dir).st_mode & 0o077:
        return
    top = str(state_dir)
    changed = [_tighten(top, os.stat(top), top)]
    folders = [top]
    while folders:  # os.scandir, not os.walk or pathlib: a state dir may hold 100,000 files
        try:
            with os.scandir(folders.pop()) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # removed meanwhile
                    changed.append(_tighten(entry.path, st, top))
                    if stat.S_ISDIR(st.st_mode):
                        folders.append(entry.path)
        except FileNotFoundError:
            continue
    found = [c for c in changed if c]
    if found:
        more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        log.warning(
            "the state dir %s was open to other users: took group and other access off %s%s",
            state_dir,
            ", ".join(found[:SHOWN]),
            more,
        )


def _tighten(path: str, st: os.stat_result, top: str) -> str:
    """Takes group and other permissions off `path`; returns "PATH (was MODE)", the path
    relative to `top`, when it had any, else ""."""
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode) or not mode & 0o077:
        return ""
    try:
        os.chmod(path, mode & ~0o077)
    except OSError as e:
        raise StateDirError(
            f"cannot make {path} in the state dir private (mode {mode:04o}, owner uid "
            f"{st.st_uid}): {e.strerror}"
        ) from None
    return f"{os.path.relpath(path, top)} (was {mode:04o})"
