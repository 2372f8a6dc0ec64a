"""The read door's process (daemon.readdoor starts it):

    python -m txd.daemon.readserver     (stdin: {"socket", "store", "level", "format"} as a line)

Serves txd.v1.Runner/Status on the Unix socket `socket` from a read-only connection to the job
store `store`, with a synchronous gRPC server (its own poller thread, one worker): a process of
its own, so that neither the daemon's event loop nor its GIL stands between a Status call and
its answer. The daemon writes every status through to the store before it answers anyone
about it, so the answer is the socket's. Prints "ready" on stdout once serving; ends on
SIGTERM, when the daemon dies (PR_SET_PDEATHSIG sends it SIGTERM) and on stdin's end. Its log
lines (the access line of each call, door `read`) go to stderr, the daemon's log, in the
daemon's format; the calls' codes and times go to the daemon on stdout, a JSON line every
quarter second, for its gRPC server metrics (Tally).
The settings come on stdin, not as arguments: a process whose command line names the daemon's
socket would look like a second daemon on it to whoever looks for one (`pgrep -f`).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import grpc
from txd import defaults
from txd.daemon import access, handles, logsetup, socketfile, wire
from txd.daemon.errorstatus import error_status
from txd.daemon.jobstore import StoreReader
from txd.v1 import runner_pb2 as pb

STATUS = "/txd.v1.Runner/Status"  # the one method served here
# The socket's message sizes (txd.defaults), so that an oversized request is refused alike.
OPTIONS = [
    ("grpc.max_receive_message_length", defaults.MAX_REQUEST_BYTES),
    ("grpc.max_send_message_length", defaults.MAX_RESPONSE_BYTES),
    # Small requests: no BDP pings to grow windows they never fill (txd.client's DOOR_OPTIONS).
    ("grpc.http2.bdp_probe", 0),
]
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

    def status(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        call = access.Call(STATUS, access.UNARY, access.READ)
        call.received = 1
        try:
            text = wire.parse(pb.StatusRequest, raw).app_handle
            rec = handles.stored(handles.resolve(text, self.store), self.store)
            call.sent = 1
            return pb.StatusResponse(status=rec.status).SerializeToString()
        except Exception as e:
            call.code, details, trailers = error_status(e)
            context.set_trailing_metadata(trailers)
            context.abort(call.code, details)  # raises
            raise
        finally:
            seconds = time.monotonic() - call.start
            access.write_line(call, seconds)
            self.tally.add(call.code, seconds)


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
    handler = grpc.method_handlers_generic_handler(
        "txd.v1.Runner", {"Status": grpc.unary_unary_rpc_method_handler(answers.status)}
    )
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="txd-read")
    server = grpc.server(pool, handlers=[handler], options=OPTIONS)
    try:
        server.add_insecure_port(f"unix:{socket}")  # raises RuntimeError if it cannot bind
        server.start()
        os.chmod(socket, 0o600)  # as the socket's: the folder decides, this still holds
    except (OSError, RuntimeError) as e:  # a path too long for a Unix socket, say
        server.stop(None)
        _say(f"refused: cannot serve on {socket}: {e}")
        return
    # Serves until the daemon's pipe ends (the daemon gone, however; at once if it is gone
    # already). SIGTERM (a stop, or the kernel's parent-death signal) keeps its default action
    # and ends the process at once: it holds nothing to tidy, and a Python handler setting an
    # Event this thread waits on could deadlock on the Event's own lock (it did, when the
    # handler ran inside the wait).
    if _say("ready"):
        tally.start()
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
