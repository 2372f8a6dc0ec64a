"""Keeping the daemon on its socket: when the socket file (or its folder) is removed or
replaced under a running daemon (systemd-logind removes $XDG_RUNTIME_DIR at the user's last
logout, tmp cleaners age files), a new server is started on the same service for the path.

A gRPC aio server cannot add a port once started, so each rebinding starts another server
object; the earlier ones keep serving the connections they accepted (an open `logs -f` or
Watch goes on) until the daemon stops. Nothing at the path that is not a stale socket of the
user's is ever removed: it is logged, and retried each check until it is gone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
from grpc_health.v1._async import HealthServicer

log = logging.getLogger(__name__)

# A stat of the socket's path this often. inotify is not in the standard library, and a watch
# would have to follow the folder and each of its parents (logind removes the parent of the
# socket's folder); one lstat a second costs a few microseconds and finds a removal within
# the "few seconds" a user waits.
CHECK_INTERVAL = 1.0

Served = tuple[grpc.aio.Server, HealthServicer]


def identity(path: Path) -> tuple[int, int, int] | None:
    """(device, inode, file type) of what sits at `path` now, None when nothing does (the
    type too: a file made after the socket's removal may get its inode number)."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode)


class Listeners:
    """Every server the daemon started on `path` (the first one, then one per rebinding), and
    the check that rebinds. `claim` makes the path usable (creates the folder privately,
    removes a stale socket of the user's; raises otherwise), `start` serves on it."""

    def __init__(
        self,
        path: Path,
        claim: Callable[[Path], None],
        start: Callable[[Path], Awaitable[Served]],
    ) -> None:
        self.path = path
        self._claim = claim
        self._start = start
        self.served: list[Served] = []
        self._bound: tuple[int, int, int] | None = None
        self._reported = ""  # the last problem logged, so that each is logged once
        self._stopping = False  # shutting down: no new server
        self._closed = False

    async def first(self) -> None:
        """Serves on the path (already claimed by the caller)."""
        self.served.append(await self._start(self.path))
        self._bound = identity(self.path)

    def lost(self) -> bool:
        """Whether the path no longer holds the socket this daemon bound."""
        return identity(self.path) != self._bound

    async def check(self) -> bool:
        """Rebinds when the socket is lost; True when the daemon serves on the path after it."""
        if self._stopping or not self.lost():
            return not self._stopping
        try:
            self._claim(self.path)
        except Exception as e:  # SocketNotPrivate, SocketBlocked, AlreadyRunning, OSError
            self._report(
                f"the socket {self.path} is gone or replaced, and txd cannot serve "
                f"there again yet: {e}"
            )
            return False
        served = await self._start(self.path)
        if self._stopping:  # the daemon began to stop meanwhile
            await served[0].stop(None)
            return False
        self.served.append(served)
        self._bound = identity(self.path)
        self._reported = ""
        log.warning(
            "the socket %s was removed or replaced: serving there again (open calls go on)",
            self.path,
        )
        return True

    def _report(self, problem: str) -> None:
        if problem != self._reported:
            log.warning("%s (checking again every %gs)", problem, CHECK_INTERVAL)
            self._reported = problem

    async def watch(self, then: Callable[[], Awaitable[object]] | None = None) -> None:
        """Checks every CHECK_INTERVAL seconds until cancelled (at shutdown); `then` runs
        after each check that leaves the daemon serving on the path (its folder there)."""
        while True:
            await asyncio.sleep(CHECK_INTERVAL)
            try:
                if await self.check() and then is not None:
                    await then()
            except Exception:  # a failed start: logged, tried again next time
                log.exception("serving again on %s failed", self.path)

    async def enter_graceful_shutdown(self) -> None:
        """Health NOT_SERVING on every server; no new server from here on."""
        self._stopping = True
        for _, health in self.served:
            await health.enter_graceful_shutdown()

    async def stop(self, grace: float) -> None:
        """Stops every server at once: calls still running get `grace` seconds. Once is
        enough; a second call returns at once."""
        if self._closed:
            return
        self._stopping = self._closed = True
        await asyncio.gather(*(server.stop(grace) for server, _ in self.served))
        if self._bound is not None and identity(self.path) == self._bound:
            os.unlink(self.path)  # ours: a later daemon finds no leftover
