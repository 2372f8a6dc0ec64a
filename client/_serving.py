"""The state dir's serving record, read by txctl: which host's daemon serves a state dir that
several hosts share (written by the daemon, see txd.daemon.serving; read here without
importing daemon code)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shlex
import socket
import stat
import time
from pathlib import Path
from typing import Any

RECORD = "txd.serving"
STALE_PERIODS = 3  # as the daemon counts: a heartbeat older than 3 periods is stale


@dataclasses.dataclass(frozen=True)
class Served:
    host: str
    ssh: str  # the name to reach the host by with ssh
    socket: str
    pid: int
    python: str  # the serving daemon's interpreter ("" in a record that does not say)
    heartbeat: float
    period: float

    @property
    def stale_after(self) -> float:
        return STALE_PERIODS * self.period

    def age(self) -> float:
        return max(time.time() - self.heartbeat, 0.0)

    def fresh(self) -> bool:
        return self.age() <= self.stale_after

    def takeover_in(self) -> int:
        """Whole seconds until the record is stale: a daemon started here may then take the
        state dir over."""
        return math.ceil(max(self.stale_after - self.age(), 0.0))


def unanswered(served: Served, url: str) -> str:
    """What txctl says when the host of a record that still beats does not answer (that host
    or its daemon down, or ssh failing): who serves, that it does not answer, and when a
    takeover becomes possible. Never ssh's or gRPC's own words, which say neither."""
    return (
        f"txd serves this state dir on host {served.host} (last heartbeat {served.age():.0f}s "
        f"ago), but it does not answer over ssh ({url}); if that host or its txd is down, a "
        f"daemon here can take the state dir over in {served.takeover_in()}s, once the "
        f"heartbeat is {served.stale_after:.0f}s old: run the command again then"
    )


def record_host(state_dir: Path) -> str | None:
    """The host the state dir's record names, whatever its state (the host of the daemon
    that last held the state dir, and wrote its lock file), or None: no record, or one that
    cannot be read."""
    try:
        host = json.loads((state_dir / RECORD).read_bytes())["host"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return host if isinstance(host, str) else None


# The record's ssh name goes to ssh as its destination: a host name, maybe with a user, never
# anything ssh could read as an option.
_SSH_NAME = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?[A-Za-z0-9][A-Za-z0-9.-]*$")


def other_host(state_dir: Path) -> Served | None:
    """The record of a daemon serving `state_dir` on another host (fresh or stale), or None:
    no record, a damaged one, one of this host, or one whose daemon stopped cleanly. A record
    another user could have written (not the user's own, or writable by others) is refused:
    txctl would go where it says with the user's ssh keys."""
    path = state_dir / RECORD
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read(65536)
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise RecordError(
            f"{path} is not yours alone (owner uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):04o}): txctl will not go where it says; remove it"
        )
    try:
        data = json.loads(raw)
        if data["state"] != "serving" or data["host"] == socket.gethostname():
            return None
        if not _SSH_NAME.match(str(data["ssh"])):
            raise RecordError(f"{path} names no usable ssh host ({data['ssh']!r}); remove it")
        return Served(
            host=str(data["host"]),
            ssh=str(data["ssh"]),
            socket=str(data["socket"]),
            pid=int(data["pid"]),
            python=str(data.get("python", "")),
            heartbeat=float(data["heartbeat"]),
            period=float(data["period"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


class RecordError(Exception):
    """A serving record txctl must not follow, with why."""


def serving_endpoint(served: Served, command: str | None = None) -> Any:
    """The ssh endpoint (txd.client._endpoint.Endpoint) of the host serving the shared state
    dir: the name its record gives, its daemon's socket, and as the remote command the txctl of
    that daemon's own install (`command` or TXD_REMOTE_COMMAND win). Raises EndpointError when
    the record's name is no usable ssh host."""
    from txd.client._endpoint import resolve

    ep = resolve(f"ssh://{served.ssh}", command=command)
    assert ep is not None  # an ssh:// URL is never the local daemon
    if served.python and not (command or os.environ.get("TXD_REMOTE_COMMAND")):
        ep = dataclasses.replace(ep, command=shlex.join([served.python, "-m", "txd.client.cli"]))
    return dataclasses.replace(ep, socket=served.socket)
