"""aws: aws_batch on a moto_server of the bench's own (moto_testing.Moto, without a Docker
engine: its Batch jobs stay SUBMITTED, live for as long as the bench needs them):
describe_jobs calls per minute while 1, 10 and 100 clients watch 10 and 250 jobs, txd's own
count and moto's access log, next to TorchX's per-job describe polling."""

from __future__ import annotations

import asyncio
import math
import time

from docker_testing import BUSYBOX
from moto_testing import Moto, make_batch_daemon, make_queue
from txd.client import AsyncClient
from txd.v1 import AppDef, Resource, Role
from txd_testing import Daemon

from benchmarks.common import log
from benchmarks.context import Context
from benchmarks.daemons import stop
from benchmarks.torchx import TORCHX_WAIT_INTERVAL
from benchmarks.watching import watch_window

AWS_POLL = 1.0  # seconds: the daemon's aws_batch.poll_interval
AWS_DESCRIBE_BATCH = 100  # job ids per describe_jobs, Batch's maximum
AWS_PARK_TIMEOUT = 60.0  # for every Watch stream of a window to have its first status
AWS_SUBMITS_AT_ONCE = 16
NO_DOCKER = "unix:///nonexistent/docker.sock"  # moto runs no job: they stay SUBMITTED
# moto's access log (werkzeug) has one line per request: this one is a describe_jobs.
MOTO_DESCRIBE = '"POST /v1/describejobs '


def describes(moto: Moto) -> int:
    """describe_jobs requests moto has answered, by its own access log."""
    with open(moto.log_path, errors="replace") as f:
        return sum(MOTO_DESCRIBE in line for line in f)


async def run(ctx: Context) -> None:
    moto = Moto(NO_DOCKER, ctx.base / "moto.log")
    try:
        await asyncio.to_thread(moto.start)
        assert moto.proc is not None
        ctx.res.procs.append(moto.proc)
        # moto's state manager moves a Batch job on after a million describes: never, here.
        moto.api(
            "POST",
            "/moto-api/state-manager/set-transition",
            {"model_name": "batch::job", "transition": {"progression": "manual", "times": 10**6}},
        )
        log(f"aws: moto_server pid {moto.pid} at {moto.url}")
        d = ctx.daemons.start(ctx.daemons.adopt(make_batch_daemon(moto.url, poll=AWS_POLL)))
        try:
            async with AsyncClient(d.socket, timeout=120) as client:
                with ctx.res.section():
                    await _calls(ctx, client, d, moto, 5.0 if ctx.quick else 30.0)
        finally:
            stop(d)
    finally:
        moto.stop()


async def _calls(ctx: Context, client: AsyncClient, d: Daemon, moto: Moto, span: float) -> None:
    """describe_jobs calls per minute while 1, 10 and 100 clients each watch every one of 10,
    then 250, live jobs: txd's own count and moto's."""
    cfg = {"queue": (await make_queue(moto, "txd-bench")).name}
    role = Role(name="w", image=BUSYBOX, entrypoint="true", resource=Resource(cpu=1, mem_mb=64))
    gate = asyncio.Semaphore(AWS_SUBMITS_AT_ONCE)
    handles: list[str] = []

    async def submit(i: int) -> str:
        async with gate:
            return await client.run(AppDef(name=f"a{i}", roles=[role]), "aws_batch", cfg)

    async def txd_describes() -> int:
        infos = (await client.schedulers()).schedulers
        return int(next(i for i in infos if i.name == "aws_batch").backend_calls["describe_jobs"])

    async def snapshot() -> tuple[int, int]:
        return await txd_describes(), await asyncio.to_thread(describes, moto)

    for jobs in (10, 250):
        t0 = time.perf_counter()
        handles += await asyncio.gather(*(submit(i) for i in range(len(handles), jobs)))
        log(f"aws: {jobs} live (SUBMITTED) jobs, submitted in {time.perf_counter() - t0:.1f} s")
        per_poll = math.ceil(jobs / AWS_DESCRIBE_BATCH)
        target = f"{per_poll}/interval = {per_poll * 60 / AWS_POLL:.0f}/min"
        for n in (1, 10, 100):
            w = await watch_window(d, handles, n, span, snapshot, AWS_PARK_TIMEOUT)
            torchx = n * jobs * 60 / TORCHX_WAIT_INTERVAL
            name = f"aws_batch describe_jobs per minute, {n} client(s) watching {jobs} jobs"
            if w.before is None or w.after is None:
                ctx.res.add(
                    name,
                    "not measured",
                    target,
                    None,
                    note=f"only {w.parked:,} of {w.streams:,} Watch streams had their "
                    f"first status within {AWS_PARK_TIMEOUT:.0f} s",
                )
                continue
            (t0_calls, m0), (t1_calls, m1) = w.before, w.after
            txd, seen = t1_calls - t0_calls, m1 - m0
            # A window of `span` seconds holds at most floor(span / interval) + 1 poll starts.
            allowed = per_poll * (math.floor(w.span / AWS_POLL) + 1)
            ctx.res.add(
                name,
                f"{txd * 60 / w.span:.0f}/min",
                target,
                max(txd, seen) <= allowed,
                note=f"txd's backend_calls {txd} in {w.span:.1f} s, moto's access log {seen} "
                f"(at most {allowed}: {per_poll} per poll, aws_batch.poll_interval="
                f"{AWS_POLL:g} s); {w.streams:,} Watch streams (all had their first status in "
                f"{w.opened:.1f} s); TorchX's runner.wait: {n} x {jobs} x 60 / "
                f"{TORCHX_WAIT_INTERVAL:.0f} s = {torchx:,.0f} describe_jobs/min (and as many "
                f"list_jobs pages at least)",
            )
