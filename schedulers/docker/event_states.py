"""Replica states taken from the engine's event stream alone, so that a change its events tell
in full (a container made, started, paused) is pushed without asking the engine again: a start
event says RUNNING as surely as a listing after it would.

Kept for one subscription: an app is known once an event of the subscription has named every
replica of its shape (the `txd.roles` label), which holds for every app submitted while it is
open, since the engine sends each container's create event. Apps known only in part, and every
stop (its status wants the cancel marker and frees the app's network), are left to a listing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from txd.schedulers.docker.status import from_containers
from txd.v1.app_pb2 import AppStatus

# The container's state after each event (as the engine's listing names it); a die, a destroy or
# an event not here leaves the container to a listing.
_STATE_AFTER = {
    "create": "created",
    "start": "running",
    "restart": "running",
    "unpause": "running",
    "pause": "paused",
}


@dataclass
class EventStates:
    """The containers the events of one subscription told of, by app id, then container id,
    in the container listing's form (what docker.status.from_containers reads)."""

    apps: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def add(self, event: Mapping[str, Any]) -> None:
        """Takes one container event (those without txd's app id label are ignored)."""
        if event.get("Action") == "oom":
            return  # its die event follows
        actor = event.get("Actor") or {}
        attrs = actor.get("Attributes") or {}
        if not (app_id := attrs.get("txd.app_id")):
            return
        container = actor.get("ID", "")
        state = _STATE_AFTER.get(event.get("Action", ""))
        if state is None:  # stopped or gone: not known from here on
            self._drop(app_id, container)
            return
        labels = {k: v for k, v in attrs.items() if k.startswith("txd.")}
        self.apps.setdefault(app_id, {})[container] = {
            "Id": container,
            "Names": [f"/{attrs.get('name', '')}"],
            "Labels": labels,
            "State": state,
            "Status": "",
        }

    def status(self, app_id: str) -> AppStatus | None:
        """The app's status from its containers' events alone; None unless every replica of
        its shape is known (each known one is live: a stopped one is not kept)."""
        containers = list(self.apps.get(app_id, {}).values())
        if not containers:
            return None
        try:
            shape = json.loads(containers[0]["Labels"]["txd.roles"])
            wanted = {(str(role), k) for role, n in shape for k in range(int(n))}
        except (KeyError, ValueError, TypeError):  # not made by txd: a listing tells
            return None
        have = set()
        for c in containers:
            with contextlib.suppress(KeyError, ValueError):
                have.add((c["Labels"]["txd.role"], int(c["Labels"]["txd.replica_id"])))
        if have != wanted:
            return None
        return from_containers(app_id, containers, cancelled=False)

    def forget(self, app_id: str) -> None:
        """Nothing more is wanted of the app (it ended)."""
        self.apps.pop(app_id, None)

    def _drop(self, app_id: str, container: str) -> None:
        containers = self.apps.get(app_id)
        if containers is not None:
            containers.pop(container, None)
            if not containers:
                del self.apps[app_id]
