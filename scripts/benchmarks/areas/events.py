"""events: the events stream (Events RPC). A fresh daemon on a state dir whose job store was
filled first with N status changes (through txd's own JobStore, as the daemon writes them:
each with its event): replayed events per second to one subscriber and to 100 at once; live
delivery to 100 following subscribers and the daemon's CPU per status change against their
number (events_fanout); job end -> event at a following subscriber (the job stamps its end time
as its last action, as in `latency`); then the store's growth per change and what retention
does to the file (events_store, a daemon of its own)."""

from __future__ import annotations

import asyncio
import sys
import time

from txd.client import AsyncClient
from txd.daemon.jobstore import JobStore
from txd.v1 import AppState
from txd.v1 import runner_pb2 as pb

from benchmarks.areas import events_fanout, events_store
from benchmarks.areas.events_store import change_all, insert_jobs
from benchmarks.areas.latency import STAMP
from benchmarks.common import fmt_ms, log, median, trivial_app
from benchmarks.context import Context
from benchmarks.daemons import stop

Kind = pb.EventsResponse.Kind


def fill(store: JobStore, jobs: int) -> int:
    """`jobs` finished jobs, each with SUBMITTED, PENDING, RUNNING, SUCCEEDED: 4 events each."""
    change_all(store, insert_jobs(store, jobs))
    return store.last_seq()


async def _replay(d: object, start: str, n: int) -> float:
    async with AsyncClient(d.socket, own_connection=True) as c:  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        got = 0
        async for e in c.events(since=start, follow=False):
            got += e.kind != Kind.SYNCED
        assert got == n, (got, n)
        return time.perf_counter() - t0


async def run(ctx: Context) -> None:
    jobs = 2_500 if ctx.quick else 25_000
    d = ctx.daemons.new("events")
    store = JobStore.in_state_dir(d.state_dir)
    n = fill(store, jobs)
    store_id = store.store_id
    store.close()
    ctx.daemons.start(d)
    try:
        start = f"v1.{store_id}.0"
        one = await _replay(d, start, n)
        ctx.res.add(
            "events replayed to one subscriber",
            f"{n / one:,.0f}/s",
            ">= 10,000/s",
            n / one >= 10_000,
            note=f"{n:,} events",
        )
        many = 10 if ctx.quick else 100
        part = min(n, 10_000)  # each replays the newest `part` (100 x 100,000 took 400 s)
        t0 = time.perf_counter()
        await asyncio.gather(*(_replay(d, f"v1.{store_id}.{n - part}", part) for _ in range(many)))
        wall = time.perf_counter() - t0
        ctx.res.add(
            f"events replayed to {many} subscribers at once (total)",
            f"{many * part / wall:,.0f}/s",
            note=f"{part:,} events each, {wall:.1f} s",
        )
        log(f"events: live delivery to {many} following subscribers")
        await events_fanout.live(ctx, d, many, min(jobs - 500, 5_000))
        counts = (0, 1, 10) if ctx.quick else (0, 1, 10, 100)
        await events_fanout.cost(ctx, d, counts, 20 if ctx.quick else 100, 1 if ctx.quick else 2)
        log("events: job end -> event at a following subscriber")
        lat = await _end_to_event(ctx, d, 8 if ctx.quick else 20)
        m = median(lat)
        ctx.res.add(
            "job end -> event at a following subscriber (median)",
            fmt_ms(m),
            "<= 20 ms",
            m <= 20,
            note=f"n={len(lat)}, min {fmt_ms(min(lat))}, max {fmt_ms(max(lat))}",
        )
    finally:
        stop(d)
    await events_store.run(ctx)


async def _end_to_event(ctx: Context, d: object, runs: int) -> list[float]:
    stamps = ctx.base / "event-stamps"
    stamps.mkdir(exist_ok=True)
    out = []
    async with AsyncClient(d.socket, own_connection=True) as c:  # type: ignore[attr-defined]
        for i in range(runs):
            stamp = stamps / str(i)
            h = await c.run(trivial_app("evlat", sys.executable, ["-c", STAMP, str(stamp)]))
            async for e in c.events(handles=[h], follow=True, bookmark_interval=60):
                if e.kind == Kind.CHANGED and e.status.state == AppState.SUCCEEDED:
                    out.append((time.time_ns() - int(stamp.read_text())) / 1e6)
                    break
    return out
