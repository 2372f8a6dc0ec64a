"""local_docker's statuses from what the engine says: the replicas' states from its container
listing (or inspect data put in that form), the app's from them, and the engine's events
gathered in batches, each answered with one listing."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from txd.schedulers.docker.request import container_name
from txd.schedulers.fold import app_status
from txd.v1 import AppState
from txd.v1.app_pb2 import AppStatus, ReplicaStatus

# Container states that can still change; the others are final.
LIVE = {"created", "running", "restarting", "paused", "removing"}
_EXITED = re.compile(r"Exited \((-?\d+)\)")


def exit_code(c: Mapping[str, Any]) -> int | None:
    m = _EXITED.search(c.get("Status", ""))
    return int(m.group(1)) if m else None


def _replica(
    role: str, k: int, name: str, c: Mapping[str, Any] | None, cancelled: bool, stopped: bool
) -> ReplicaStatus:
    rep = ReplicaStatus(id=k, role=role, hostname=name)
    if c is None:
        rep.state = AppState.FAILED
        rep.structured_error_msg = f"container {name} was removed outside txd"
        return rep
    state = c.get("State", "")
    if state == "running":
        rep.state = AppState.RUNNING
    elif state == "created":
        rep.state = AppState.SUBMITTED
    elif state in LIVE:  # restarting (retries), paused, removing
        rep.state = AppState.PENDING
    else:  # exited, dead
        code = exit_code(c)
        if code is not None:
            rep.exit_code = code
        if code == 0 and not stopped:
            rep.state = AppState.SUCCEEDED
        else:
            rep.state = AppState.CANCELLED if cancelled else AppState.FAILED
    return rep


def from_containers(
    app_id: str,
    containers: Sequence[Mapping[str, Any]],
    cancelled: bool,
    stopped: Collection[str] = (),
) -> AppStatus:
    """The app's status from its containers (at least one): every replica its labels name,
    those whose container is gone as FAILED. `cancelled`: txd cancelled the app, so a replica
    that exited non-zero is CANCELLED, and so is one the cancel stopped (a name in `stopped`)
    that exited 0."""
    by_key = {}
    for c in containers:
        labels = c.get("Labels") or {}
        with contextlib.suppress(KeyError, ValueError):
            by_key[(labels["txd.role"], int(labels["txd.replica_id"]))] = c
    try:
        shape = [(str(r), int(n)) for r, n in json.loads(containers[0]["Labels"]["txd.roles"])]
    except (KeyError, ValueError, TypeError):  # not made by txd: what is there
        counts: dict[str, int] = {}
        for r, k in sorted(by_key):
            counts[r] = max(counts.get(r, 0), k + 1)
        shape = list(counts.items())
    replicas = []
    for role, n in shape:
        for k in range(n):
            found = by_key.get((role, k))
            name = found["Names"][0].lstrip("/") if found else container_name(app_id, role, k)
            replicas.append(_replica(role, k, name, found, cancelled, name in stopped))
    out = app_status(app_id, replicas)
    if out.state == AppState.CANCELLED:
        out.msg = "cancelled by request"
    elif out.state == AppState.FAILED:
        out.msg = ", ".join(
            f"{r.role}/{r.id} "
            + (f"exited with {r.exit_code}" if r.HasField("exit_code") else r.structured_error_msg)
            for r in replicas
            if r.state == AppState.FAILED
        )
    return out


def as_listed(info: Mapping[str, Any]) -> dict[str, Any]:
    """A container's inspect data in the form the container listing has."""
    state = info.get("State") or {}
    out = {
        "Id": info["Id"],
        "Names": [info.get("Name", "")],
        "Labels": (info.get("Config") or {}).get("Labels") or {},
        "HostConfig": {"NetworkMode": (info.get("HostConfig") or {}).get("NetworkMode", "")},
        "State": state.get("Status", ""),
        "Status": "",
    }
    if out["State"] in ("exited", "dead"):
        out["Status"] = f"Exited ({state.get('ExitCode', 0)})"
    return out


def network_of(c: Mapping[str, Any]) -> str:
    return str((c.get("HostConfig") or {}).get("NetworkMode", ""))


def by_app(containers: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for c in containers:
        if app_id := (c.get("Labels") or {}).get("txd.app_id"):
            out.setdefault(app_id, []).append(c)
    return out


@dataclass
class Batch:
    """Events read together: the apps they name (in order), the containers that exited, the
    exit codes their die events gave, and the containers a retry started again."""

    apps: list[str] = field(default_factory=list)
    exited: list[str] = field(default_factory=list)
    codes: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> (app, die code)
    restarted: list[str] = field(default_factory=list)  # containers a retry started again

    def add(self, event: Mapping[str, Any]) -> None:
        """Adds one container event of the engine's (those of containers without txd's app id
        label are ignored)."""
        actor = event.get("Actor") or {}
        attrs = actor.get("Attributes") or {}
        if not (app_id := attrs.get("txd.app_id")):
            return
        container, action = actor.get("ID", ""), event.get("Action", "")
        code = attrs.get("exitCode", "")  # a die event's
        if app_id not in self.apps:
            self.apps.append(app_id)
        if action in ("die", "oom") and container not in self.exited:
            self.exited.append(container)
        if action == "die" and code.lstrip("-").isdigit():
            self.codes[container] = (app_id, int(code))
        elif action in ("start", "restart"):  # a retry: it runs again
            self.codes.pop(container, None)
            self.restarted.append(container)
            if container in self.exited:
                self.exited.remove(container)
