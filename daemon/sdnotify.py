"""sd_notify(3) by hand: what a `Type=notify` unit's daemon tells systemd.

systemd passes the path of a datagram socket in $NOTIFY_SOCKET (a file path, or `@name` for an
abstract one); each state change is one datagram of `KEY=VALUE` lines. That is the whole
protocol, so no library: txd sends READY=1 once its gRPC server answers on its socket (systemd
then ends `systemctl start`), and STOPPING=1 when its shutdown begins.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

log = logging.getLogger(__name__)

ENV = "NOTIFY_SOCKET"


class Notifier:
    """Sends to the socket systemd named; does nothing when it named none (txd not under a
    notify unit). Reads and removes $NOTIFY_SOCKET at once: the jobs txd starts, and their
    children, inherit the daemon's environment, and a job that wrote to it would speak for txd
    (with NotifyAccess=main systemd ignores it, but it is still not the job's to have)."""

    def __init__(self, address: str | None = None) -> None:
        self.address = address if address is not None else os.environ.pop(ENV, "")

    def send(self, **fields: str | int) -> bool:
        """One datagram of `KEY=VALUE` lines; False when there is no socket or it failed (a
        failure is logged, never raised: systemd going away must not stop the daemon)."""
        if not self.address:
            return False
        target = self.address
        if target.startswith("@"):  # abstract namespace: a leading NUL, not a file
            target = "\0" + target[1:]
        # A value is one line: a newline (in a socket path, say) would start a field of its own.
        payload = "".join(
            f"{key}={str(value).replace(chr(10), ' ')}\n" for key, value in fields.items()
        ).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.sendto(payload, target)
        except OSError as e:
            log.warning("cannot notify systemd on %s: %s", self.address, e.strerror or e)
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.send(READY=1, MAINPID=os.getpid(), STATUS=status)

    def stopping(self) -> bool:
        return self.send(STOPPING=1, STATUS="shutting down: stopping local jobs")


def systemd_unit() -> str:
    """The systemd service this process runs in ("txd.service"), or "" when no service manager
    started it: systemd sets INVOCATION_ID for its units' processes, and the unit is the last
    part of the process's cgroup in systemd's hierarchy (v1's name=systemd, else v2's)."""
    if not os.environ.get("INVOCATION_ID"):
        return ""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return ""
    paths = {c: p for _, c, p in (line.split(":", 2) for line in lines if line.count(":") >= 2)}
    path = paths.get("name=systemd") or paths.get("", "")
    unit = path.rstrip("/").rpartition("/")[2]
    return unit if unit.endswith(".service") else ""
