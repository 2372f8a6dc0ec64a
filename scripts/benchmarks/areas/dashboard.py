"""dashboard: `txctl dashboard` in Debian's headless Chromium (Playwright, /usr/bin/chromium).
A fresh daemon over a job store filled with 10,000 finished jobs (events.fill); its dashboard
loaded LOADS times: first contentful paint, DOMContentLoaded, and the table of every job on
screen (the page's `txd-table` mark, in the frame after the snapshot was rendered), each read
from the browser's own timeline (ms since the navigation started). Then, the page open on
those 10,000 rows: gated local_cwd jobs, each let go in turn, and the delay from the daemon
committing its SUCCEEDED event (EventsResponse.time, carried to the row) to the frame after
the row changed (Date.now() in the browser: the same clock)."""

from __future__ import annotations

from typing import Any

from dashboard_testing import CHROMIUM, Dashboard, browser_missing, chromium_args
from txd.client import AsyncClient
from txd.daemon.jobstore import JobStore
from txd_testing import Gates, sh_app

from benchmarks.areas.events import fill
from benchmarks.common import fmt_ms, log, median, pct
from benchmarks.context import Context
from benchmarks.daemons import stop

JOBS = 10_000
TIMELINE = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const fcp = performance.getEntriesByName("first-contentful-paint")[0];
  const table = performance.getEntriesByName("txd-table")[0];
  return {dcl: nav.domContentLoadedEventEnd, fcp: fcp ? fcp.startTime : -1,
          table: table.startTime, count: document.getElementById("count").textContent};
}"""


def _row(handle: str) -> str:
    return f'#rows tr[data-handle="{handle}"]'


async def run(ctx: Context) -> None:
    if why := browser_missing():
        log(f"dashboard: skipped: {why}")
        ctx.res.add("dashboard first paint with 10,000 jobs", "not measured", note=why)
        return
    loads = 3 if ctx.quick else 10
    changes = 10 if ctx.quick else 40
    d = ctx.daemons.new("dashboard")
    store = JobStore.in_state_dir(d.state_dir)
    fill(store, JOBS)
    store.close()
    ctx.daemons.start(d)
    dash = Dashboard.of(d)
    try:
        from playwright.async_api import async_playwright

        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=chromium_args())
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 800})
                await _first_paint(ctx, page, dash, loads)
                await _change_to_screen(ctx, page, d, changes)
            finally:
                await browser.close()
    finally:
        dash.close()
        stop(d)


async def _first_paint(ctx: Context, page: Any, dash: Dashboard, loads: int) -> None:
    fcp, dcl, table = [], [], []
    for i in range(loads):
        # The first load brings the token (kept in the tab's sessionStorage); the rest reload.
        await page.goto(dash.url if i == 0 else f"{dash.origin}/")
        await page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        t = await page.evaluate(TIMELINE)
        assert t["count"] == f"{JOBS} of {JOBS} jobs", t
        fcp.append(t["fcp"])
        dcl.append(t["dcl"])
        table.append(t["table"])
    note = f"{JOBS:,} jobs, {loads} loads, median (max)"
    ctx.res.add(
        "dashboard: first contentful paint",
        fmt_ms(median(fcp)),
        note=f"{note}; max {fmt_ms(max(fcp))}",
    )
    ctx.res.add("dashboard: DOMContentLoaded", fmt_ms(median(dcl)), note=f"max {fmt_ms(max(dcl))}")
    m = median(table)
    ctx.res.add(
        "dashboard: table of 10,000 jobs on screen (from navigation start)",
        fmt_ms(m),
        "<= 1 s",
        m <= 1000,
        note=f"max {fmt_ms(max(table))}",
    )


async def _change_to_screen(ctx: Context, page: Any, d: Any, changes: int) -> None:
    delays = []
    with Gates(ctx.base) as gates:
        async with AsyncClient(d.socket, own_connection=True) as c:
            for i in range(changes):  # one job at a time: each change measured alone
                gate = gates.new(f"dash-{i}")
                h = await c.run(sh_app(gate.wait, name="dash"), "local_cwd", cwd=str(ctx.base))
                await page.wait_for_selector(f'{_row(h)}[data-state="RUNNING"][data-shown]')
                gate.open()
                done = f'{_row(h)}[data-state="SUCCEEDED"][data-shown]'
                await page.wait_for_selector(done, timeout=30_000)
                shown = int(await page.get_attribute(done, "data-shown"))
                committed = int(await page.get_attribute(done, "data-committed"))
                delays.append(float(shown - committed))
    m, p95 = median(delays), pct(delays, 95)
    ctx.res.add(
        "dashboard: state change committed -> row shown (median)",
        fmt_ms(m),
        "< 100 ms",
        m < 100,
        note=f"n={len(delays)} over {JOBS:,} rows, p95 {fmt_ms(p95)}, max {fmt_ms(max(delays))}",
    )
    ctx.res.add(
        "dashboard: state change committed -> row shown (p95)", fmt_ms(p95), "< 100 ms", p95 < 100
    )
