"""The read door's process (daemon.readdoor starts it):

    python -m txd.daemon.readserver     (stdin: {"socket", "store", "level", "format"} as a line)

Serves txd.v1.Runner/Status on the Unix socket `socket` from a read-only connection to the job
store `store`, with the doors' HTTP/2 server (daemon.h2door) on an event loop of its own: a
process of its own, so that neither the daemon's event loop nor its GIL stands between a Status
call and its answer, and a single thread, so that no hand-over between threads does either
(grpcio's synchronous server, here before, passed each call from its poller to a worker thread
and back, and took 1.6x the CPU per call: docs/performance.md). The daemon writes every status
through to the store before it answers anyone about it, so the answer is the socket's. Prints
"ready" on stdout once serving; ends on SIGTERM, when the daemon dies (PR_SET_PDEATHSIG sends
it SIGTERM) and on stdin's end. Its log lines (the access line of each call, door `read`) go to
stderr, the daemon's log, in the daemon's format; the Status calls' codes and times go to the
daemon on stdout, a JSON line every quarter second, for its gRPC server metrics.
The settings come on stdin, not as arguments: a process whose command line names the daemon's
socket would look like a second daemon on it to whoever looks for one (`pgrep -f`).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from txd.daemon import access, handles, logsetup, socketfile, wire
from txd.daemon.h2door import Door, Method
from txd.daemon.jobstore import StoreReader
from txd.daemon.tasks import Tasks
from txd.v1 import runner_pb2 as pb

STATUS = "/txd.v1.Runner/Status"  # the one method served here
PR_SET_PDEATHSIG = 1
TALLY_EVERY = 0.25  # s: how often the calls answered are told to the daemon
TALLY_LINE = 1000  # calls per line at most (the daemon reads lines of up to 64 KiB)
TALLY_HELD = 100_000  # calls held while the daemon reads none; more are only counted
TALLY_UNREAD = 1 << 20  # bytes written and not yet read by the daemon, past which none is


class Tally(access.Observer):
    """The Status calls answered, told to the daemon for its metrics (grpc_server_*) as JSON
    lines on stdout: {"calls": [[code name, seconds], ...]} and {"dropped": n}. Written through
    a non-blocking pipe every TALLY_EVERY seconds, so that a daemon slow to read (its event loop
    held) never holds a call: calls wait here meanwhile, up to TALLY_HELD."""

    def __init__(self) -> None:
        self._calls: list[tuple[str, float]] = []
        self._dropped = 0
        self._out: asyncio.WriteTransport | None = None

    async def start(self) -> None:
        """Starts telling, once the process said "ready" (a line of calls must not come first)."""
        loop = asyncio.get_running_loop()
        self._out, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout)

    def handled(self, call: access.Call, seconds: float) -> None:
        if call.full_method != STATUS:  # a method not served here: in the access log only
            return
        if len(self._calls) < TALLY_HELD:
            self._calls.append((call.code.name, round(seconds, 6)))
        else:
            self._dropped += 1

    async def tell(self) -> None:
        while True:
            await asyncio.sleep(TALLY_EVERY)  # the calls of a quarter second in one line
            out = self._out
            if out is None or out.is_closing():
                return  # the daemon is gone: stdin's end ends this process
            if not (self._calls or self._dropped) or out.get_write_buffer_size() > TALLY_UNREAD:
                continue
            calls, self._calls = self._calls, []
            lines: list[dict[str, object]] = [
                {"calls": calls[i : i + TALLY_LINE]} for i in range(0, len(calls), TALLY_LINE)
            ]
            if self._dropped:
                lines.append({"dropped": self._dropped})
                self._dropped = 0
            out.write("".join(json.dumps(line) + "\n" for line in lines).encode())


class ReadServer(Door):
    """Status from the store, as the daemon's JobService.lookup finds a job there."""

    def __init__(self, store: StoreReader, tally: Tally, tasks: Tasks) -> None:
        super().__init__(
            access.READ, {STATUS: Method(access.UNARY, self.status)}, tally, tasks.create_task
        )
        self.store = store

    async def status(self, raw: bytes) -> AsyncIterator[bytes]:
        text = wire.parse(pb.StatusRequest, raw).app_handle
        rec = handles.stored(handles.resolve(text, self.store), self.store)
        yield pb.StatusResponse(status=rec.status).SerializeToString()


async def serve(socket: Path, store: Path) -> None:
    # The socket's checks, here (not in the daemon), just before binding: the folder may be
    # replaced by another user's at any time before (given one of the user's folders above
    # it), and only a stale socket of the user's is ever removed at the path.
    loop = asyncio.get_running_loop()
    try:
        socketfile.check_private(socket.parent)
        socketfile.make_room(socket)
    except (OSError, socketfile.SocketNotPrivate, socketfile.PathTaken) as e:
        _say(f"refused: {e}")
        return
    tally = Tally()
    async with asyncio.TaskGroup() as group:
        door = ReadServer(StoreReader(store), tally, Tasks(group))
        try:
            await loop.create_unix_server(door.connection, str(socket))
            os.chmod(socket, 0o600)  # as the socket's: the folder decides, this still holds
        except OSError as e:  # a path too long for a Unix socket, say
            _say(f"refused: cannot serve on {socket}: {e}")
            return
        # Serves until the daemon's pipe ends (the daemon gone, however; at once if it is
        # gone already). SIGTERM (a stop, or the kernel's parent-death signal) keeps its
        # default action and ends the process at once: it holds nothing to tidy.
        if _say("ready"):
            await tally.start()
            group.create_task(tally.tell())
            stdin = asyncio.StreamReader()
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
            await stdin.read()
        os._exit(0)  # the calls still open end with the process, as the daemon's are gone


def _say(line: str) -> bool:
    """One line to the daemon; False when it is gone already."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        return False
    return True


def _settings() -> dict[str, str]:
    """The one line of settings the daemon writes first on stdin (read unbuffered: the rest
    of stdin is watched for its end)."""
    line = b""
    while not line.endswith(b"\n"):
        more = os.read(0, 1)
        if not more:
            sys.exit(0)  # the daemon went before it said anything
        line += more
    settings: dict[str, str] = json.loads(line)
    return settings


def main() -> None:
    settings = _settings()
    # A Ctrl-C at the daemon's terminal reaches its process group: the daemon stops this one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    logsetup.configure(settings["level"], settings["format"])
    asyncio.run(serve(Path(settings["socket"]), Path(settings["store"])))


if __name__ == "__main__":
    main()
