"""rss: a fresh daemon's VmRSS while it tracks 10,000 finished jobs (1,000 with --quick), its
peak (VmHWM) while it takes them, and the submissions/s on the way there. With --base-tree, a fresh
daemon of ours and one of the base tree in turn, --base-runs times each."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from load_testing import vm_kib
from txd.client import AsyncClient
from txd_testing import Daemon

from benchmarks.common import fmt_s, log, median, submit_many, trivial_app, wait_all
from benchmarks.context import Context
from benchmarks.daemons import stop
from benchmarks.sidebyside import Tree, beside

RSS_TARGET = 100.0  # MiB, tracking the finished jobs


@dataclass
class Run:
    rate: float  # submissions/s
    before: float  # MiB: at start, after the first job, after all, peak
    loaded: float
    after: float
    peak: float
    counts: dict[str, int]


def _mib(d: Daemon, key: str) -> float:
    return vm_kib(d.pid, key) / 1024


async def measure(n: int, daemon: Daemon) -> Run:
    before = _mib(daemon, "VmRSS")
    async with AsyncClient(daemon.socket, timeout=60) as client:
        await submit_many(client, trivial_app(), 1, 1)  # scheduler loaded
        loaded = _mib(daemon, "VmRSS")
        log(f"submitting {n} `true` jobs (50 callers) to a fresh daemon")
        handles, elapsed = await submit_many(client, trivial_app(), n - 1, 50)
        log(f"  submitted in {fmt_s(elapsed)}; waiting for all to finish")
        counts = await wait_all(client, handles)
    await asyncio.sleep(1.0)  # let in-flight work settle (bounded, once)
    after, peak = _mib(daemon, "VmRSS"), _mib(daemon, "VmHWM")
    return Run((n - 1) / elapsed, before, loaded, after, peak, counts)


async def run(ctx: Context) -> None:
    n = 1000 if ctx.quick else ctx.args.rss_jobs
    runs: dict[Tree | None, list[Run]] = {tree: [] for tree in ctx.sides()}
    for i in range(ctx.side_runs):
        for k, tree in enumerate(ctx.sides()):
            d = ctx.daemons.start(ctx.daemons.new(f"rss-{i}-{k}", tree=tree))
            who = "ours" if tree is None else f"base {tree.commit}"
            log(f"fresh daemon pid {d.pid} ({who}) for the RSS benchmark")
            try:
                runs[tree].append(await measure(n, d))
            finally:
                rc = stop(d)
                log(f"daemon stopped (exit {rc})")
    ours, base = runs[None], runs.get(ctx.base_tree)
    res = ctx.res
    rate = median([r.rate for r in ours])
    beside(
        res,
        f"local_cwd submissions/s, {n:,} jobs, 50 callers, fresh daemon",
        [r.rate for r in ours],
        [r.rate for r in base] if base else None,
        lambda x: f"{x:.0f}/s",
        tree=ctx.base_tree,
        target=">= 300/s",
        met=rate >= 300,
        note=f"final states {ours[-1].counts}",
    )
    last = ours[-1]
    after = median([r.after for r in ours])
    beside(
        res,
        f"daemon RSS tracking {n:,} finished jobs",
        [r.after for r in ours],
        [r.after for r in base] if base else None,
        lambda x: f"{x:.1f} MiB",
        tree=ctx.base_tree,
        target=f"<= {RSS_TARGET:.0f} MiB",
        met=after <= RSS_TARGET,
        note=f"at start {last.before:.1f} MiB, after first job {last.loaded:.1f} MiB; "
        f"{1024 * (last.after - last.loaded) / n:.1f} KiB/job",
    )
    beside(
        res,
        f"daemon peak RSS (VmHWM) while it takes {n:,} jobs",
        [r.peak for r in ours],
        [r.peak for r in base] if base else None,
        lambda x: f"{x:.1f} MiB",
        tree=ctx.base_tree,
    )
