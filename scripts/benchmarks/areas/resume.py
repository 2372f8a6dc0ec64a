"""resume: a watching client across a daemon's kill -9 and restart: from the restarted daemon's
"ready" to the client's reconnect (what its backoff costs), from there to the watch's next
status (the restarted daemon answering for a job it is recovering), and the whole outage the
watcher sees (kill, restart, reconnect)."""

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
    then: list[float] = []
    outage: list[float] = []
    reconnected: list[float] = []
    try:
        log(f"resume: kill -9 and restart under a watching client x{n}")
        async with AsyncClient(d.socket, timeout=60, reconnect=60) as client:
            client.resumer.say = lambda text: (  # the times only: the bench's log says the rest
                reconnected.append(time.perf_counter()) if text.startswith("reconnected") else None
            )
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
                back.append((reconnected[-1] - ready) * 1000)
                then.append((t1 - reconnected[-1]) * 1000)
                outage.append((t1 - t0) * 1000)
                await watch.aclose()  # type: ignore[attr-defined]  # an async generator
    finally:
        stop(d)
    ctx.res.add(
        "daemon restarted (ready) -> a watching client reconnected (median)",
        fmt_ms(median(back)),
        note=f"n={n}, min {fmt_ms(min(back))}, max {fmt_ms(max(back))}; backoff 0.05 s doubling "
        "to 1 s",
    )
    ctx.res.add(
        "reconnected -> the watch's next status (median)",
        fmt_ms(median(then)),
        note=f"n={n}, min {fmt_ms(min(then))}, max {fmt_ms(max(then))}",
    )
    ctx.res.add(
        "kill -9 -> a watching client's next status, restart included (median)",
        fmt_ms(median(outage)),
        note=f"n={n}, min {fmt_ms(min(outage))}, max {fmt_ms(max(outage))}",
    )
