"""Files replaced whole: written under a name of this host's and process's own beside the
target, then renamed over it, so a reader (another host on a shared state dir, node_exporter,
systemd) sees the old file or the new one, never half of either."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int, sync: bool = False) -> None:
    """Replaces `path` with `data`, its mode exactly `mode`; with `sync`, the data reaches the
    disk before the rename (what must survive a crash). The temporary name starts with '.' and
    does not end as `path` does (node_exporter reads only *.prom)."""
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.fchmod(fd, mode)  # whatever the umask
            os.write(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
