"""The remote end of a laptop's ssh tunnel: `txctl remote-socket` and `txctl dial-stdio`.

Both run on the daemon's host, over ssh, after txctl there has found (or started) its daemon
as it always does. Each first prints the marker line (txd.client._tunnel.MARKER): anything
the tunnel reads before it was printed by a login script, and is reported as such. Each ends
when its ssh session does (end_with_session): sshd sends no hangup to a session without a
terminal, and finding or starting the daemon can take a while.
"""

from __future__ import annotations

import os
import select
import selectors
import socket
import sys
import threading

MARKER = "--txd-remote-v1--"  # txd.client._tunnel.MARKER (not imported: that module is asyncio's)
CHUNK = 256 * 1024
HANGUP_EXIT = 129  # as a process ended by SIGHUP


def end_with_session() -> None:
    """Ends this process when its stdout's reader goes away (sshd's end of the pipe closes
    with the session: the tunnel killed its ssh, or the connection died), rather than leave
    it running on the host with nobody to answer. Watched by a thread: poll() reports the
    error (a pipe) or hangup (a socket, a terminal) with no event asked for."""

    def watch() -> None:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        while True:
            for _, event in poller.poll():
                if event & (select.POLLERR | select.POLLHUP):
                    os._exit(HANGUP_EXIT)
                if event & select.POLLNVAL:  # stdout closed here: nothing to watch
                    return

    threading.Thread(target=watch, name="session-watch", daemon=True).start()


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
