"""The watch door: Watch streams served on a socket of their own beside the daemon's
(`<socket>.watch`), by a small HTTP/2 server on the daemon's event loop (the h2 library's
protocol state machine) instead of grpcio's.

Why: an open Watch stream mostly waits, and grpcio makes every call pay for its C-core call
(an arena of about 9 KB, 75 allocations in all) and two asyncio tasks with their coroutines:
22.5 KiB a stream before txd's own bytes, 23 KiB in the daemon (docs/performance.md). Here a
stream is h2's stream state, one task and the status cache's generator.

It is plain gRPC over HTTP/2 (cleartext, prior knowledge): any gRPC client can call
/txd.v1.Runner/Watch there, with the same answers as the daemon's socket (the same statuses,
the same error codes, messages and trailers); every other method answers UNIMPLEMENTED. Calls
are counted in the metrics and written to the access log as the socket's are (door "watch").
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import time
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from txd import defaults
from txd.daemon import access, socketfile, wire
from txd.daemon.core import JobService
from txd.daemon.errorstatus import error_status
from txd.daemon.sockwatch import identity
from txd.v1 import runner_pb2 as pb

log = logging.getLogger(__name__)

WATCH = "/txd.v1.Runner/Watch"
MAX_STREAMS = 1 << 20  # open streams on one connection (grpcio's Unix socket sets no limit)
MAX_HEADER_LIST = 16 << 10  # gRPC's own default for request metadata
STOPPING = "txd is shutting down"
_GRPC = b"application/grpc"
_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}

Trailers = Iterable[tuple[str, str | bytes]]


def _timeout(value: bytes) -> float | None:
    """A grpc-timeout header's seconds ("250m", "3S"), None when it is not one."""
    unit = _UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        return None
    return int(digits) * unit


def _status_headers(code: grpc.StatusCode, message: str, trailers: Trailers) -> list[Any]:
    """grpc-status, grpc-message (percent-encoded, as the protocol says) and the trailing
    metadata (binary values, under keys ending -bin, in base64)."""
    headers: list[tuple[bytes, bytes]] = [(b"grpc-status", str(code.value[0]).encode())]
    if message:
        quoted = urllib.parse.quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")
        headers.append((b"grpc-message", quoted.encode()))
    for key, value in trailers:
        if key.endswith("-bin"):
            raw = value if isinstance(value, bytes) else value.encode()
            value = base64.b64encode(raw).rstrip(b"=").decode()
        headers.append((key.encode(), value.encode() if isinstance(value, str) else value))
    return headers


class _Stream:
    """One call on a connection: its request's bytes until the client's half ends, then the
    task serving it."""

    __slots__ = ("body", "call", "deadline", "expired", "sid", "started", "task", "whole")

    def __init__(self, sid: int, call: access.Call) -> None:
        self.sid = sid
        self.call = call
        self.body = bytearray()
        self.task: asyncio.Task[None] | None = None
        self.deadline: asyncio.TimerHandle | None = None
        self.expired = False
        self.started = False  # its response headers sent
        self.whole = False  # the client's half ended: the request is all there


class _H2(h2.connection.H2Connection):
    # The closed streams h2 remembers (to tell a late frame from a protocol error): 65,536 by
    # default, megabytes on a long-lived connection that opened as many Watch calls.
    MAX_CLOSED_STREAMS = 1024


class _Connection(asyncio.Protocol):
    def __init__(self, door: WatchDoor) -> None:
        self.door = door
        # The headers sent are this module's own, known good: not checked again on the way out.
        config = h2.config.H2Configuration(
            client_side=False,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        )
        self.h2 = _H2(config=config)
        self.h2.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: MAX_STREAMS,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST,
            },
        )
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, _Stream] = {}
        self._credit: list[asyncio.Future[None]] = []  # writers waiting for window or buffer
        self._paused = False

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if not socketfile.is_own_peer(transport):
            transport.abort()
            return
        self.transport = transport
        self.door.connections.add(self)
        self.h2.initiate_connection()
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.door.connections.discard(self)
        self.transport = None
        for stream in list(self.streams.values()):
            self._drop(stream)
        self._wake()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as e:  # h2 has queued the GOAWAY that says why
            log.debug("watch door: protocol error from a client: %s", e)
            self._flush()
            self.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self._request(event.stream_id, dict(event.headers))
            elif isinstance(event, h2.events.DataReceived):
                self._data(event)
            elif isinstance(event, h2.events.StreamEnded):
                self._half_closed(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                if (stream := self.streams.get(event.stream_id)) is not None:
                    self._drop(stream)
            elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
                self._wake()
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.close()
        self._flush()

    # -- requests ---------------------------------------------------------------------------

    def _request(self, sid: int, headers: dict[bytes, bytes]) -> None:
        path = headers.get(b":path", b"").decode(errors="replace")
        if path != WATCH:
            call = access.Call(path, access.UNARY, access.WATCH_DOOR)
            self._refuse(
                sid,
                call,
                grpc.StatusCode.UNIMPLEMENTED,
                f"{path[:200]} is not served at the watch door (only {WATCH}): "
                "call the daemon's socket",
            )
            return
        stream = _Stream(sid, access.Call(WATCH, access.SERVER_STREAM, access.WATCH_DOOR))
        self.door.observer.started(stream.call)
        if headers.get(b":method") != b"POST" or not headers.get(b"content-type", b"").startswith(
            _GRPC
        ):
            self._end(
                stream,
                grpc.StatusCode.INVALID_ARGUMENT,
                "a gRPC call is a POST of content-type application/grpc",
                (),
            )
            return
        self.streams[sid] = stream
        if (value := headers.get(b"grpc-timeout")) is not None:
            seconds = _timeout(value)
            if seconds is None:
                self._end(
                    stream,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"grpc-timeout {value[:20]!r} is not a timeout",
                    (),
                )
                return
            loop = asyncio.get_running_loop()
            stream.deadline = loop.call_later(seconds, self._expire, stream)

    def _refuse(self, sid: int, call: access.Call, code: grpc.StatusCode, message: str) -> None:
        stream = _Stream(sid, call)
        self.door.observer.started(call)
        self._end(stream, code, message, ())

    def _data(self, event: h2.events.DataReceived) -> None:
        self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        stream = self.streams.get(event.stream_id)
        if stream is None or stream.task is not None:
            return
        stream.body += event.data or b""
        if len(stream.body) > defaults.MAX_REQUEST_BYTES + 5:
            self._end(
                stream,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the request is over {defaults.MAX_REQUEST_BYTES} bytes",
                (),
            )

    def _half_closed(self, sid: int) -> None:
        """The client sent its whole request: one length-prefixed message."""
        stream = self.streams.get(sid)
        if stream is None or stream.task is not None:
            return
        stream.whole = True
        body, stream.body = bytes(stream.body), bytearray()
        size = int.from_bytes(body[1:5], "big")
        if len(body) < 5 or len(body) != 5 + size:
            self._end(
                stream,
                grpc.StatusCode.INVALID_ARGUMENT,
                "the request is not one length-prefixed gRPC message",
                (),
            )
            return
        if body[0] != 0:
            self._end(
                stream, grpc.StatusCode.UNIMPLEMENTED, "compressed requests are not accepted", ()
            )
            return
        stream.call.received += 1
        self.door.observer.received(stream.call)
        stream.task = self.door.service.tasks.create_task(
            self._serve(stream, body[5:]), name="watch door call"
        )

    async def _serve(self, stream: _Stream, raw: bytes) -> None:
        """The statuses of the job, as the socket's Watch sends them, then the call's status."""
        try:
            request = wire.parse(pb.WatchRequest, raw)
            async for shown in self.door.service.watch(request.app_handle):
                await self._send(stream, shown.wire())
                stream.call.sent += 1
                self.door.observer.sent(stream.call)
        except asyncio.CancelledError:
            if stream.expired:
                self._end(stream, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", ())
            elif self.streams.get(stream.sid) is stream:  # the door stops, the client is there
                self._end(stream, grpc.StatusCode.UNAVAILABLE, STOPPING, ())
            raise
        except Exception as e:
            self._end(stream, *error_status(e))
        else:
            self._end(stream, grpc.StatusCode.OK, "", ())
        finally:
            self._flush()

    def _expire(self, stream: _Stream) -> None:
        stream.expired = True
        if stream.task is not None:
            stream.task.cancel()
        else:
            self._end(stream, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", ())
            self._flush()

    # -- responses --------------------------------------------------------------------------

    async def _send(self, stream: _Stream, payload: bytes) -> None:
        """One message, as the connection's and the stream's flow control let it go."""
        if not stream.started:
            stream.started = True
            self.h2.send_headers(stream.sid, [(b":status", b"200"), (b"content-type", _GRPC)])
        data = memoryview(len(payload).to_bytes(5, "big") + payload)  # flag 0: not compressed
        while data:
            if self.transport is None or self.streams.get(stream.sid) is not stream:
                raise asyncio.CancelledError  # the connection or the call ended meanwhile
            room = min(
                self.h2.local_flow_control_window(stream.sid), self.h2.max_outbound_frame_size
            )
            if room <= 0 or self._paused:
                await self._credit_given()
                continue
            self.h2.send_data(stream.sid, data[:room].tobytes())
            data = data[room:]
            self._flush()

    async def _credit_given(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._credit.append(waiter)
        await waiter

    def _wake(self) -> None:
        waiters, self._credit = self._credit, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _end(
        self, stream: _Stream, code: grpc.StatusCode, message: str, trailers: Trailers
    ) -> None:
        """Ends the call with its status (in the response's headers when no message was sent:
        a trailers-only response), counted and logged once."""
        self._forget(stream)
        status = _status_headers(code, message, trailers)
        if not stream.started:
            status = [(b":status", b"200"), (b"content-type", _GRPC), *status]
        # The client may have reset the call, or the connection be ending.
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.h2.send_headers(stream.sid, status, end_stream=True)
            if not stream.whole:  # refused before its request ended: no more of it wanted
                self.h2.reset_stream(stream.sid, h2.errors.ErrorCodes.NO_ERROR)
        self._handled(stream, code)

    def _drop(self, stream: _Stream) -> None:
        """The client reset the call or left: its task cancelled, the call CANCELLED."""
        self._forget(stream)
        if stream.task is not None:
            stream.task.cancel()
        self._handled(stream, grpc.StatusCode.CANCELLED)

    def _forget(self, stream: _Stream) -> None:
        if self.streams.get(stream.sid) is stream:
            del self.streams[stream.sid]
            if not self.streams:
                self.door.quiet()
        if stream.deadline is not None:
            stream.deadline.cancel()

    def _handled(self, stream: _Stream, code: grpc.StatusCode) -> None:
        call = stream.call
        call.code = code
        seconds = time.monotonic() - call.start
        if call.full_method in access.KNOWN:  # as the socket's: a made-up method is logged only
            self.door.observer.handled(call, seconds)
        access.write_line(call, seconds)

    def _flush(self) -> None:
        if self.transport is not None and (data := self.h2.data_to_send()):
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def finish(self) -> None:
        """Ends the calls still open (UNAVAILABLE), then the connection (GOAWAY)."""
        for stream in list(self.streams.values()):
            if stream.task is not None:
                stream.task.cancel()
                await asyncio.gather(stream.task, return_exceptions=True)
            else:
                self._end(stream, grpc.StatusCode.UNAVAILABLE, STOPPING, ())
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.h2.close_connection()
        self._flush()
        self.close()


class WatchDoor:
    """The watch door's server, bound beside the daemon's socket for the daemon's life."""

    def __init__(self, socket_path: Path, service: JobService) -> None:
        self.path = Path(defaults.watch_door(socket_path))
        self.service = service
        self.observer: access.Observer = service.metrics
        self.connections: set[_Connection] = set()
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
                lambda: _Connection(self), str(self.path)
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
        await asyncio.gather(*(conn.finish() for conn in list(self.connections)))
        if self._bound is not None and identity(self.path) == self._bound:
            os.unlink(self.path)
