"""submit: local_cwd submissions/s through AsyncClient with 50 concurrent callers, and how fast
the state dir's filesystem creates files (again on tmpfs: daemon cost apart from the disk's).
With --base-tree, on a daemon of ours and one of the base tree, their rounds in turn."""

from __future__ import annotations

import os
import time
from pathlib import Path

from txd.client import AsyncClient

from benchmarks.common import fs_type, log, median, submit_many, trivial_app, wait_all
from benchmarks.context import Context
from benchmarks.daemons import stop
from benchmarks.sidebyside import beside

CALLERS = 50
TARGET = 300.0  # submissions/s


async def run(ctx: Context, client: AsyncClient, where: str = "", target: bool = True) -> None:
    n = 200 if ctx.quick else ctx.args.submit_runs
    rounds = 1 if ctx.quick else 3
    callers = CALLERS
    app = trivial_app()
    await submit_many(client, app, 20, 10)  # warm-up: scheduler loaded, channel open
    rates: list[float] = []
    counts: dict[str, int] = {}
    for i in range(rounds):
        log(
            f"submitting {n} `true` jobs from {callers} concurrent callers{where} "
            f"({i + 1}/{rounds})"
        )
        handles, elapsed = await submit_many(client, app, n, callers)
        rates.append(n / elapsed)
        for k, v in (await wait_all(client, handles)).items():
            counts[k] = counts.get(k, 0) + v
    rate = median(rates)
    spread = f", rounds {' / '.join(f'{r:.0f}' for r in rates)}" if rounds > 1 else ""
    ctx.res.add(
        f"local_cwd submissions/s, AsyncClient, {callers} callers{where}",
        f"{rate:.0f}/s",
        f">= {TARGET:.0f}/s" if target else "",
        rate >= TARGET if target else None,
        note=f"median of {rounds} x {n} runs{spread}; final states {counts}",
    )


def fs_probe(ctx: Context, directory: Path) -> None:
    """How fast the state dir's filesystem creates files: every local_cwd job creates
    some (the app dir, and a log file and its index per replica with output)."""
    probe = directory / "fs-probe"
    probe.mkdir(parents=True)
    n = 1000
    t0 = time.perf_counter()
    for i in range(n):
        os.close(os.open(probe / str(i), os.O_WRONLY | os.O_CREAT, 0o644))
    elapsed = time.perf_counter() - t0
    ctx.res.add(
        f"file creations/s in the state dir ({fs_type(directory)})",
        f"{n / elapsed:,.0f}/s",
        note=f"{1e6 * elapsed / n:.0f} us per empty file",
    )


async def side_by_side(ctx: Context) -> None:
    """The rounds of run() on a fresh daemon of ours and one of the base tree, in turn."""
    n = 200 if ctx.quick else ctx.args.submit_runs
    rounds = max(ctx.side_runs, 1 if ctx.quick else 3)
    sides = ctx.sides()
    daemons = [
        ctx.daemons.start(ctx.daemons.new(f"submit-{k}", tree=tree)) for k, tree in enumerate(sides)
    ]
    clients = [AsyncClient(d.socket, timeout=60) for d in daemons]
    rates: list[list[float]] = [[] for _ in sides]
    counts: dict[str, int] = {}
    try:
        for c in clients:
            await submit_many(c, trivial_app(), 20, 10)  # warm-up: scheduler loaded
        for i in range(rounds):
            for c, tree, k in zip(clients, sides, range(len(sides)), strict=True):
                who = "ours" if tree is None else f"base {tree.commit}"
                log(f"submitting {n} `true` jobs from {CALLERS} callers, {who} ({i + 1}/{rounds})")
                handles, elapsed = await submit_many(c, trivial_app(), n, CALLERS)
                rates[k].append(n / elapsed)
                for state, v in (await wait_all(c, handles)).items():
                    counts[state] = counts.get(state, 0) + v
    finally:
        for c in clients:
            await c.close()
        for d in daemons:
            stop(d)
    rate = median(rates[0])
    beside(
        ctx.res,
        f"local_cwd submissions/s, AsyncClient, {CALLERS} callers, fresh daemon",
        rates[0],
        rates[1] if len(rates) > 1 else None,
        lambda x: f"{x:.0f}/s",
        tree=ctx.base_tree,
        target=f">= {TARGET:.0f}/s",
        met=rate >= TARGET,
        note=f"median of {rounds} x {n} runs; final states {counts}",
    )
