"""Backend calls counted while many clients watch jobs: the figure of every engine area."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from txd.client import AsyncClient
from txd_testing import Daemon

T = TypeVar("T")


async def calls_per_minute(
    d: Daemon, handles: Sequence[str], n: int, calls: Callable[[], Awaitable[int]], span: float
) -> float:
    """Backend calls per minute (by the `calls` counter) while `n` clients of their own watch
    the jobs `handles`, spread over them."""
    watchers = [AsyncClient(d.socket, timeout=60) for _ in range(n)]

    async def watch(c: AsyncClient, h: str) -> None:
        async for _ in c.watch(h):
            pass

    tasks = [
        asyncio.get_running_loop().create_task(watch(c, handles[k % len(handles)]))
        for k, c in enumerate(watchers)
    ]
    await asyncio.sleep(0.5)  # every watcher connected and parked
    c0, t0 = await calls(), time.perf_counter()
    await asyncio.sleep(span)  # the measuring window
    per_min = (await calls() - c0) / (time.perf_counter() - t0) * 60
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in watchers:
        await c.close()
    return per_min


@dataclass
class Window(Generic[T]):
    """What `watch_window` saw: with `span` 0, the streams did not all have their first status
    in time (`parked` of `streams` did), and nothing was counted."""

    streams: int
    parked: int
    opened: float = 0.0  # seconds until every stream had its first status
    span: float = 0.0  # the measuring window's length
    before: T | None = None
    after: T | None = None


async def watch_window(
    d: Daemon,
    handles: Sequence[str],
    n: int,
    span: float,
    snapshot: Callable[[], Awaitable[T]],
    park_timeout: float,
) -> Window[T]:
    """`snapshot()` before and after a window of `span` seconds during which `n` clients, each
    on a connection of its own, watch every job of `handles`; the window opens once every
    stream has had its first status (within `park_timeout`)."""
    watchers = [AsyncClient(d.socket, timeout=60, own_connection=True) for _ in range(n)]
    streams = n * len(handles)
    parked: set[int] = set()  # the streams that had their first status
    all_parked = asyncio.Event()

    async def watch(k: int, c: AsyncClient, h: str) -> None:
        async for _ in c.watch(h):
            parked.add(k)
            if len(parked) == streams:
                all_parked.set()

    loop = asyncio.get_running_loop()
    tasks = [
        loop.create_task(watch(k, c, h))
        for k, (c, h) in enumerate((c, h) for c in watchers for h in handles)
    ]
    t_open = time.perf_counter()
    try:
        try:
            await asyncio.wait_for(all_parked.wait(), park_timeout)
        except TimeoutError:
            return Window(streams, len(parked))
        opened = time.perf_counter() - t_open
        before, t0 = await snapshot(), time.perf_counter()
        await asyncio.sleep(span)  # the measuring window
        after, t1 = await snapshot(), time.perf_counter()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in watchers:
            await c.close()
    return Window(streams, streams, opened, t1 - t0, before, after)
