"""The read door's process (daemon.readdoor starts it):

    python -m txd.daemon.readserver     (stdin: {"socket", "store", "level", "format"} as a line)

Answers Status requests on the Unix socket `socket` from a read-only connection to the job
store `store`, on the read door's wire (txd.readwire; txd.v1.ReadReply documents it): a
process of its own, so that neither the daemon's event loop nor its GIL stands between a
Status call and its answer, and no gRPC, so that a call costs the door and the caller one
read and one write each instead of the hand-overs between gRPC's threads (under a storm of
submissions each hand-over waited its turn for a core: docs/performance.md). The daemon writes
every status through to the store before it answers anyone about it, so the answer is the
socket's. Prints "ready" on stdout once serving; ends on SIGTERM, when the daemon dies
(PR_SET_PDEATHSIG sends it SIGTERM) and on stdin's end. Its log lines (the access line of each
call, door `read`) go to stderr, the daemon's log, in the daemon's format; the calls' codes and
times go to the daemon on stdout, a JSON line every quarter second, for its gRPC server metrics
(Tally).
The settings come on stdin, not as arguments: a process whose command line names the daemon's
socket would look like a second daemon on it to whoever looks for one (`pgrep -f`).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
import socket as sockets
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import grpc
from txd import defaults, readwire
from txd.daemon import access, handles, logsetup, socketfile, wire
from txd.daemon.errorstatus import error_status
from txd.daemon.jobstore import StoreReader
from txd.v1 import runner_pb2 as pb

STATUS = "/txd.v1.Runner/Status"  # the one method served here
DETAILS_KEY = "grpc-status-details-bin"
PR_SET_PDEATHSIG = 1
TALLY_EVERY = 0.25  # s: how often the calls answered are told to the daemon
TALLY_LINE = 1000  # calls per line at most (the daemon reads lines of up to 64 KiB)
TALLY_HELD = 100_000  # calls held while the daemon reads none; more are only counted


class Tally:
    """The calls answered, told to the daemon for its metrics (grpc_server_*) as JSON lines
    on stdout: {"calls": [[code name, seconds], ...]} and {"dropped": n}. Written by a thread
    of its own, so that a daemon slow to read (its event loop held) never holds a call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[tuple[str, float]] = []
        self._dropped = 0
        self._some = threading.Event()

    def start(self) -> None:
        """Starts telling, once the process said "ready" (a line of calls must not come first)."""
        threading.Thread(target=self._tell, name="txd-read-tally", daemon=True).start()

    def add(self, code: grpc.StatusCode, seconds: float) -> None:
        with self._lock:
            if len(self._calls) < TALLY_HELD:
                self._calls.append((code.name, round(seconds, 6)))
            else:
                self._dropped += 1
        if not self._some.is_set():
            self._some.set()

    def _tell(self) -> None:
        while True:
            self._some.wait()
            time.sleep(TALLY_EVERY)  # the calls of a quarter second in one line
            with self._lock:
                calls, self._calls = self._calls, []
                dropped, self._dropped = self._dropped, 0
                self._some.clear()
            lines: list[dict[str, object]] = [
                {"calls": calls[i : i + TALLY_LINE]} for i in range(0, len(calls), TALLY_LINE)
            ]
            if dropped:
                lines.append({"dropped": dropped})
            try:
                sys.stdout.write("".join(json.dumps(line) + "\n" for line in lines))
                sys.stdout.flush()
            except OSError:  # the daemon is gone: stdin's end ends this process
                return


class Answers:
    """Status from the store, as the daemon's JobService.lookup finds a job there."""

    def __init__(self, store: StoreReader, tally: Tally) -> None:
        self.store = store
        self.tally = tally

    def status(self, raw: bytes) -> pb.ReadReply:
        call = access.Call(STATUS, access.UNARY, access.READ)
        call.received = 1
        try:
            text = wire.parse(pb.StatusRequest, raw).app_handle
            rec = handles.stored(handles.resolve(text, self.store), self.store)
            call.sent = 1
            return pb.ReadReply(status=pb.StatusResponse(status=rec.status))
        except Exception as e:
            call.code, details, trailers = error_status(e)
            return _error(call.code, details, trailers)
        finally:
            self._told(call)

    def too_big(self, size: int) -> pb.ReadReply:
        """The socket's answer to a request over its limit (gRPC's words)."""
        call = access.Call(STATUS, access.UNARY, access.READ)
        call.code = grpc.StatusCode.RESOURCE_EXHAUSTED
        try:
            limit = defaults.MAX_REQUEST_BYTES
            return _error(
                call.code, f"SERVER: Received message larger than max ({size} vs. {limit})"
            )
        finally:
            self._told(call)

    def _told(self, call: access.Call) -> None:
        seconds = time.monotonic() - call.start
        access.write_line(call, seconds)
        self.tally.add(call.code, seconds)

    async def serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """One client's requests, answered in order until it closes the connection."""
        try:
            if not socketfile.is_own_peer(writer.transport):
                return
            if await reader.readexactly(len(readwire.PREFACE)) != readwire.PREFACE:
                return  # another wire (an older client's gRPC): it asks the socket
            while True:
                (size,) = readwire.HEADER.unpack(await reader.readexactly(readwire.HEADER.size))
                if size > defaults.MAX_REQUEST_BYTES:
                    writer.write(readwire.frame(self.too_big(size).SerializeToString()))
                    await writer.drain()
                    return
                reply = self.status(await reader.readexactly(size))
                writer.write(readwire.frame(reply.SerializeToString()))
                await writer.drain()  # a client that reads nothing holds only its own socket
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went
        finally:
            writer.close()


def _error(
    code: grpc.StatusCode, message: str, trailers: Iterable[tuple[str, Any]] = ()
) -> pb.ReadReply:
    """The reply of a call ended with `code`: the socket's trailers carry its rich details."""
    details = next((v for k, v in trailers if k == DETAILS_KEY and isinstance(v, bytes)), b"")
    error = pb.ReadError(code=code.value[0], message=message, status_details=details)
    return pb.ReadReply(error=error)


def serve(socket: Path, store: Path) -> None:
    # The socket's checks, here (not in the daemon), just before binding: the folder may be
    # replaced by another user's at any time before (given one of the user's folders above
    # it), and only a stale socket of the user's is ever removed at the path.
    try:
        socketfile.check_private(socket.parent)
        socketfile.make_room(socket)
    except (OSError, socketfile.SocketNotPrivate, socketfile.PathTaken) as e:
        _say(f"refused: {e}")
        return
    tally = Tally()
    answers = Answers(StoreReader(store), tally)
    asyncio.run(_serve(socket, answers, tally))


async def _serve(socket: Path, answers: Answers, tally: Tally) -> None:
    listener = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    try:
        listener.bind(str(socket))  # bound here: asyncio's own would remove any socket there
        os.chmod(socket, 0o600)  # as the socket's: the folder decides, this still holds
        server = await asyncio.start_unix_server(answers.serve_connection, sock=listener)
    except OSError as e:  # a path too long for a Unix socket, say
        listener.close()
        _say(f"refused: cannot serve on {socket}: {e}")
        return
    # Serves until the daemon's pipe ends (the daemon gone, however; at once if it is gone
    # already): a thread waits for that end. SIGTERM (a stop, or the kernel's parent-death
    # signal) keeps its default action and ends the process at once: it holds nothing to tidy.
    if _say("ready"):
        tally.start()
        threading.Thread(target=_until_stdin_ends, name="txd-read-stdin", daemon=True).start()
        async with server:
            await server.serve_forever()
    os._exit(0)


def _until_stdin_ends() -> None:
    while os.read(0, 4096):
        pass
    os._exit(0)


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
    serve(Path(settings["socket"]), Path(settings["store"]))


if __name__ == "__main__":
    main()
