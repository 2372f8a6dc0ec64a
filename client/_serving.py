"""The state dir's serving record, read by txctl: which host's daemon serves a state dir that
several hosts share (written by the daemon, see txd.daemon.serving; read here without
importing daemon code)."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from pathlib import Path

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


def other_host(state_dir: Path) -> Served | None:
    """The record of a daemon serving `state_dir` on another host (fresh or stale), or None:
    no record, a damaged one, one of this host, or one whose daemon stopped cleanly."""
    try:
        data = json.loads((state_dir / RECORD).read_bytes())
        if data["state"] != "serving" or data["host"] == socket.gethostname():
            return None
        return Served(
            host=str(data["host"]),
            ssh=str(data["ssh"]),
            socket=str(data["socket"]),
            pid=int(data["pid"]),
            python=str(data.get("python", "")),
            heartbeat=float(data["heartbeat"]),
            period=float(data["period"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
