"""The read door: Status answered on a Unix socket of its own, `<socket>.read`, by a thread of
its own.

grpc.aio takes calls one at a time on the event loop, the loop that also starts jobs, streams
log chunks and Watch statuses: under a storm of submissions a Status call waited behind 70-90
others before gRPC took it (docs/performance.md). Here a synchronous gRPC server, whose poller
and one worker are threads of their own, answers Status from the status cache (read, never
changed) and a read-only connection to the job store, so a Status is not queued behind the
loop's work. The answer is the one the main socket gives: the same lookup (JobService.lookup),
the same errors.

The Python client and txctl ask Status here when the file exists and the main socket otherwise;
any client may call txd.v1.Runner/Status on either. Every call is counted and logged as the main
socket's are, as the door `read`.

Not opened where the job store is on a network file system: the daemon's connection holds the
file's lock exclusively, and no second connection may read it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import time
from pathlib import Path

import grpc
from txd import defaults
from txd.daemon import access, socketfile, wire
from txd.daemon.core import JobService
from txd.daemon.jobstore import StoreReader
from txd.daemon.servicer import error_status
from txd.filekind import describe
from txd.v1 import runner_pb2 as pb

log = logging.getLogger(__name__)

STATUS = "/txd.v1.Runner/Status"
# The socket's message sizes (txd.defaults), so that an oversized request is refused alike.
OPTIONS = [
    ("grpc.max_receive_message_length", defaults.MAX_REQUEST_BYTES),
    ("grpc.max_send_message_length", defaults.MAX_RESPONSE_BYTES),
]


class ReadDoor:
    """Serves Status on defaults.read_door(socket_path) until stop()."""

    def __init__(
        self,
        service: JobService,
        reader: StoreReader,
        path: Path,
        observer: access.Observer,
    ) -> None:
        self.service, self.reader, self.path, self.observer = service, reader, path, observer
        # One worker: the reader's connection is used by one thread at a time, and a Status
        # takes a fraction of a millisecond. gRPC queues the calls that arrive meanwhile.
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="txd-read")
        handler = grpc.method_handlers_generic_handler(
            "txd.v1.Runner", {"Status": grpc.unary_unary_rpc_method_handler(self._status)}
        )
        self._server = grpc.server(self._pool, handlers=[handler], options=OPTIONS)
        self._inode = -1  # the socket file's, once bound

    @classmethod
    def open(
        cls, service: JobService, socket_path: Path, observer: access.Observer
    ) -> ReadDoor | None:
        """The read door beside the main socket, serving; None (logged) where it cannot be."""
        reader = service.store.reader()
        if reader is None:
            log.info("no read door: the job store is on a network file system")
            return None
        path = Path(defaults.read_door(socket_path))
        # As at the main socket's path: only a stale socket of the user's is removed.
        there = socketfile.clear_stale(path)
        if there is not None:
            reader.close()
            what = "a socket someone listens on" if there.live else describe(there.stat)
            log.warning("no read door: %s is %s, which txd never removes", path, what)
            return None
        door = cls(service, reader, path, observer)
        try:
            door._server.add_insecure_port(f"unix:{path}")
            door._server.start()
            os.chmod(path, 0o600)  # as the main socket: the folder decides, this still holds
            door._inode = path.lstat().st_ino
        except Exception as e:
            door.stop()
            log.warning("no read door on %s: %s", path, e)
            return None
        return door

    def stop(self) -> None:
        """Stops serving (calls under way are cancelled) and removes the socket file it made."""
        self._server.stop(None).wait()
        self._pool.shutdown(wait=True)
        self.reader.close()
        with contextlib.suppress(FileNotFoundError):
            if self.path.lstat().st_ino == self._inode:  # still the one it made
                self.path.unlink()

    def _status(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        call = access.Call(STATUS, access.UNARY, access.READ)
        try:
            handle = wire.parse(pb.StatusRequest, raw).app_handle
            status = self.service.status(handle, self.reader)
            return pb.StatusResponse(status=status).SerializeToString()
        except Exception as e:
            call.code, details, trailers = error_status(e)
            context.set_trailing_metadata(trailers)
            context.abort(call.code, details)  # raises
            raise
        finally:
            self._observed(call, time.monotonic() - call.start)

    def _observed(self, call: access.Call, seconds: float) -> None:
        """Counted and logged here, in the door's thread: prometheus_client's metrics and
        logging take their own locks, and a hand-over to the loop would wake it for each call."""
        obs = self.observer
        obs.started(call)
        call.received = 1
        obs.received(call)
        if call.code == grpc.StatusCode.OK:
            call.sent = 1
            obs.sent(call)
        obs.handled(call, seconds)
        access.write_line(call, seconds)
