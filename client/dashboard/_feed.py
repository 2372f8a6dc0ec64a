"""Every job's row, from one Events subscription shared by all the browser tabs.

The dashboard subscribes once (snapshot, then follow) and keeps a compact row per job; each
tab's event stream gets the rows whole on connecting (one message, rendered in one go), then
each change. A tab that falls behind by more than `QUEUE` messages is dropped: its EventSource
reconnects and starts again from the rows whole, so the server never holds an unbounded backlog.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from txd.client._errors import TxdError
from txd.v1 import AppState
from txd.v1 import runner_pb2 as pb
from txd.v1.app_pb2 import AppStatus

QUEUE = 10_000  # messages a tab may lag behind before it is dropped
RETRY = 2.0  # seconds between subscriptions when the daemon cannot be reached
STATES = {value: name for name, value in AppState.items()}


def _ms(ts: Any) -> int:
    return int(ts.seconds * 1000 + ts.nanos // 1_000_000) if ts.seconds else 0


def row(status: AppStatus, committed: int = 0) -> dict[str, Any]:
    """What the table shows of a job (built by hand: MessageToDict is ~30x slower, and the
    snapshot holds every job)."""
    replicas: dict[str, int] = {}
    for role in status.roles:
        for replica in role.replicas:
            name = STATES.get(replica.state, str(replica.state))
            replicas[name] = replicas.get(name, 0) + 1
    return {
        "handle": status.app_handle,
        "name": status.name,
        "scheduler": status.scheduler,
        "app_id": status.app_id,
        "state": STATES.get(status.state, str(status.state)),
        "msg": status.msg,
        "created": _ms(status.created),
        "updated": _ms(status.updated),
        "stale": status.stale_msg,
        "replicas": replicas,
        "committed": committed,  # when the daemon committed the change (ms since the epoch)
    }


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class Tab:
    """One browser tab's stream: a bounded queue of encoded SSE messages."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE)
        self.dropped = False

    def put(self, message: bytes | None) -> None:
        if self.dropped:
            return
        try:
            self.queue.put_nowait(message)
        except asyncio.QueueFull:
            self.dropped = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(None)  # ends the stream; the tab reconnects


class Feed:
    def __init__(self, log: Callable[[str], None] | None = None) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.error = ""
        self.tabs: set[Tab] = set()
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))

    def snapshot(self) -> bytes:
        return sse("snapshot", {"rows": list(self.rows.values()), "error": self.error})

    def subscribe(self) -> Tab:
        tab = Tab()
        tab.put(self.snapshot())
        self.tabs.add(tab)
        return tab

    def unsubscribe(self, tab: Tab) -> None:
        self.tabs.discard(tab)

    def close(self) -> None:
        for tab in self.tabs:
            tab.put(None)

    def _broadcast(self, message: bytes) -> None:
        for tab in self.tabs:
            tab.put(message)

    async def run(self, client: Any) -> None:
        """Follows the daemon's events until cancelled; subscribes again (snapshot first)
        when the client's own reconnects give up."""
        while True:  # ends when cancelled (the server stops)
            try:
                await self._follow(client)
            except TxdError as e:
                self.error = f"the events stream failed: {e}"
                self._log(f"txctl dashboard: {self.error}; subscribing again in {RETRY:g}s")
                self._broadcast(sse("failed", {"error": self.error}))
            await asyncio.sleep(RETRY)

    async def _follow(self, client: Any) -> None:
        pending: dict[str, dict[str, Any]] = {}
        synced = False
        async for event in client.events(snapshot=True, follow=True):
            kind = event.kind
            if kind == pb.EventsResponse.SNAPSHOT:
                pending[event.status.app_handle] = row(event.status, _ms(event.time))
            elif kind == pb.EventsResponse.SYNCED and not synced:
                synced = True
                self.rows, pending = pending, {}
                self.error = ""
                self.synced.set()
                self._broadcast(self.snapshot())
            elif kind == pb.EventsResponse.CHANGED:
                r = row(event.status, _ms(event.time))
                self.rows[r["handle"]] = r
                self._broadcast(sse("changed", r))
            elif kind == pb.EventsResponse.DELETED:
                handle = event.status.app_handle
                self.rows.pop(handle, None)
                self._broadcast(sse("deleted", {"handle": handle}))
