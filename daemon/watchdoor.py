"""The watch door: Watch streams served on a socket of their own beside the daemon's
(`<socket>.watch`), by the doors' small HTTP/2 server (daemon.h2door) on the daemon's event
loop instead of grpcio's.

Why: an open Watch stream mostly waits, and grpcio makes every call pay for its C-core call
(an arena of about 9 KB, 75 allocations in all) and two asyncio tasks with their coroutines:
22.5 KiB a stream before txd's own bytes, 23 KiB in the daemon (docs/performance.md). Here a
stream is h2's stream state, one task and the status cache's generator.

Any gRPC client can call /txd.v1.Runner/Watch there, with the socket's answers; every other
method answers UNIMPLEMENTED. Calls are counted in the metrics and written to the access log as
the socket's are (door "watch").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

from txd import defaults
from txd.daemon import access, socketfile, wire
from txd.daemon.core import JobService
from txd.daemon.h2door import Door, Method
from txd.daemon.sockwatch import identity
from txd.v1 import runner_pb2 as pb

log = logging.getLogger(__name__)

WATCH = "/txd.v1.Runner/Watch"


class WatchDoor(Door):
    """The watch door's server, bound beside the daemon's socket for the daemon's life."""

    def __init__(self, socket_path: Path, service: JobService) -> None:
        methods = {WATCH: Method(access.SERVER_STREAM, self._watch)}
        super().__init__(access.WATCH_DOOR, methods, service.metrics, service.tasks.create_task)
        self.path = Path(defaults.watch_door(socket_path))
        self.service = service
        self._servers: list[asyncio.AbstractServer] = []
        self._bound: tuple[int, int, int] | None = None  # its socket's, while served
        self._reported = ""  # why it is not served, logged once
        self._stopping = False  # stop() called: no new server, and a second call returns
        self._quiet = asyncio.Event()  # set when the last open call ends, once stopping

    async def start(self) -> bool:
        """Serves on the path; False, having logged why, when it cannot: only a stale socket
        of the user's is ever removed there (the checks as the socket's, just before binding),
        and the path may be too long for a socket where the daemon's is not."""
        try:
            socketfile.check_private(self.path.parent)
            socketfile.make_room(self.path)
            server = await asyncio.get_running_loop().create_unix_server(
                self.connection, str(self.path)
            )
            os.chmod(self.path, 0o600)
        except (OSError, socketfile.SocketNotPrivate, socketfile.PathTaken) as e:
            problem = f"no watch door (Watch goes through the socket): {e}"
            if problem != self._reported:
                log.warning("%s", problem)
                self._reported = problem
            return False
        self._servers.append(server)
        self._bound = identity(self.path)
        self._reported = ""
        return True

    async def check(self) -> None:
        """Serves there again when its socket was removed or replaced (the socket watch calls
        this each second once the daemon serves on its own path: the folder is there)."""
        if self._stopping or identity(self.path) == self._bound:
            return
        if self._bound is not None:
            log.warning(
                "the watch door's socket %s was removed or replaced: serving there again",
                self.path,
            )
            self._bound = None
        await self.start()

    def quiet(self) -> None:
        """A connection's last open call ended: once stopping, the wait for the open calls ends
        with the last one."""
        if self._stopping and not any(c.streams for c in self.connections):
            self._quiet.set()

    async def stop(self, grace: float) -> None:
        """No new connections; the open calls get `grace` seconds to end (a followed job's
        streams end at the daemon's shutdown, UNAVAILABLE), then are ended. Once is enough; a
        second call returns at once."""
        if self._stopping:
            return
        self._stopping = True
        for server in self._servers:
            server.close()
        self.quiet()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._quiet.wait(), grace)
        await self.finish()
        if self._bound is not None and identity(self.path) == self._bound:
            os.unlink(self.path)

    async def _watch(self, raw: bytes) -> AsyncIterator[bytes]:
        """The statuses of the job, as the socket's Watch sends them."""
        request = wire.parse(pb.WatchRequest, raw)
        async for shown in self.service.watch(request.app_handle):
            yield shown.wire()
