"""What is at a Unix socket's path before txd listens there: nothing, a stale socket of the
user's (left by a crash: removed), a live one, or something txd never removes."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from txd.filekind import describe


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


class PathTaken(Exception):
    """Something txd never removes stays at a socket's path."""


def make_room(path: Path) -> None:
    """Frees the path as clear_stale does; raises PathTaken naming what stays there."""
    there = clear_stale(path)
    if there is not None:
        what = "a socket someone listens on" if there.live else describe(there.stat)
        raise PathTaken(f"{path} is {what}, which txd never removes")


class SocketNotPrivate(Exception):
    """Other users could reach the socket: its folder is not the user's own, or it and every
    folder of the user's above it let others in."""


def check_private(folder: Path) -> None:
    """Who may connect is decided here, once, by the file system: gRPC's asyncio server tells a
    servicer nothing of its peer ("unix:"), so a per-call SO_PEERCRED check is not possible.
    The socket is private when the folder, or a folder above it (all of them the user's own,
    so nobody else can swap one), lets neither group nor others enter. mkdir leaves an
    existing folder's mode alone: a pre-made /tmp/txd-UID (another user's, or 0777) or a
    --socket in a folder anyone can enter is refused rather than served."""
    uid = os.geteuid()
    st = folder.stat()
    if st.st_uid != uid:
        raise SocketNotPrivate(
            f"the socket's folder {folder} belongs to uid {st.st_uid}, not to you (uid {uid}): "
            "choose a folder of your own with --socket or TXD_SOCKET"
        )
    real = folder.resolve()
    for above in (real, *real.parents):
        st = above.stat()
        if st.st_uid != uid:
            break
        if not st.st_mode & 0o011:  # no x for group or others: nobody else gets through
            return
    mode = stat.S_IMODE(folder.stat().st_mode)
    raise SocketNotPrivate(
        f"the socket's folder {folder} (mode {mode:04o}) lets other users in, and no folder of "
        f"yours above it keeps them out: chmod 700 {folder}, or choose a --socket in a folder "
        "only you can enter"
    )


def is_own_peer(transport: asyncio.BaseTransport) -> bool:
    """Whether the process at the other end of a Unix socket connection runs as this user
    (SO_PEERCRED: pid, uid, gid). The doors' folder keeps others out; this checks too."""
    sock = transport.get_extra_info("socket")
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return False
    return int(struct.unpack("3i", creds)[1]) == os.geteuid()
