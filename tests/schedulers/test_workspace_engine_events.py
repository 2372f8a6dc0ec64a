"""Engine.events, read as local_docker reads it, from a stand-in engine on loopback that writes
the event stream's bytes as each test says: where reads cut the stream (an event split over
two writes arrives whole, a burst in one write as one list), its end, and the pings that tell
a quiet stream from a hung engine. The real engine's tests are in tests/schedulers/docker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from txd.schedulers.errors import BackendUnavailable
from txd.schedulers.workspace.engine import Engine

FILTERS = {"type": ["container"]}


def event(n: int) -> bytes:
    return json.dumps({"Action": "start", "Actor": {"ID": f"c{n}"}}).encode() + b"\n"


@dataclass
class StandIn:
    """The stand-in engine: `stream` writes the events response's body; pings are counted,
    and answered until `hang` is set."""

    stream: Callable[[web.StreamResponse], Any]
    pings: int = 0
    hang: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # ends a hung ping

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"ApiVersion": "1.41"})

    async def ping(self, request: web.Request) -> web.Response:
        self.pings += 1
        if self.hang.is_set():
            await self.release.wait()
        return web.Response(text="OK")

    async def events(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await self.stream(resp)
        return resp


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[StandIn], Any]]:
    runners: list[web.AppRunner] = []
    standins: list[StandIn] = []

    async def start(standin: StandIn) -> str:
        app = web.Application()
        app.router.add_get("/version", standin.version)
        app.router.add_get("/_ping", standin.ping)
        app.router.add_get("/v1.41/events", standin.events)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        standins.append(standin)
        port = runner.addresses[0][1]
        return f"tcp://127.0.0.1:{port}"

    yield start
    for standin in standins:
        standin.release.set()
    for runner in runners:
        await runner.cleanup()


async def test_reads_cut_no_event_and_the_stream_end_ends_them(
    serve: Callable[[StandIn], Any],
) -> None:
    split = event(1)
    got_first = asyncio.Event()  # the reader has had the burst before it

    async def stream(resp: web.StreamResponse) -> None:
        await resp.write(event(2) + event(3))  # a burst
        await got_first.wait()
        await resp.write(split[:10])
        await asyncio.sleep(0.1)  # likely read alone: whether it is or not, the event is whole
        await resp.write(split[10:] + b"\n\n")  # blank lines between events are no events
        await resp.write(event(4)[:-1])  # the last event lacks its newline

    engine = Engine(await serve(StandIn(stream)), timeout=5)
    try:
        reads = []
        async with asyncio.timeout(20), engine.events(FILTERS) as batches:
            async for batch in batches:
                reads.append([e["Actor"]["ID"] for e in batch])
                got_first.set()
    finally:
        await engine.aclose()
    assert reads == [["c2", "c3"], ["c1"], ["c4"]], reads


async def test_pings_go_on_while_events_flow_and_a_hung_engine_raises(
    serve: Callable[[StandIn], Any],
) -> None:
    timeout = 0.3
    standin: StandIn

    async def stream(resp: web.StreamResponse) -> None:
        # Events for longer than a few ping intervals, then quiet: the engine hangs.
        loop = asyncio.get_running_loop()
        end = loop.time() + 4 * timeout
        n = 0
        while loop.time() < end:
            await resp.write(event(n))
            n += 1
            await asyncio.sleep(timeout / 6)
        standin.hang.set()
        await standin.release.wait()

    standin = StandIn(stream)
    engine = Engine(await serve(standin), timeout=timeout)
    seen = pings_while_flowing = 0
    try:
        with pytest.raises(BackendUnavailable, match=r"did not answer ping within 0.3 s"):
            async with asyncio.timeout(20), engine.events(FILTERS) as batches:
                async for batch in batches:
                    seen += len(batch)
                    pings_while_flowing = standin.pings
    finally:
        await engine.aclose()
    assert seen >= 4, seen
    # Pings are due every interval whether events come or not: 4 intervals of events.
    assert pings_while_flowing >= 2, pings_while_flowing
    assert standin.hang.is_set()
