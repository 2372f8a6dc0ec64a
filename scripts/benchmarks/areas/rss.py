"""rss: a fresh daemon's VmRSS while it tracks 10,000 finished jobs (1,000 with --quick), and
the submissions/s on the way there."""

from __future__ import annotations

import asyncio

from load_testing import vm_kib
from txd.client import AsyncClient
from txd_testing import Daemon

from benchmarks.common import fmt_s, log, submit_many, trivial_app, wait_all
from benchmarks.context import Context


def _rss_hwm(d: Daemon) -> tuple[int, int]:
    """VmRSS and VmHWM of the daemon, in KiB."""
    return vm_kib(d.pid, "VmRSS"), vm_kib(d.pid, "VmHWM")


async def run(ctx: Context, daemon: Daemon) -> None:
    n = 1000 if ctx.quick else ctx.args.rss_jobs
    before, _ = _rss_hwm(daemon)
    async with AsyncClient(daemon.socket, timeout=60) as client:
        await submit_many(client, trivial_app(), 1, 1)  # scheduler loaded
        loaded, _ = _rss_hwm(daemon)
        log(f"submitting {n} `true` jobs (50 callers) to a fresh daemon")
        handles, elapsed = await submit_many(client, trivial_app(), n - 1, 50)
        log(f"  submitted in {fmt_s(elapsed)}; waiting for all to finish")
        counts = await wait_all(client, handles)
    await asyncio.sleep(1.0)  # let in-flight work settle (bounded, once)
    after, hwm = _rss_hwm(daemon)
    rate = (n - 1) / elapsed
    ctx.res.add(
        f"local_cwd submissions/s, {n:,} jobs, 50 callers, fresh daemon",
        f"{rate:.0f}/s",
        ">= 300/s",
        rate >= 300,
        note=f"final states {counts}",
    )
    mib = after / 1024
    ctx.res.add(
        f"daemon RSS tracking {n:,} finished jobs",
        f"{mib:.1f} MiB",
        "<= 100 MiB",
        mib <= 100,
        note=f"at start {before / 1024:.1f} MiB, after first job {loaded / 1024:.1f} MiB, peak "
        f"(VmHWM) {hwm / 1024:.1f} MiB; {(after - loaded) / n:.1f} KiB/job",
    )
