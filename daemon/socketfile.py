"""What is at a Unix socket's path before txd listens there: nothing, a stale socket of the
user's (left by a crash: removed), a live one, or something txd never removes."""

from __future__ import annotations

import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Occupant:
    """What stays at the path: a socket someone listens on (`live`), or a file that is not
    a socket of the user's (`stat` says what)."""

    stat: os.stat_result
    live: bool


def clear_stale(path: Path) -> Occupant | None:
    """None once the path is free (nothing there, or a socket of the user's nobody listens
    on, now removed); else what is there."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
        return Occupant(st, live=False)
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()
            return None
    return Occupant(st, live=True)
