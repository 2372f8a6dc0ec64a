"""docker: local_docker on a dockerd of the bench's own (docker_testing.Engine), side by side
with the docker CLI driving the same engine: submit -> RUNNING (with --base-tree, the base
tree's daemon and txctl beside this tree's, interleaved), engine die event -> client in Wait,
engine API calls while clients watch, and runs with a 1,000-file workspace."""

from __future__ import annotations

import asyncio
import resource
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from docker_testing import BUSYBOX, Engine, EngineClient, make_docker_daemon
from txd.client import AsyncClient
from txd.v1 import AppDef, Role
from txd_testing import Daemon

from benchmarks.common import (
    BIN,
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
from benchmarks.harnesses import ROOT
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


def sleeper(name: str, seconds: int, replicas: int = 1) -> AppDef:
    return AppDef(
        name=name,
        roles=[
            Role(
                name="w",
                image=BUSYBOX,
                entrypoint="sleep",
                args=[str(seconds)],
                num_replicas=replicas,
            )
        ],
    )


async def _docker(engine: Engine, *args: str) -> str:
    """The docker CLI on the engine (off the event loop); its stdout, stripped."""
    return (await asyncio.to_thread(engine.docker, *args)).stdout.strip()


@dataclass
class Side:
    """One tree's daemon and txctl, and what they measured."""

    label: str  # "this tree (abc1234)" or "base (abc1234)"
    daemon: Daemon
    client: AsyncClient
    txctl: Path
    api: list[float] = field(default_factory=list)  # AsyncClient.run + Watch until RUNNING
    cli: list[float] = field(default_factory=list)  # `txctl run` + Watch until RUNNING
    help: list[float] = field(default_factory=list)  # `txctl --help`
    # CPU seconds (user + system) of each `txctl run` and `txctl --help`: steadier than their
    # wall times on a busy machine
    cli_cpu: list[float] = field(default_factory=list)
    help_cpu: list[float] = field(default_factory=list)


def _commit(tree: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _base_daemon(ctx: Context, engine: Engine, tree: Path) -> Daemon:
    """A daemon of the base tree's own venv (its `python -m txd.daemon`, exec'd in place of
    this one's, so that its pid is the daemon's) on the same engine."""
    python = tree / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"bench: --base-tree {tree} has no .venv: run scripts/setup dev there")
    prefix = ["/bin/sh", "-c", f'shift; exec {shlex.quote(str(python))} "$@"', "sh"]
    return ctx.daemons.start(ctx.daemons.adopt(make_docker_daemon(engine, prefix=prefix)))


async def _latency(ctx: Context, client: AsyncClient, d: Daemon, engine: Engine, n: int) -> None:
    """submit -> RUNNING seen through the Python client and through txctl, against `docker run
    -d` + `docker inspect` on the same engine; with --base-tree, the base tree's daemon and
    txctl too, each round interleaving the two (in alternating order)."""
    sides = [Side(f"this tree ({_commit(ROOT)})", d, client, BIN / "txctl")]
    base_tree = ctx.args.base_tree
    base_client: AsyncClient | None = None
    base_d: Daemon | None = None
    if base_tree is not None:
        base_d = _base_daemon(ctx, engine, base_tree)
        base_client = AsyncClient(base_d.socket, timeout=120)
        txctl = base_tree / ".venv" / "bin" / "txctl"
        sides.append(Side(f"base ({_commit(base_tree)})", base_d, base_client, txctl))
    plain_times: list[float] = []
    pair_times: list[float] = []
    try:
        # A round of each first, not counted: the first run pays for what is loaded or opened
        # once (the scheduler, the engine's image cache, the CLIs' files).
        for side in sides:
            await _side_round(
                ctx, replace(side, api=[], cli=[], help=[], cli_cpu=[], help_cpu=[]), engine, -1
            )
        await _plain(engine)
        for i in range(n):
            for side in sides if i % 2 == 0 else sides[::-1]:
                await _side_round(ctx, side, engine, i)
            plain_times.append(await _plain(engine))
            # Two replicas that must talk: the app's own network is made and joined.
            t0 = time.perf_counter()
            handle = await client.run(sleeper(f"p{i}", 30, 2), "local_docker", workspace="")
            await asyncio.wait_for(until_running(client, handle), JOB_TIMEOUT)
            pair_times.append(time.perf_counter() - t0)
            await _end(client, handle)
    finally:
        if base_client is not None:
            await base_client.close()
        if base_d is not None:  # the other figures are this tree's alone
            stop(base_d)
    _latency_rows(ctx, sides, plain_times, pair_times, n)


async def _plain(engine: Engine) -> float:
    """`docker run -d` + `docker inspect`: the seconds until the CLI saw the container run."""
    t0 = time.perf_counter()
    cid = await _docker(engine, "run", "-d", "--init", BUSYBOX, "sleep", "30")
    # `docker run -d` returns once the container started; one inspect observes it running
    running = await _docker(engine, "inspect", "-f", "{{.State.Running}}", cid)
    took = time.perf_counter() - t0
    if running != "true":
        raise RuntimeError(f"docker run -d: container {cid} not running ({running})")
    await _docker(engine, "rm", "-f", cid)
    return took


async def _side_round(ctx: Context, side: Side, engine: Engine, i: int) -> None:
    t0 = time.perf_counter()
    handle = await side.client.run(sleeper(f"l{i + 1}", 30), "local_docker", workspace="")
    await asyncio.wait_for(until_running(side.client, handle), JOB_TIMEOUT)
    side.api.append(time.perf_counter() - t0)
    await _end(side.client, handle)

    t0, cpu0 = time.perf_counter(), _children_cpu()
    handle = await txctl_run(
        side.daemon.socket, engine.env(), side.daemon.root,
        "-s", "local_docker", "--workspace", "", "utils.sh", "--image", BUSYBOX, "sleep", "30",
        txctl=side.txctl,
    )  # fmt: skip
    side.cli_cpu.append(_children_cpu() - cpu0)  # txctl has exited: nothing else ran meanwhile
    await asyncio.wait_for(until_running(side.client, handle), JOB_TIMEOUT)
    side.cli.append(time.perf_counter() - t0)
    await _end(side.client, handle)

    t0, cpu0 = time.perf_counter(), _children_cpu()
    proc = await asyncio.create_subprocess_exec(
        str(side.txctl), "--help", stdout=subprocess.DEVNULL, cwd=ctx.work
    )
    if await proc.wait():
        raise RuntimeError(f"{side.txctl} --help exited {proc.returncode}")
    side.help.append(time.perf_counter() - t0)
    side.help_cpu.append(_children_cpu() - cpu0)


async def _end(client: AsyncClient, handle: str) -> None:
    """Cancels the job and waits for its end: the engine is quiet when the next run starts, as
    it is after the docker CLI's `rm -f`."""
    await client.cancel(handle)
    await client.wait(handle, timeout=JOB_TIMEOUT)


def _children_cpu() -> float:
    """CPU seconds used by this process's children that ended and were waited for."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _runs(xs: list[float]) -> str:
    return " / ".join(f"{x:.3f}" for x in xs)


def _latency_rows(
    ctx: Context, sides: list[Side], plain: list[float], pair: list[float], n: int
) -> None:
    res, new, base = ctx.res, sides[0], sides[1:]

    def beside(pick: Callable[[Side], list[float]]) -> str:
        return "".join(
            f"; {b.label}: {fmt_s(median(pick(b)))} (runs {_runs(pick(b))})" for b in base
        )

    def ratios(pick: Callable[[Side], list[float]]) -> str:
        return "".join(f"; {b.label}: {median(pick(b)) / median(plain):.2f}x" for b in base)

    order = f"n={n} each, interleaved" if base else f"n={n}"

    def timed(title: str, pick: Callable[[Side], list[float]], prefix: str = "") -> None:
        runs = f"{prefix}{new.label}, runs {_runs(pick(new))}{beside(pick)}"
        res.add(title, fmt_s(median(pick(new))), note=runs)

    timed(
        "local_docker submit -> RUNNING seen, AsyncClient.run + Watch (median)",
        lambda s: s.api,
        f"{order}; ",
    )
    timed(
        "local_docker submit -> RUNNING seen, `txctl run` + Watch (median)",
        lambda s: s.cli,
        f"{order}; ",
    )
    res.add(
        "`docker run -d` + `docker inspect` (median), same image and engine",
        fmt_s(median(plain)),
        note=f"n={n}, runs {_runs(plain)}",
    )
    ratio = median(new.api) / median(plain)
    res.add(
        "txd / docker CLI, submit -> RUNNING through the Python client (medians)",
        f"{ratio:.2f}x",
        "<= 1.15x",
        ratio <= 1.15,
        note=f"{new.label}{ratios(lambda s: s.api)}",
    )
    cli_ratio = median(new.cli) / median(plain)
    res.add(
        "txd / docker CLI, submit -> RUNNING through txctl (medians)",
        f"{cli_ratio:.2f}x",
        note=f"{new.label}{ratios(lambda s: s.cli)}; txctl is a Python process, docker a Go one",
    )
    timed("`txctl --help` wall time (median): txctl's start-up", lambda s: s.help)
    timed("`txctl --help` CPU, user + system (median)", lambda s: s.help_cpu)
    timed(
        "`txctl run -s local_docker utils.sh ...` CPU, user + system (median)", lambda s: s.cli_cpu
    )
    res.add(
        "local_docker submit -> RUNNING seen, 2 replicas (the app's own network), AsyncClient",
        fmt_s(median(pair)),
        note=f"n={n}, {new.label}; making and joining a bridge network of the app's own",
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
