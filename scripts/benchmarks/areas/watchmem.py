"""watchmem: what one open Watch stream costs the daemon, in VmRSS per stream, with 100
clients (each on a connection of its own) watching 250 running jobs: 25,000 streams (10 x 100
with --quick). A fresh daemon each time; the RSS is read before the first stream opens and
once every stream has had its first status, and the difference is divided by the streams.

Side by side in one run, interleaved, twice each: this tree's daemon and the base's (a
worktree of the older commit with its own .venv, --base-tree; its rows are left out without
it), each with its streams where txd's client opens them (the watch door, a daemon's that has
one; else its socket). Then once each: this tree's daemon with the streams at its socket
(grpcio's server, for clients that do not use the door), and the floor (benchmarks.grpc_floor:
a bare grpc.aio server whose Watch holds the stream and does nothing else), grpcio's own
per-stream cost. The clients are plain grpc.aio channels, the same for every server."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from load_testing import vm_kib
from txd import defaults
from txd.client import AsyncClient
from txd.v1 import runner_pb2 as pb
from txd_testing import Daemon

from benchmarks.common import log, submit_many, trivial_app
from benchmarks.context import Context
from benchmarks.daemons import stop

WATCH = "/txd.v1.Runner/Watch"
PARK_TIMEOUT = 300.0  # for every stream to have its first status
SETTLE = 1.0  # seconds before each RSS reading: in-flight work done (bounded, once)
START_TIMEOUT = 30.0


@dataclass
class Streams:
    """One measurement: `n` streams open cost the server `kib` KiB of VmRSS."""

    n: int
    kib: int
    before_kib: int
    opened: float  # seconds until every stream had its first status

    @property
    def per_stream(self) -> float:
        return self.kib * 1024 / self.n


async def measure(socket: Path, pid: int, requests: Sequence[bytes], clients: int) -> Streams:
    """Opens `clients` connections, each with a Watch of every request, and measures the
    server's VmRSS before the first and once all have had their first status."""
    await asyncio.sleep(SETTLE)
    before = vm_kib(pid, "VmRSS")
    channels = [
        grpc.aio.insecure_channel(f"unix:{socket}", options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(clients)
    ]
    n = clients * len(requests)
    parked = 0
    all_parked = asyncio.Event()
    calls = []

    async def watch(call: grpc.aio.UnaryStreamCall) -> None:
        nonlocal parked
        async for _ in call:
            parked += 1
            if parked == n:
                all_parked.set()
            break
        await asyncio.Event().wait()  # hold the stream until cancelled

    t0 = time.perf_counter()
    tasks = []
    try:
        for ch in channels:
            for req in requests:
                call = ch.unary_stream(WATCH, None, None)(req)
                calls.append(call)
                tasks.append(asyncio.ensure_future(watch(call)))
        try:
            await asyncio.wait_for(all_parked.wait(), PARK_TIMEOUT)
        except TimeoutError:
            raise RuntimeError(f"only {parked:,} of {n:,} streams had their first status") from None
        opened = time.perf_counter() - t0
        await asyncio.sleep(SETTLE)
        after = vm_kib(pid, "VmRSS")
    finally:
        for call in calls:
            call.cancel()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ch in channels:
            await ch.close(None)
    return Streams(n, after - before, before, opened)


def _daemon(ctx: Context, name: str, python: str | None, env: dict[str, str] | None) -> Daemon:
    """A fresh daemon of this tree, or of the tree whose interpreter is `python`."""
    root = ctx.base / name
    root.mkdir(parents=True)
    # `python -m txd.daemon ...` with this interpreter replaced by `python` (exec: same pid).
    prefix = ["sh", "-c", f'shift; exec {shlex.quote(python)} "$@"', "sh"] if python else []
    d = ctx.daemons.adopt(Daemon(root, env=env, prefix=prefix))
    return ctx.daemons.start(d)


async def _txd(ctx: Context, name: str, python: str | None, door: bool = True) -> Streams:
    """A fresh daemon's cost per stream, its streams opened where txd's client opens them (the
    watch door, where the daemon has one), or at its socket (grpcio's server) when not `door`."""
    clients, jobs = (10, 100) if ctx.quick else (100, 250)
    d = _daemon(ctx, name, python, None)
    try:
        async with AsyncClient(d.socket, timeout=60) as client:
            handles, _ = await submit_many(
                client, trivial_app("watchmem", "sleep", ["600"]), jobs, 10
            )
        requests = [pb.WatchRequest(app_handle=h).SerializeToString() for h in handles]
        at = Path(defaults.watch_door(d.socket))
        got = await measure(at if door and at.exists() else d.socket, d.pid, requests, clients)
    finally:
        stop(d)
    log(
        f"  {name}: {got.n:,} streams open in {got.opened:.1f} s, RSS +{got.kib / 1024:.1f} MiB "
        f"(from {got.before_kib / 1024:.1f} MiB): {got.per_stream:,.0f} B/stream"
    )
    return got


async def _floor(ctx: Context) -> Streams:
    clients, jobs = (10, 100) if ctx.quick else (100, 250)
    root = ctx.base / "grpc-floor"
    root.mkdir()
    socket = root / "floor.sock"
    proc = _spawn_floor(socket)
    ctx.res.procs.append(proc)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), START_TIMEOUT)
        if line.strip() != b"ready":
            raise RuntimeError(f"the gRPC floor server did not start (said {line!r})")
        requests = [pb.WatchRequest(app_handle=f"h{k}").SerializeToString() for k in range(jobs)]
        return await measure(socket, proc.pid, requests, clients)
    finally:
        _end(proc)


def _spawn_floor(socket: Path) -> subprocess.Popen[bytes]:
    script = Path(__file__).parents[1] / "grpc_floor.py"
    return subprocess.Popen([sys.executable, str(script), str(socket)], stdout=subprocess.PIPE)


def _end(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(START_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _commit(tree: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or "?"


async def run(ctx: Context) -> None:
    res = ctx.res
    here = Path(__file__).resolve().parents[3]
    base_tree: Path | None = ctx.args.base_tree
    base_python = str(base_tree / ".venv" / "bin" / "python") if base_tree else None
    if base_python is not None and not Path(base_python).exists():
        raise SystemExit(f"bench: --base-tree {base_tree} has no .venv (run scripts/setup dev)")
    new_commit = _commit(here)
    base_commit = _commit(base_tree) if base_tree else ""
    new: list[Streams] = []
    base: list[Streams] = []
    for k in range(2):  # interleaved: base, new, base, new
        if base_python is not None:
            base.append(await _txd(ctx, f"watch-base-{k}", base_python))
        new.append(await _txd(ctx, f"watch-new-{k}", None))
    socket = await _txd(ctx, "watch-socket", None, door=False)
    floor = await _floor(ctx)
    log(f"  grpc floor: {floor.n:,} streams, {floor.per_stream:,.0f} B/stream")

    def per(xs: Sequence[Streams]) -> str:
        return " / ".join(f"{x.per_stream:,.0f}" for x in xs)

    n = new[0].n
    new_b = min(x.per_stream for x in new)
    if base:
        base_b = min(x.per_stream for x in base)
        res.add(
            f"daemon RSS per open Watch stream, {n:,} streams, base {base_commit}",
            f"{base_b / 1024:.1f} KiB",
            note=f"runs {per(base)} B/stream; +{base[0].kib / 1024:.0f} MiB for {n:,} streams",
        )
    target = base_b / 2 if base else None
    res.add(
        f"daemon RSS per open Watch stream, {n:,} streams, {new_commit}",
        f"{new_b / 1024:.1f} KiB",
        f"<= {target / 1024:.1f} KiB (half the base's)" if target else "",
        new_b <= target if target else None,
        note=f"runs {per(new)} B/stream, interleaved with the base's; "
        f"+{new[0].kib / 1024:.0f} MiB for {n:,} streams",
    )
    res.add(
        f"daemon RSS per open Watch stream, {n:,} streams, {new_commit} at its socket",
        f"{socket.per_stream / 1024:.1f} KiB",
        note="the same daemon's Watch through grpcio's server (the daemon's socket), for "
        "clients that do not use the watch door",
    )
    res.add(
        f"bare grpc.aio server RSS per open stream, {n:,} streams (grpcio's own floor)",
        f"{floor.per_stream / 1024:.1f} KiB",
        note=f"grpcio {grpc.__version__}; a Watch that sends 100 bytes and holds the stream",
    )
