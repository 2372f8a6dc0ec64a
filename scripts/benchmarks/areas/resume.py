"""resume: a watching client across a daemon's kill -9 and restart: from the restarted daemon's
"ready" to the client's next status (what the reconnect itself costs, its backoff included),
and the whole outage the watcher sees (kill, restart, reconnect)."""

from __future__ import annotations

import asyncio
import time

from txd.client import AsyncClient
from txd_testing import sh_app

from benchmarks.common import fmt_ms, log, median
from benchmarks.context import Context
from benchmarks.daemons import stop


async def run(ctx: Context) -> None:
    n = 3 if ctx.quick else 10
    d = ctx.daemons.start(ctx.daemons.new("resume"))
    back: list[float] = []
    outage: list[float] = []
    try:
        log(f"resume: kill -9 and restart under a watching client x{n}")
        async with AsyncClient(d.socket, timeout=60, reconnect=60) as client:
            client.resumer.say = lambda _text: None  # the bench's log says what happens
            for _ in range(n):
                handle = await client.run(sh_app("sleep 600"), "local_cwd", cwd=str(d.root))
                watch = client.watch(handle)
                await anext(watch)
                t0 = time.perf_counter()
                await asyncio.to_thread(d.kill)

                async def restart() -> float:
                    await asyncio.to_thread(ctx.daemons.start, d)
                    return time.perf_counter()

                status, ready = await asyncio.gather(anext(watch), restart())
                t1 = time.perf_counter()
                assert status.app_handle == handle, status
                back.append((t1 - ready) * 1000)
                outage.append((t1 - t0) * 1000)
                await watch.aclose()  # type: ignore[attr-defined]  # an async generator
    finally:
        stop(d)
    ctx.res.add(
        "daemon restarted -> a watching client's next status (median)",
        fmt_ms(median(back)),
        note=f"n={n}, min {fmt_ms(min(back))}, max {fmt_ms(max(back))}; backoff 0.05 s doubling "
        "to 1 s",
    )
    ctx.res.add(
        "kill -9 -> a watching client's next status, restart included (median)",
        fmt_ms(median(outage)),
        note=f"n={n}, min {fmt_ms(min(outage))}, max {fmt_ms(max(outage))}",
    )
