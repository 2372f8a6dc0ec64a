"""The remote end of a laptop's ssh tunnel: `txctl remote-socket` and `txctl dial-stdio`.

Both run on the daemon's host, over ssh, after txctl there has found (or started) its daemon
as it always does. Each first prints the marker line (txd.client._tunnel.MARKER): anything
the tunnel reads before it was printed by a login script, and is reported as such.
"""

from __future__ import annotations

import os
import selectors
import socket
import sys

MARKER = "--txd-remote-v1--"  # txd.client._tunnel.MARKER (not imported: that module is asyncio's)
CHUNK = 256 * 1024


def print_socket(path: str) -> int:
    """remote-socket: the marker line, then the daemon's socket."""
    sys.stdout.write(f"{MARKER}\n{path}\n")
    sys.stdout.flush()
    return 0


def dial_stdio(path: str) -> int:
    """dial-stdio: the marker line, then bytes copied between stdin/stdout and the daemon's
    socket until either side ends."""
    conn = socket.socket(socket.AF_UNIX)
    conn.connect(path)
    out = sys.stdout.fileno()
    os.write(out, f"{MARKER}\n".encode())
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ, "in")
    sel.register(conn, selectors.EVENT_READ, "sock")
    with conn, sel:
        while True:  # ends at EOF of either side, or an error
            for key, _ in sel.select():
                try:
                    if key.data == "in":
                        data = os.read(0, CHUNK)
                        if not data:
                            return 0
                        conn.sendall(data)
                    else:
                        data = conn.recv(CHUNK)
                        if not data:
                            return 0
                        _write_all(out, data)
                except OSError:
                    return 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
