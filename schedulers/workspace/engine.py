"""The Docker Engine calls local_docker makes, through aiodocker, with errors in txd's terms.

Every call counts itself (`calls`, shown by backend_calls) and turns the engine's failures into
the closed set of txd.schedulers.errors: an engine that cannot be reached is BackendUnavailable,
and so is one that does not answer within `timeout` seconds (a hung engine accepts connections
and then says nothing). Two calls read the raw HTTP stream themselves (aiodocker decodes log
lines into text and publishes events through one shared channel): the event stream, and logs
as bytes. The event stream is checked with a `/_ping` every `timeout` seconds while it is open,
since a quiet stream and a hung engine look the same. Neither starts a task: a stream is read
by its consumer, a read bounded by the next ping's time.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import struct
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import aiodocker
import aiohttp
from txd.schedulers.errors import BackendUnavailable, NotFound, TxdError

# The engine answers "cannot connect" with this made-up status (aiodocker's).
_UNREACHABLE = 900
# Seconds an engine call may take (see Engine).
DEFAULT_TIMEOUT = 10.0
# Streams stay open for as long as the job or the subscription lasts.
_STREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_read=None, connect=10)
# The engine logs a line longer than this in pieces of this size. Engine 20.10 with the `local`
# log driver drops the newline that ends such a line (the last piece's "last" mark is lost on
# the way back): it is put back here. A long line that ends the output without a newline thus
# gains one; every other byte arrives as written.
PARTIAL_SIZE = 16 * 1024
# The header of a frame of the engine's multiplexed stream: stream, 3 zero bytes, length.
_FRAME = struct.Struct(">BxxxL")


class EngineError(TxdError):
    """The engine refused a request; `status` is its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Engine:
    """One Docker engine, reached at `url` (unix:///..., tcp://...). A call that gets no
    answer within `timeout` seconds raises BackendUnavailable, except the reading of a stream
    (a followed log can be quiet for hours), a pull (an image of any size) and a stop (it
    waits out the container's stop timeout)."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = url
        self.timeout = timeout
        self.calls: Counter[str] = Counter()
        self._docker: aiodocker.Docker | None = None
        self._closed = False

    def client(self) -> aiodocker.Docker:
        """The aiodocker client, for what drives the engine itself (workspace.images's builds);
        the caller counts its calls in `calls`."""
        return self._client()

    def _client(self) -> aiodocker.Docker:
        if self._closed:
            raise BackendUnavailable(f"the client of the Docker engine at {self.url} is closed")
        # Built on first use: its HTTP session belongs to the running event loop.
        if self._docker is None:
            self._docker = aiodocker.Docker(url=self.url)
        return self._docker

    async def aclose(self) -> None:
        self._closed = True
        docker, self._docker = self._docker, None
        if docker is not None:
            with contextlib.suppress(Exception):
                await docker.close()

    @contextlib.asynccontextmanager
    async def _call(self, kind: str, *, bounded: bool = True) -> AsyncIterator[None]:
        """Counts a call of `kind` and maps its errors; `bounded`: within `timeout`."""
        self.calls[kind] += 1
        try:
            async with asyncio.timeout(self.timeout if bounded else None):
                yield
        except TimeoutError as e:
            raise BackendUnavailable(
                f"the Docker engine at {self.url} did not answer {kind} within {self.timeout:g} s"
            ) from e
        except aiodocker.DockerError as e:
            if e.status == _UNREACHABLE:
                raise self._not_answering(e) from e
            raise EngineError(e.status, str(e.message)) from e
        except (aiohttp.ClientError, OSError) as e:
            raise self._not_answering(e) from e

    def _not_answering(self, e: BaseException) -> BackendUnavailable:
        return BackendUnavailable(f"the Docker engine at {self.url} is not answering: {_cause(e)}")

    # -- containers -----------------------------------------------------------------------

    async def containers(self, labels: Sequence[str]) -> list[dict[str, Any]]:
        """Every container (running or not) carrying all these labels (`key` or `key=value`)."""
        async with self._call("containers.list"):
            found = await self._client().containers.list(
                all=True, filters=json.dumps({"label": list(labels)})
            )
        return [c._container for c in found]

    async def inspect(self, name: str) -> dict[str, Any] | None:
        """A container's inspect data; None when it does not exist."""
        try:
            async with self._call("containers.inspect"):
                return await self._client().containers.container(name).show()
        except EngineError as e:
            if e.status == 404:
                return None
            raise

    async def create_container(self, name: str, body: Mapping[str, Any]) -> str:
        async with self._call("containers.create"):
            c = await self._client().containers.create(dict(body), name=name)
        return c.id

    async def start(self, name: str) -> None:
        async with self._call("containers.start"):
            await self._client().containers.container(name).start()

    async def stop(self, name: str) -> None:
        """Stops a container: its stop signal, then SIGKILL after its StopTimeout."""
        with contextlib.suppress(NotFound), self._missing_is_not_found(name):
            async with self._call("containers.stop", bounded=False):
                await self._client().containers.container(name).stop()

    async def remove(self, name: str) -> None:
        """Removes a container, killing it if it runs; no error if it is gone already."""
        with contextlib.suppress(NotFound), self._missing_is_not_found(name):
            async with self._call("containers.remove"):
                await self._client().containers.container(name).delete(force=True)

    @contextlib.contextmanager
    def _missing_is_not_found(self, what: str) -> Iterator[None]:
        try:
            yield
        except EngineError as e:
            if e.status == 404:
                raise NotFound(f"{what} does not exist") from e
            raise

    # -- images, networks, volumes --------------------------------------------------------

    async def image(self, name: str) -> dict[str, Any] | None:
        """The engine's inspect data of an image, None when it lacks it."""
        try:
            async with self._call("images.inspect"):
                return dict(await self._client().images.inspect(name))
        except EngineError as e:
            if e.status == 404:
                return None
            raise

    async def pull(self, name: str) -> None:
        """Pulls an image; raises EngineError with the engine's reason when it cannot."""
        async with self._call("images.pull", bounded=False):
            # A pull reports failures inside its progress stream, as {"error": ...}.
            for item in await self._client().images.pull(name):
                if "error" in item:
                    raise aiodocker.DockerError(500, str(item["error"]))

    async def create_network(self, body: Mapping[str, Any]) -> None:
        async with self._call("networks.create"):
            await self._client().networks.create(dict(body))

    async def remove_network(self, name: str) -> None:
        with contextlib.suppress(NotFound), self._missing_is_not_found(name):
            async with self._call("networks.remove"):
                await aiodocker.networks.DockerNetwork(self._client(), name).delete()

    async def volumes(self, labels: Sequence[str]) -> list[dict[str, Any]]:
        async with self._call("volumes.list"):
            found = await self._client().volumes.list(filters={"label": list(labels)})
        return list(found.get("Volumes") or [])

    async def create_volume(self, body: Mapping[str, Any]) -> None:
        async with self._call("volumes.create"):
            await self._client().volumes.create(dict(body))

    async def remove_volume(self, name: str) -> None:
        with contextlib.suppress(NotFound), self._missing_is_not_found(name):
            async with self._call("volumes.remove"):
                await aiodocker.volumes.DockerVolume(self._client(), name).delete()

    # -- streams --------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def events(
        self, filters: Mapping[str, list[str]], since_ns: int = 0
    ) -> AsyncIterator[AsyncIterator[list[dict[str, Any]]]]:
        """The engine's event stream, subscribed once this is entered (the engine subscribes
        before it sends its response's headers): the events of each read, as dicts (a burst
        that arrived while the consumer was busy comes as one list), until the stream drops,
        or raising BackendUnavailable once the engine stops answering pings. `since_ns`: first
        the events the engine still holds from then on (ns since the epoch), then live ones."""
        params = {"filters": json.dumps(dict(filters))}
        if since_ns:
            params["since"] = f"{since_ns // 10**9}.{since_ns % 10**9:09d}"
        async with self._call("events"):
            cm = self._client()._query("events", params=params, timeout=_STREAM_TIMEOUT)
            resp = await cm.__aenter__()
        try:
            yield _batches(self, resp)
        finally:
            resp.close()  # aiodocker's _query leaves its response open
            await cm.__aexit__(None, None, None)

    async def ping(self) -> None:
        """GET /_ping: the cheapest sign that the engine answers."""
        async with (
            self._call("ping"),
            self._client()._query("_ping", versioned_api=False) as resp,
        ):
            await resp.read()

    async def logs(
        self,
        name: str,
        *,
        stdout: bool,
        stderr: bool,
        follow: bool,
        since_ns: int = 0,
        tail: int | None = None,
        in_long_line: Mapping[int, bool] | None = None,
    ) -> AsyncIterator[LogMessage]:
        """A container's log messages, each as written (a line with its newline, or a piece of
        a long line), in the engine's order; NO_MESSAGE each time what arrived so far was passed
        on (not "caught up with the log": the engine does not say when a follow has sent what
        was there). `since_ns`: messages stamped at or after it; `tail`: only the last `tail`
        messages (of both streams, whichever are asked for). `in_long_line`: by stream, whether
        the message before the first one read was a whole piece of a long line (see
        PARTIAL_SIZE), for a caller that resumes a read. Needs the `local` or `json-file` log
        driver."""
        params = {
            "stdout": "1" if stdout else "0",
            "stderr": "1" if stderr else "0",
            "follow": "1" if follow else "0",
            "timestamps": "1",
        }
        if since_ns:
            params["since"] = f"{since_ns // 10**9}.{since_ns % 10**9:09d}"
        if tail is not None:
            params["tail"] = str(tail)
        with self._missing_is_not_found(f"container {name}"):
            async with self._call("containers.logs"):
                cm = self._client()._query(
                    f"containers/{name}/logs", params=params, timeout=_STREAM_TIMEOUT
                )
                resp = await cm.__aenter__()
        try:
            buf = bytearray()
            long_line = dict(in_long_line or {})
            while True:
                async with self._call("containers.logs.read", bounded=False):
                    data = await resp.content.readany()
                if not data:
                    return
                buf += data
                pos = 0
                while len(buf) - pos >= _FRAME.size:
                    stream, size = _FRAME.unpack_from(buf, pos)
                    end = pos + _FRAME.size + size
                    if end > len(buf):
                        break
                    message, stamp = _stamped(bytes(buf[pos + _FRAME.size : end]))
                    partial = len(message) == PARTIAL_SIZE and not message.endswith(b"\n")
                    if long_line.get(stream) and not partial and not message.endswith(b"\n"):
                        message += b"\n"  # see PARTIAL_SIZE
                    long_line[stream] = partial
                    yield LogMessage(message, stamp, stream, partial)
                    pos = end
                del buf[:pos]
                yield NO_MESSAGE
        finally:
            resp.close()  # aiodocker's _query leaves its response open
            await cm.__aexit__(None, None, None)


class LogMessage(NamedTuple):
    """One message of a container's log (Engine.logs)."""

    data: bytes
    stamp: int  # when the engine read it, in ns since the epoch; every piece of a long line
    # carries the time of its first piece
    stream: int  # 1: stdout, 2: stderr
    partial: bool  # a whole piece of a long line: the next message of its stream goes on with it


NO_MESSAGE = LogMessage(b"", 0, 0, False)


def _cause(e: BaseException) -> str:
    """Why a connection to the engine failed, in words (not a library's class names): the
    first OS error along the exception's chain, else what the connection did."""
    seen: BaseException | None = e
    for _ in range(8):  # aiodocker's error -> aiohttp's -> the OS's; a chain is short
        if seen is None:
            break
        inner = getattr(seen, "os_error", None)  # aiohttp.ClientConnectorError
        if isinstance(inner, OSError):
            seen = inner
        if isinstance(seen, FileNotFoundError):
            return "its socket does not exist"
        if isinstance(seen, OSError) and seen.errno:
            return os.strerror(seen.errno).lower()
        if isinstance(seen, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
            return "it closed the connection in the middle of an answer"
        if isinstance(seen, aiohttp.ClientConnectionError | ConnectionError):
            return "the connection to it was lost"
        seen = seen.__cause__ or seen.__context__
    return str(e) or type(e).__name__


async def _batches(
    engine: Engine, resp: aiohttp.ClientResponse
) -> AsyncIterator[list[dict[str, Any]]]:
    """The stream's events, each read's complete lines at once, with a ping whenever `timeout`
    seconds have passed since the last (or the subscription): a read waits until then at most,
    and a ping the engine does not answer raises BackendUnavailable. A read that waits
    consumes nothing (`readany`), so giving it up at the ping's time loses no byte."""
    loop = asyncio.get_running_loop()
    ping_at = loop.time() + engine.timeout
    buf = b""
    while True:
        if loop.time() >= ping_at:
            await engine.ping()
            ping_at = loop.time() + engine.timeout
        try:
            async with asyncio.timeout_at(ping_at), engine._call("events.read", bounded=False):
                data = await resp.content.readany()
        except TimeoutError:
            continue  # a quiet stream: time to ping
        if not data:  # the stream ended (its last line may lack the newline)
            if buf.strip():
                yield [json.loads(buf)]
            return
        *lines, buf = (buf + data).split(b"\n")
        if events := [json.loads(line) for line in lines if line.strip()]:
            yield events


def _stamped(frame: bytes) -> tuple[bytes, int]:
    """A log message with its timestamp prefix ("2026-11-23T11:32:23.994481074Z ") split off."""
    stamp, _, message = frame.partition(b" ")
    return message, parse_timestamp(stamp.decode())


def parse_timestamp(text: str) -> int:
    """RFC 3339 with up to nanoseconds, as the engine writes it, in ns since the epoch."""
    head, frac, zone = text[:19], "", text[19:]
    if zone.startswith("."):
        digits = len(zone) - len(zone[1:].lstrip("0123456789"))
        frac, zone = zone[1:digits], zone[digits:]
    base = dt.datetime.fromisoformat(head + (zone if zone not in ("", "Z") else "+00:00"))
    return int(base.timestamp()) * 10**9 + int((frac + "000000000")[:9])
