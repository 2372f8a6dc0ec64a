"""latency: a job's end (its last timestamp) -> its terminal status at a client blocked in
Wait; and at a client watching it, through the watch door (the Python client's way) and through
the socket (grpcio's server), alternated in one run."""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
from txd.client import AsyncClient
from txd.v1 import AppState, AppStatus
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub

from benchmarks.common import fmt_ms, log, median, pct, trivial_app
from benchmarks.context import Context

# The job sleeps first so that the Wait call is surely parked in the daemon, then writes
# time.time_ns() to a file as its last action and leaves with os._exit (no interpreter
# teardown after the stamp).
STAMP = (
    "import os, sys, time\n"
    "time.sleep(0.3)\n"
    "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)\n"
    "os.write(fd, b'%d' % time.time_ns())\n"
    "os._exit(0)\n"
)


async def run(ctx: Context, client: AsyncClient) -> None:
    n = 8 if ctx.quick else ctx.args.latency_runs
    stamp_dir = ctx.base / "stamps"
    stamp_dir.mkdir(exist_ok=True)
    lat: list[float] = []
    log(f"job-end -> Wait latency x{n}")
    for i in range(n):
        lat.append(await _lateness(client, stamp_dir / f"{i}", lambda h: client.wait(h, 60)))
    m, p95 = median(lat), pct(lat, 95)
    ctx.res.add(
        "job end -> client blocked in Wait notified (median)",
        fmt_ms(m),
        "<= 20 ms",
        m <= 20,
        note=f"n={n}, min {fmt_ms(min(lat))}, max {fmt_ms(max(lat))}",
    )
    ctx.res.add("job end -> client notified (p95)", fmt_ms(p95), "<= 20 ms", p95 <= 20)
    await _watched(ctx, client, n, stamp_dir)


async def _lateness(
    client: AsyncClient, stamp: Path, told: Callable[[str], Awaitable[AppStatus]]
) -> float:
    """Milliseconds from a job's last act (the time it writes to `stamp`) to `told(handle)`
    returning its terminal status."""
    h = await client.run(trivial_app("latency", sys.executable, ["-c", STAMP, str(stamp)]))
    st = await told(h)
    arrived = time.time_ns()
    if st.state != AppState.SUCCEEDED:
        raise RuntimeError(f"latency job ended {AppState.Name(st.state)}: {st.msg}")
    return (arrived - int(stamp.read_text())) / 1e6


async def _watched(ctx: Context, client: AsyncClient, n: int, stamp_dir: Path) -> None:
    """The same job end seen by a Watch stream: at the watch door (client.watch) and at the
    socket (a plain stub), in turns, the first of each pair alternating."""
    lat: dict[str, list[float]] = {"door": [], "socket": []}
    log(f"job-end -> Watch latency x{n}, watch door and socket in turns")
    async with grpc.aio.insecure_channel(f"unix:{client.socket_path}") as channel:
        at_socket = RunnerStub(channel)

        async def by_door(h: str) -> AppStatus:
            return [s async for s in client.watch(h)][-1]

        async def by_socket(h: str) -> AppStatus:
            request = pb.WatchRequest(app_handle=h)
            return [r.status async for r in at_socket.Watch(request, timeout=60)][-1]

        told = {"door": by_door, "socket": by_socket}
        for i in range(n):
            for where in ("door", "socket") if i % 2 == 0 else ("socket", "door"):
                stamp = stamp_dir / f"watch-{where}-{i}"
                lat[where].append(await _lateness(client, stamp, told[where]))
    door, sock = median(lat["door"]), median(lat["socket"])
    ctx.res.add(
        "job end -> client watching notified, watch door (median)",
        fmt_ms(door),
        "<= 20 ms",
        door <= 20,
        note=f"n={n}, min {fmt_ms(min(lat['door']))}, max {fmt_ms(max(lat['door']))}; "
        f"{door / sock:.2f}x the socket's in the same run",
    )
    ctx.res.add(
        "job end -> client watching notified, socket (median)",
        fmt_ms(sock),
        note=f"n={n}, min {fmt_ms(min(lat['socket']))}, max {fmt_ms(max(lat['socket']))}",
    )
