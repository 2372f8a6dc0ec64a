"""slurm: on a real Slurm test cluster (scripts/slurm-up), submit -> RUNNING through txctl
against plain sbatch + squeue polled at the same interval; what the checks before queueing
(cfg precheck, on by default) add to a Run, against precheck=False, interleaved; and squeue
calls per minute while 1, 10 and 100 clients watch.

The cluster is scripts/slurm-up's, as the tests' (their cluster is a pytest fixture in
tests/schedulers/hpc/slurm/conftest.py, not a harness module the bench could import)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from txd.client import AsyncClient
from txd_testing import Daemon

from benchmarks.common import (
    JOB_TIMEOUT,
    ROOT,
    fmt_s,
    median,
    pct,
    sh,
    trivial_app,
    txctl_run,
    until_running,
)
from benchmarks.context import Context
from benchmarks.daemons import stop
from benchmarks.watching import calls_per_minute

SLURM_POLL = 0.5  # seconds: txd's --poll-interval and the plain loop's squeue period


async def run(ctx: Context) -> None:
    res, quick = ctx.res, ctx.quick
    sdir = ctx.base / "slurm-cluster"
    env = {**os.environ, "SLURM_DIR": str(sdir), "SLURM_CONF": str(sdir / "slurm.conf")}
    d = ctx.daemons.new(
        "slurm",
        ["--poll-interval", f"slurm={SLURM_POLL}"],
        {k: env[k] for k in ("SLURM_DIR", "SLURM_CONF")},
    )
    await sh(env, str(ROOT / "scripts" / "slurm-up"))
    try:
        ctx.daemons.start(d)
        async with AsyncClient(d.socket, timeout=60) as client:
            with res.section():
                await _latency(ctx, client, d, env, sdir, 3 if quick else 10)
            with res.section():
                await _precheck_cost(ctx, client, sdir, 6 if quick else 20)
            with res.section():
                await _squeue_rate(ctx, client, d, sdir, 5.0 if quick else 20.0)
    finally:
        stop(d)
        await sh(env, str(ROOT / "scripts" / "slurm-down"))


async def _latency(
    ctx: Context, client: AsyncClient, d: Daemon, env: dict[str, str], sdir: Path, n: int
) -> None:
    txd_times, plain_times = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        # No workspace: sbatch alone is compared with plain sbatch.
        handle = await txctl_run(
            d.socket, env, sdir, "-s", "slurm", "--workspace", "", "utils.sh", "sleep", "5"
        )
        await asyncio.wait_for(until_running(client, handle), JOB_TIMEOUT)
        txd_times.append(time.perf_counter() - t0)
        await client.cancel(handle)

        t0 = time.perf_counter()
        job = await sh(env, "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 5")
        # (the same job, submitted by hand)
        while await sh(env, "squeue", "-h", "-j", job, "-o", "%T") != "RUNNING":  # noqa: ASYNC110
            await asyncio.sleep(SLURM_POLL)  # the plain way, measured: poll squeue
        plain_times.append(time.perf_counter() - t0)
        await sh(env, "scancel", job)
    ctx.res.add(
        f"slurm submit -> RUNNING seen, `txctl run` + Watch (poll {SLURM_POLL} s)",
        fmt_s(median(txd_times)),
        note=f"median of {n}; p95 {fmt_s(pct(txd_times, 95))}",
    )
    ctx.res.add(
        f"slurm submit -> RUNNING seen, `sbatch` + `squeue` every {SLURM_POLL} s",
        fmt_s(median(plain_times)),
        note=f"median of {n}; p95 {fmt_s(pct(plain_times, 95))}",
    )


async def _precheck_cost(ctx: Context, client: AsyncClient, sdir: Path, n: int) -> None:
    """Run (the RPC, until the handle comes back) of a one-replica app, with the checks and
    with precheck=False, alternately, through the Python client (no txctl start-up)."""
    times: dict[bool, list[float]] = {True: [], False: []}
    app = trivial_app("pre", "bash", ["-c", "sleep 30"])
    for i in range(2 * n):
        on = i % 2 == 0
        cfg = {} if on else {"precheck": False}
        t0 = time.perf_counter()
        handle = await client.run(app, "slurm", cfg, cwd=str(sdir))
        times[on].append(time.perf_counter() - t0)
        await client.cancel(handle)
    for on in (True, False):
        ctx.res.add(
            f"slurm Run (submit, until the handle), precheck={'on' if on else 'False'}",
            fmt_s(median(times[on])),
            note=f"median of {n}, alternating; p95 {fmt_s(pct(times[on], 95))}",
        )


async def _squeue_rate(
    ctx: Context, client: AsyncClient, d: Daemon, sdir: Path, span: float
) -> None:
    release = sdir / "release-bench"
    script = f"while [ ! -e {release} ]; do sleep 0.2; done"
    handles = [
        await client.run(trivial_app(f"w{i}", "bash", ["-c", script]), "slurm", cwd=str(sdir))
        for i in range(10)
    ]
    for h in handles:
        await asyncio.wait_for(until_running(client, h), JOB_TIMEOUT)

    async def calls() -> int:
        infos = (await client.schedulers()).schedulers
        return int(next(i for i in infos if i.name == "slurm").backend_calls["squeue"])

    for n in (1, 10, 100):
        per_min = await calls_per_minute(d, handles, n, calls, span)
        ctx.res.add(
            f"squeue calls per minute, {n} client(s) watching 10 Slurm jobs",
            f"{per_min:.0f}/min",
            note=f"poll interval {SLURM_POLL} s = {60 / SLURM_POLL:.0f}/min; each client "
            f"polling squeue itself would make {n * 60 / SLURM_POLL:.0f}/min",
        )
    release.touch()
    for h in handles:
        await client.wait(h, timeout=JOB_TIMEOUT)
