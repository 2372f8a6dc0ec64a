"""docker: local_docker on a dockerd of the bench's own (docker_testing.Engine), side by side
with the docker CLI driving the same engine: submit -> RUNNING, engine die event -> client in
Wait, engine API calls while clients watch, and runs with a 1,000-file workspace."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from docker_testing import BUSYBOX, Engine, EngineClient, make_docker_daemon
from txd.client import AsyncClient
from txd.v1 import AppDef, Role
from txd_testing import Daemon

from benchmarks.common import (
    JOB_TIMEOUT,
    fmt_ms,
    fmt_s,
    median,
    pct,
    txctl_run,
    until_running,
)
from benchmarks.context import Context
from benchmarks.daemons import stop
from benchmarks.watching import calls_per_minute


async def run(ctx: Context) -> None:
    res, quick = ctx.res, ctx.quick
    engine = Engine(ctx.base / "docker-run")
    await asyncio.to_thread(engine.start)
    try:
        d = ctx.daemons.start(ctx.daemons.adopt(make_docker_daemon(engine)))
        try:
            async with AsyncClient(d.socket, timeout=120) as client:
                docker = engine.client()
                try:
                    with res.section():
                        await _latency(ctx, client, d, engine, 3 if quick else 10)
                    with res.section():
                        await _notify(
                            ctx, client, EngineClient(engine.host, docker), 5 if quick else 20
                        )
                    with res.section():
                        await _calls(ctx, client, d, 5.0 if quick else 20.0)
                    with res.section():
                        await _workspace_builds(ctx, client, 2 if quick else 5)
                finally:
                    await docker.close()
        finally:
            stop(d)
    finally:
        await asyncio.to_thread(engine.stop)


def sleeper(name: str, seconds: int) -> AppDef:
    return AppDef(
        name=name, roles=[Role(name="w", image=BUSYBOX, entrypoint="sleep", args=[str(seconds)])]
    )


async def _docker(engine: Engine, *args: str) -> str:
    """The docker CLI on the engine (off the event loop); its stdout, stripped."""
    return (await asyncio.to_thread(engine.docker, *args)).stdout.strip()


async def _latency(ctx: Context, client: AsyncClient, d: Daemon, engine: Engine, n: int) -> None:
    txd_times: list[float] = []
    plain_times: list[float] = []
    api_times: list[float] = []
    api_none_times: list[float] = []
    for i in range(n):
        # The daemon's part alone: the Python client, with the app's own network and without
        # one (as the docker CLI runs here: the engine has no default bridge).
        for times, cfg in ((api_times, {}), (api_none_times, {"network": "none"})):
            t0 = time.perf_counter()
            handle = await client.run(sleeper(f"l{i}", 30), "local_docker", cfg, workspace="")
            await asyncio.wait_for(until_running(client, handle), JOB_TIMEOUT)
            times.append(time.perf_counter() - t0)
            await client.cancel(handle)

        t0 = time.perf_counter()
        handle = await txctl_run(
            d.socket, engine.env(), d.root,
            "-s", "local_docker", "--workspace", "", "utils.sh", "--image", BUSYBOX, "sleep", "30",
        )  # fmt: skip
        await asyncio.wait_for(until_running(client, handle), JOB_TIMEOUT)
        txd_times.append(time.perf_counter() - t0)
        await client.cancel(handle)

        t0 = time.perf_counter()
        cid = await _docker(engine, "run", "-d", "--init", BUSYBOX, "sleep", "30")
        # `docker run -d` returns once the container started; one inspect observes it running
        running = await _docker(engine, "inspect", "-f", "{{.State.Running}}", cid)
        plain_times.append(time.perf_counter() - t0)
        if running != "true":
            raise RuntimeError(f"docker run -d: container {cid} not running ({running})")
        await _docker(engine, "rm", "-f", cid)
    ratio = median(txd_times) / median(plain_times)
    res = ctx.res
    res.add(
        "local_docker submit -> RUNNING seen, `txctl run` + Watch (median)",
        fmt_s(median(txd_times)),
        note=f"n={n}, p95 {fmt_s(pct(txd_times, 95))}; the app's own network included",
    )
    res.add(
        "`docker run -d` + `docker inspect` (median), same image and engine",
        fmt_s(median(plain_times)),
        note=f"n={n}, p95 {fmt_s(pct(plain_times, 95))}",
    )
    res.add(
        "local_docker submit -> RUNNING seen, AsyncClient.run + Watch (median)",
        fmt_s(median(api_times)),
        note=f"n={n}; with `-c network=none`: {fmt_s(median(api_none_times))}",
    )
    res.add(
        "txd / docker CLI, submit -> RUNNING (medians)",
        f"{ratio:.2f}x",
        "<= 1.15x",
        ratio <= 1.15,
    )


async def _notify(ctx: Context, client: AsyncClient, engine: EngineClient, n: int) -> None:
    """The engine's die event (seen by our own event subscription) -> a client blocked in
    Wait returns: both timed in this process."""
    lags = []
    for i in range(n):
        handle = await client.run(sleeper(f"n{i}", 1), "local_docker", workspace="")
        app_id = handle.rsplit("/", 1)[1]
        labels = {"txd.app_id": app_id}
        async with engine.events(labels, type="container", event="die") as events:

            async def first_die() -> float:
                await events.next(JOB_TIMEOUT)
                return time.perf_counter()

            died = asyncio.get_running_loop().create_task(first_die())
            await client.wait(handle, timeout=JOB_TIMEOUT)
            notified = time.perf_counter()
            die = await asyncio.wait_for(died, JOB_TIMEOUT)
        lags.append(notified - die)
    ctx.res.add(
        "local_docker: engine die event -> client in Wait notified (median)",
        fmt_ms(median(lags) * 1000),
        "<= 20 ms",
        median(lags) <= 0.020,
        note=f"n={n}, p95 {fmt_ms(pct(lags, 95) * 1000)}, max {fmt_ms(max(lags) * 1000)}",
    )


async def _calls(ctx: Context, client: AsyncClient, d: Daemon, span: float) -> None:
    handles = [
        await client.run(sleeper(f"c{i}", 600), "local_docker", workspace="") for i in range(10)
    ]
    for h in handles:
        await asyncio.wait_for(until_running(client, h), JOB_TIMEOUT)

    async def calls() -> int:
        infos = (await client.schedulers()).schedulers
        return sum(next(i for i in infos if i.name == "local_docker").backend_calls.values())

    for n in (1, 10, 100):
        per_min = await calls_per_minute(d, handles, n, calls, span)
        ctx.res.add(
            f"engine API calls per minute, {n} client(s) watching 10 local_docker jobs",
            f"{per_min:.0f}/min",
            note="status is pushed by one event stream: constant in the number of clients",
        )
    for h in handles:
        await client.cancel(h)
    for h in handles:
        await client.wait(h, timeout=JOB_TIMEOUT)


async def _workspace_builds(ctx: Context, client: AsyncClient, n: int) -> None:
    """`run` with a workspace of 1,000 files: the first build, then unchanged (cached: nothing
    built), then one file changed, each against a run without a workspace."""
    ws = ctx.base / "workspace"
    _write_workspace(ws)

    async def run(workspace: str) -> float:
        t0 = time.perf_counter()
        handle = await client.run(sleeper("ws", 0), "local_docker", workspace=workspace)
        took = time.perf_counter() - t0
        await client.wait(handle, timeout=JOB_TIMEOUT)
        return took

    first = await run(str(ws))
    bare = [await run("") for _ in range(n)]
    cached = [await run(str(ws)) for _ in range(n)]
    changed = []
    for i in range(n):
        (ws / "pkg0" / "mod0.py").write_text(f"# changed {i} {time.time()}\n")
        changed.append(await run(str(ws)))
    note = f"median of {n}; `run` returning its handle, build included"
    res = ctx.res
    res.add("local_docker `run`, no workspace", fmt_s(median(bare)), note=note)
    res.add("local_docker `run`, 1,000-file workspace, first build", fmt_s(first))
    res.add(
        "local_docker `run`, 1,000-file workspace unchanged (cached image)",
        fmt_s(median(cached)),
        note=f"{note}; {fmt_s(median(cached) - median(bare))} over no workspace",
    )
    res.add(
        "local_docker `run`, 1,000-file workspace, one file changed",
        fmt_s(median(changed)),
        note=note,
    )


def _write_workspace(ws: Path) -> None:
    for i in range(1000):
        sub = ws / f"pkg{i // 100}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"mod{i}.py").write_text(f"# module {i}\n" + "x = 1\n" * 40)
