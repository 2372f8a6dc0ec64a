"""A process of concurrent RPC callers, for the load test and `scripts/bench --only load`:

    python load_callers.py SOCKET CALLERS SEED PAUSE DEADLINE MAX_SECONDS [GONE_OK [NICE]]

CALLERS callers, each on a gRPC connection of its own, call Status, List and Watch on the
daemon's newest jobs, each call starting a random 0..2*PAUSE seconds after the caller's last one
started (at once when that one took longer), until stdin closes (or MAX_SECONDS pass): the calls
offered do not grow as the daemon answers faster, as they would with a pause after each answer.
Prints "ready" once every caller's first List call answered, and at the end
one JSON line: calls by kind, the errors, and every Status call's latency in seconds. Every unary
call has a DEADLINE; a Watch must end (its job terminal) within MAX_SECONDS. With GONE_OK
(1: the run deletes jobs), a job that is no longer known is counted as "gone", not an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sys
import time
from typing import Any

from txd.client import AsyncClient, NotFoundError, TxdError
from txd.v1 import TERMINAL_STATES

ERROR_SAMPLES = 20  # error messages kept whole; the rest are counted


class Callers:
    def __init__(
        self,
        socket: str,
        n: int,
        seed: int,
        pause: float,
        deadline: float,
        watch_bound: float,
        gone_ok: bool,
    ) -> None:
        self.clients = [
            AsyncClient(socket, timeout=deadline, own_connection=True) for _ in range(n)
        ]
        self.seed, self.pause, self.deadline = seed, pause, deadline
        self.watch_bound = watch_bound  # a watched job may wait for the followers' gate
        self.handles: list[str] = []  # the newest jobs, as the last List saw them
        self.gone_ok = gone_ok
        self.calls = {"status": 0, "list": 0, "watch": 0, "gone": 0}
        self.errors: list[str] = []
        self.latencies: list[float] = []
        self.stop = asyncio.Event()

    async def list_newest(self, client: AsyncClient) -> None:
        page = await client.list_page(page_size=20)
        self.calls["list"] += 1
        if page.apps:
            self.handles = [s.app_handle for s in page.apps]

    async def one(self, client: AsyncClient, rng: random.Random) -> None:
        r = rng.random()
        if r < 0.2 or not self.handles:
            await self.list_newest(client)
        elif r < 0.85:
            handle = rng.choice(self.handles)
            start = time.perf_counter()
            await client.status(handle)
            self.latencies.append(time.perf_counter() - start)
            self.calls["status"] += 1
        else:
            handle = rng.choice(self.handles)
            try:
                async with asyncio.timeout(self.watch_bound):
                    async for status in client.watch(handle):
                        if status.state in TERMINAL_STATES:
                            break
            except TimeoutError:
                raise TxdError(f"Watch {handle} did not end within {self.watch_bound} s") from None
            self.calls["watch"] += 1

    async def caller(self, k: int) -> None:
        client = self.clients[k]
        rng = random.Random(self.seed * 1000 + k)
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                await self.one(client, rng)
            except NotFoundError as e:
                if not self.gone_ok:
                    self.errors.append(f"{type(e).__name__}: {e}")
                self.calls["gone"] += 1
                self.handles = []  # List again
            except TxdError as e:
                self.errors.append(f"{type(e).__name__}: {e}")
            gap = rng.uniform(0, 2 * self.pause) - (time.monotonic() - began)
            if gap > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), gap)

    async def close(self) -> None:
        for c in self.clients:
            await c.close()

    def report(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "errors": len(self.errors),
            "error_samples": self.errors[:ERROR_SAMPLES],
            "status_latencies": self.latencies,
        }


async def main(argv: list[str]) -> None:
    socket, n, seed = argv[0], int(argv[1]), int(argv[2])
    pause, deadline, max_seconds = float(argv[3]), float(argv[4]), float(argv[5])
    gone_ok = len(argv) > 6 and argv[6] == "1"
    if len(argv) > 7:
        os.setpriority(os.PRIO_PROCESS, 0, int(argv[7]))
    callers = Callers(socket, n, seed, pause, deadline, max_seconds, gone_ok)
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    try:
        await asyncio.gather(*(callers.list_newest(c) for c in callers.clients))
        print("ready", flush=True)
        tasks = [loop.create_task(callers.caller(k)) for k in range(n)]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stdin.read(), max_seconds)  # EOF: the run is over
        callers.stop.set()
        _, pending = await asyncio.wait(tasks, timeout=deadline)
        for t in pending:  # a Watch still open: not an error, the run is over
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await callers.close()
    print(json.dumps(callers.report()), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
