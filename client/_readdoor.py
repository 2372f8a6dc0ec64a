"""The read door's client: Status beside the daemon's socket (txd.v1.ReadReply documents the
wire, txd.readwire holds it), on a connection the client keeps, one write and one read a call
on the caller's own event loop: no gRPC thread to hand the answer over (under a storm of
submissions, each hand-over waited for a core: docs/performance.md)."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
from google.protobuf.message import DecodeError
from txd import defaults, readwire
from txd.client._errors import DeadlineExceededError, TxdError, from_status
from txd.v1 import AppStatus
from txd.v1 import runner_pb2 as pb

_CODES = {code.value[0]: code.name for code in grpc.StatusCode}  # ReadError.code's names


class DoorClosed(Exception):
    """The door gave no answer (no process serves it, the daemon is stopping, another version
    of the wire): the socket answers instead."""


class ReadDoor:
    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._lock = asyncio.Lock()  # one request at a time on the connection

    async def status(self, request: pb.StatusRequest, timeout: float | None) -> AppStatus:
        """The job's status; raises TxdError as the socket's Status would, DoorClosed when
        the door does not answer."""
        body = readwire.frame(request.SerializeToString())
        async with self._lock:
            try:
                async with asyncio.timeout(timeout):
                    reply = await self._ask(body)
            except TimeoutError:
                self._drop()
                raise DeadlineExceededError("Deadline Exceeded") from None
            except BaseException:
                self._drop()  # midway through a reply, maybe: the next call starts afresh
                raise
        if reply.HasField("status"):
            return reply.status.status
        raise _error(reply.error)

    async def _ask(self, body: bytes) -> pb.ReadReply:
        if self._conn is not None:
            try:
                return await self._exchange(self._conn, body)
            except DoorClosed:
                # A connection held since the door's process was started again: once more,
                # on a new one.
                self._drop()
        try:
            self._conn = await asyncio.open_unix_connection(self.path)
        except OSError as e:
            raise DoorClosed(f"cannot connect to {self.path}: {e}") from None
        self._conn[1].write(readwire.PREFACE)
        return await self._exchange(self._conn, body)

    async def _exchange(
        self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], body: bytes
    ) -> pb.ReadReply:
        reader, writer = conn
        try:
            writer.write(body)
            (size,) = readwire.HEADER.unpack(await reader.readexactly(readwire.HEADER.size))
            if size > defaults.MAX_RESPONSE_BYTES:
                raise DoorClosed(f"{self.path} answered a frame of {size} bytes")
            reply = pb.ReadReply.FromString(await reader.readexactly(size))
        except (asyncio.IncompleteReadError, OSError) as e:
            raise DoorClosed(f"{self.path} closed the connection: {e}") from None
        except DecodeError:
            reply = pb.ReadReply()
        if reply.WhichOneof("answer") is None:  # bytes of another wire
            raise DoorClosed(f"{self.path} answered no ReadReply")
        return reply

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn[1].close()
            with contextlib.suppress(OSError):
                await conn[1].wait_closed()


def _error(err: pb.ReadError) -> TxdError:
    return from_status(_CODES.get(err.code, "UNKNOWN"), err.message, err.status_details)
