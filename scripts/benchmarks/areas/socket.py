"""socket: how soon a daemon whose socket folder was removed (logind at logout, a tmp
cleaner) answers there again, and the wall time of `txctl where`."""

from __future__ import annotations

import asyncio
import shutil
import time

from txd.client._daemon import is_listening

from benchmarks.common import BIN, fmt_ms, fmt_s, log, median, timed_run
from benchmarks.context import Context
from benchmarks.daemons import cli_env, stop

BACK_TIMEOUT = 30.0  # a recovery takes about one check interval (1 s); this bounds the poll


async def run(ctx: Context) -> None:
    n = 3 if ctx.quick else 10
    d = ctx.daemons.new("socket")
    d.socket = d.root / "run" / "txd.sock"
    ctx.daemons.start(d)
    try:
        back: list[float] = []
        log(f"socket folder removed -> answering again x{n}")
        for _ in range(n):
            shutil.rmtree(d.socket.parent)
            t0 = time.perf_counter()
            while not is_listening(d.socket):  # the bench measures: a 2 ms poll is its clock
                if time.perf_counter() - t0 > BACK_TIMEOUT:
                    raise RuntimeError(f"not back on {d.socket} within {BACK_TIMEOUT}s")
                await asyncio.sleep(0.002)
            back.append((time.perf_counter() - t0) * 1000)
        m = median(back)
        ctx.res.add(
            "socket folder removed -> the daemon answers there again (median)",
            fmt_ms(m),
            "<= 2000 ms",
            m <= 2000,
            note=f"n={n}, min {fmt_ms(min(back))}, max {fmt_ms(max(back))}; checked every 1 s",
        )
        cmd = [str(BIN / "txctl"), "where"]
        timed_run(cmd, cli_env(d), d.root)  # warm-up
        walls = [timed_run(cmd, cli_env(d), d.root)[0] for _ in range(n)]
        ctx.res.add(
            "`txctl where` wall (median)",
            fmt_s(median(walls)),
            note=f"n={n}, min {fmt_s(min(walls))}, max {fmt_s(max(walls))}",
        )
    finally:
        stop(d)
