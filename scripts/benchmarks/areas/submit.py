"""submit: local_cwd submissions/s through AsyncClient with 50 concurrent callers, and how fast
the state dir's filesystem creates files (again on tmpfs: daemon cost apart from the disk's)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from txd.client import AsyncClient

from benchmarks.common import fs_type, log, median, submit_many, trivial_app, wait_all
from benchmarks.context import Context


async def run(ctx: Context, client: AsyncClient, where: str = "", target: bool = True) -> None:
    n = 200 if ctx.quick else ctx.args.submit_runs
    rounds = 1 if ctx.quick else 3
    callers = 50
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
        ">= 300/s" if target else "",
        rate >= 300 if target else None,
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
