"""The read door: Status answered on a Unix socket of its own, `<socket>.read`, by a process of
its own (daemon.readserver), which the daemon starts, watches and stops.

grpc.aio takes calls one at a time on the event loop, the loop that also starts jobs and
streams log chunks and Watch statuses: under a storm of submissions a Status call waited behind
70-90 others before gRPC took it (docs/performance.md). A thread of the daemon's own did not do:
it took the GIL from the loop at every hand-over and Run calls slowed by 10-15%. The process
reads the job store, which the status cache writes every status through to (at the end of the
event loop's turn that changed it, and always before a Wait, a Watch or a log follow's end
tells it); while the store cannot take writes (a full disk) the cache holds statuses the store
lacks, so the door is closed until writes succeed again.

The Python client and txctl ask Status there when the file exists and the socket otherwise; any
client may call txd.v1.Runner/Status on either. Not opened where the job store is on a network
file system: the daemon's connection holds the file's lock exclusively.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

from txd import defaults
from txd.daemon import access, logsetup
from txd.daemon.jobstore import on_network_fs
from txd.daemon.metrics import Metrics
from txd.daemon.readserver import STATUS
from txd.daemon.sockwatch import identity

log = logging.getLogger(__name__)

QUICK_EXIT = 10.0  # s: a process that ends sooner than this after starting failed to start
GIVE_UP = 3  # quick exits in a row, after which the door stays closed
RESTART_DELAY = 1.0  # s
STOP_TIMEOUT = 5.0  # s between SIGTERM and SIGKILL


class ReadDoor:
    def __init__(self, socket_path: Path, store_path: Path, metrics: Metrics) -> None:
        self.path = Path(defaults.read_door(socket_path))
        self.store_path = store_path
        self.metrics = metrics
        self.proc: asyncio.subprocess.Process | None = None
        self._store_ok = asyncio.Event()
        self._store_ok.set()
        self._bound: tuple[int, int, int] | None = None  # its socket's, while served
        self._moved = False  # its socket was removed or replaced: started again at once
        self._given_up = False  # no door for this daemon's life (keep() said why)

    def store_failing(self, failing: bool) -> None:
        """The status cache's word on the store (StatusCache.on_store_failing): closed while
        it cannot take writes, opened again once it can."""
        if failing:
            if self._store_ok.is_set() and not self._given_up:
                log.warning("read door closed until the job store takes writes again")
            self._store_ok.clear()
            if self.proc is not None and self.proc.returncode is None:
                # Killed, not asked: this runs before anyone is told of the status the store
                # lacks, and the process holds nothing to tidy (it only reads).
                self.proc.kill()
        elif not self._store_ok.is_set():
            self._store_ok.set()

    def check(self) -> None:
        """Starts the process again when its socket file was removed or replaced (the socket
        watch calls this each second, once the daemon serves on its own path again: a folder
        removed with both sockets in it is made again first)."""
        if self._bound is None or identity(self.path) == self._bound:
            return
        if self.proc is not None and self.proc.returncode is None and not self._moved:
            log.warning(
                "the read door's socket %s was removed or replaced: serving there again", self.path
            )
            self._moved = True
            self.proc.terminate()

    async def keep(self) -> None:
        """Runs the door's process for the daemon's life (a background task; cancelled at
        shutdown): started again when it ends, unless it keeps failing at start."""
        if on_network_fs(self.store_path.parent):
            log.info("no read door: the job store is on a network file system")
            self._given_up = True
            return
        quick = 0
        try:
            while True:
                await self._store_ok.wait()
                started = time.monotonic()
                rc = await self._run()
                if rc is None:
                    return  # refused to serve there: said why
                if self._moved or not self._store_ok.is_set():
                    self._moved = False
                    continue  # ended on purpose
                quick = quick + 1 if time.monotonic() - started < QUICK_EXIT else 1
                if quick >= GIVE_UP:
                    log.warning(
                        "read door closed: its process ended %d times in a row within %.0f s "
                        "of starting (last exit %s); Status goes through the socket",
                        quick,
                        QUICK_EXIT,
                        rc,
                    )
                    return
                log.warning("read door's process ended (exit %s): starting it again", rc)
                await asyncio.sleep(RESTART_DELAY)
        finally:
            self._given_up = True
            await self._end()

    async def _run(self) -> int | None:
        """Starts the process and returns its exit code once it ends; None when it refused
        to serve at the path (the socket's checks, which it makes just before it binds)."""
        level, fmt = logsetup.configured
        settings = {"socket": str(self.path), "store": str(self.store_path)}
        settings |= {"level": level, "format": fmt}
        self.proc = proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "txd.daemon.readserver",
            stdin=subprocess.PIPE,  # the settings, then its end tells the daemon is gone
            stdout=subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        if not self._store_ok.is_set():  # the store failed while the process was being made
            proc.kill()
        proc.stdin.write(json.dumps(settings).encode() + b"\n")
        said = (await proc.stdout.readline()).decode(errors="replace").rstrip("\n")
        if said == "ready":
            self._bound = identity(self.path)
            log.info("read door on %s (pid %d)", self.path, proc.pid)
            await self._count(proc.stdout)
        rc = await proc.wait()
        self._remove_socket()
        if said.startswith("refused: "):
            log.warning("no read door: %s", said.removeprefix("refused: "))
            return None
        return rc

    async def _count(self, told: asyncio.StreamReader) -> None:
        """The calls the process answered, into the daemon's metrics, until its stdout ends
        (readserver.Tally)."""
        while True:
            try:
                line = await told.readline()
            except ValueError:  # a line over the reader's limit: not the door's, skipped
                log.warning("the read door's process wrote a line too long to read")
                continue
            if not line:
                return
            try:
                said = json.loads(line)
                calls = [(str(code), float(s)) for code, s in said.get("calls", ())]
                dropped = int(said.get("dropped", 0))
            except (ValueError, TypeError, AttributeError):
                log.warning("the read door's process wrote %r", line[:200])
                continue
            self.metrics.answered_elsewhere(STATUS, access.UNARY, access.READ, calls)
            if dropped:
                log.warning(
                    "%d calls of the read door not counted in the metrics: the daemon read "
                    "none of its lines meanwhile",
                    dropped,
                )

    def _remove_socket(self) -> None:
        if self._bound is not None and identity(self.path) == self._bound:  # the one it served
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self._bound = None

    async def _end(self) -> None:
        proc = self.proc
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), STOP_TIMEOUT)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        self._remove_socket()
