"""tcp: the opt-in TCP listener (`txd --listen`, TLS and a token on every call) next to the Unix
socket, on one daemon, interleaved: a Status call through a warm client, a `txctl status`
process (a TLS handshake each time over TCP), and the time to refuse a wrong token that shares
a real token's first 40 characters next to one that shares nothing (the check compares SHA-256
hashes in constant time: a guess's closeness must not show)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
from tls_testing import make_pki
from txd.client import AsyncClient
from txd.daemon.tokens import TokenStore
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub
from txd_testing import Daemon

from benchmarks.common import BIN, CLI_TIMEOUT, fmt_ms, log, median, pct, trivial_app
from benchmarks.context import Context
from benchmarks.daemons import cli_env, stop

ROUNDS = 2  # every figure is measured in each round, the two doors alternating
SERVING = re.compile(r"txd serving on (tcp://127\.0\.0\.1:\d+)")


async def run(ctx: Context) -> None:
    pki = make_pki(_folder(ctx))
    d = ctx.daemons.new("tcp")
    token = TokenStore(d.state_dir).create("bench", expires=None)  # txd token create's
    d.args += [
        "--log-level", "INFO",  # the bound port is an INFO line
        "--listen", "tcp://127.0.0.1:0",
        "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key),
    ]  # fmt: skip
    ctx.daemons.start(d)
    found = SERVING.search(d.log())
    if not found:
        raise RuntimeError(f"the tcp daemon named no port:\n{d.log()}")
    url = found[1]
    log(f"tcp: daemon pid {d.pid} on {d.socket} and {url}")
    try:
        async with (
            AsyncClient(d.socket, timeout=60) as local,
            AsyncClient(url, token=token, ca=pki.ca, timeout=60) as remote,
        ):
            handle = await local.run(trivial_app("tcp-bench"))
            await local.wait(handle, timeout=60)
            with ctx.res.section():
                await _status_calls(ctx, local, remote, handle)
            with ctx.res.section():
                await _txctl_status(ctx, d, url, token, str(pki.ca), handle)
            with ctx.res.section():
                await _refusals(ctx, url, token, pki.ca.read_bytes())
    finally:
        stop(d)


def _folder(ctx: Context) -> Path:
    folder = ctx.base / "tcp-pki"
    folder.mkdir()
    return folder


async def _interleaved(
    n: int, doors: dict[str, Callable[[], Awaitable[object]]]
) -> dict[str, list[float]]:
    """Milliseconds per call for each door, ROUNDS rounds of n calls each, the doors alternating."""
    times: dict[str, list[float]] = {name: [] for name in doors}
    for _ in range(ROUNDS):
        for name, call in doors.items():
            for _ in range(n):
                t0 = time.perf_counter()
                await call()
                times[name].append((time.perf_counter() - t0) * 1000)
    return times


async def _status_calls(ctx: Context, local: AsyncClient, remote: AsyncClient, handle: str) -> None:
    n = 50 if ctx.quick else 500
    await local.status(handle)
    await remote.status(handle)  # both connections up before the clock starts
    t = await _interleaved(
        n, {"socket": lambda: local.status(handle), "tcp": lambda: remote.status(handle)}
    )
    ratio = median(t["tcp"]) / median(t["socket"])
    ctx.res.add(
        "Status through a warm client: TCP+TLS+token / Unix socket (median)",
        f"{ratio:.2f}x",
        note=f"socket {fmt_ms(median(t['socket']))} (p95 {fmt_ms(pct(t['socket'], 95))}), "
        f"tcp {fmt_ms(median(t['tcp']))} (p95 {fmt_ms(pct(t['tcp'], 95))}); "
        f"{ROUNDS}x{n} calls each, interleaved",
    )


async def _txctl_status(
    ctx: Context, d: Daemon, url: str, token: str, ca: str, handle: str
) -> None:
    n = 3 if ctx.quick else 10
    env = cli_env(d)
    tcp_env = {**env, "TXD_HOST": url, "TXD_TOKEN": token, "TXD_CA": ca}

    async def txctl(environ: dict[str, str]) -> None:
        proc = await asyncio.create_subprocess_exec(
            str(BIN / "txctl"), "status", handle, env=environ,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), CLI_TIMEOUT)
        if proc.returncode:
            raise RuntimeError(f"txctl status exited {proc.returncode}: {err.decode()}")

    t = await _interleaved(n, {"socket": lambda: txctl(env), "tcp": lambda: txctl(tcp_env)})
    ratio = median(t["tcp"]) / median(t["socket"])
    ctx.res.add(
        "`txctl status` process: TCP+TLS+token / Unix socket (median wall)",
        f"{ratio:.2f}x",
        note=f"socket {fmt_ms(median(t['socket']))}, tcp {fmt_ms(median(t['tcp']))} "
        f"(a TLS handshake per process); {ROUNDS}x{n} runs each, interleaved",
    )


async def _refusals(ctx: Context, url: str, token: str, ca: bytes) -> None:
    """A refused List with a wrong token sharing 40 characters with the real one, next to one
    sharing none (same length): the medians' ratio should be 1 within noise."""
    n = 100 if ctx.quick else 1000
    near = token[:40] + ("A" if token[40] != "A" else "B") + token[41:]
    far = "x" * len(token)
    channel = grpc.aio.secure_channel(
        url.removeprefix("tcp://"), grpc.ssl_channel_credentials(root_certificates=ca)
    )
    stub = RunnerStub(channel)

    def refused(wrong: str) -> Callable[[], Awaitable[object]]:
        async def call() -> None:
            try:
                await stub.List(
                    pb.ListRequest(), metadata=[("authorization", f"Bearer {wrong}")], timeout=30
                )
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAUTHENTICATED:
                    raise
                return
            raise RuntimeError("a wrong token was accepted")

        return call

    try:
        await refused(far)()  # connected before the clock starts
        t = await _interleaved(n, {"near": refused(near), "far": refused(far)})
    finally:
        await channel.close(None)
    ratio = median(t["near"]) / median(t["far"])
    ctx.res.add(
        "refusing a wrong token: sharing 40 characters / sharing none (median)",
        f"{ratio:.2f}x",
        note=f"near {fmt_ms(median(t['near']))}, far {fmt_ms(median(t['far']))}; "
        f"{ROUNDS}x{n} calls each, interleaved",
    )
