"""aws_batch's polling at scale: 250 live jobs cost 3 describe_jobs per poll interval (100 ids
each at most), however many clients watch. The jobs stay SUBMITTED on a moto of this test's own
whose Batch state machine never advances (moto's state manager: batch::job moves on only after
a million ticks), so no container runs; a proxy in front of it records every describe_jobs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aws_proxy import AwsProxy
from docker_testing import BUSYBOX
from moto_testing import Moto, make_batch_daemon, make_queue
from txd.v1 import AppDef, Resource, Role
from txd_testing import Daemon, remove_tree, short_tmpdir

pytestmark = pytest.mark.timeout(180)
SCHED = "aws_batch"
JOBS = 250


@pytest.fixture
def idle_moto() -> Iterator[Moto]:
    root = short_tmpdir("txd-moto-idle-")
    moto = Moto.start_new("unix:///nonexistent/docker.sock", root / "moto.log")
    try:
        moto.api(
            "POST",
            "/moto-api/state-manager/set-transition",
            {"model_name": "batch::job", "transition": {"progression": "manual", "times": 10**6}},
        )
        yield moto
    finally:
        moto.stop()
        remove_tree(root)


@pytest.fixture
async def idle_proxy(idle_moto: Moto) -> AsyncIterator[AwsProxy]:
    p = await AwsProxy(idle_moto.url).start()
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
def idle_daemon(idle_proxy: AwsProxy) -> Iterator[Daemon]:
    d = make_batch_daemon(idle_proxy.url, poll=0.5).start()
    try:
        yield d
    finally:
        d.close()
        remove_tree(d.root)


async def _until(proxy: AwsProxy, n: int) -> None:
    async with proxy.arrived:
        await proxy.arrived.wait_for(lambda: len(proxy.describes) >= n)


async def test_250_live_jobs_cost_3_describes_per_poll_whoever_watches(
    idle_moto: Moto, idle_proxy: AwsProxy, idle_daemon: Daemon
) -> None:
    queue = await make_queue(idle_moto)
    role = Role(name="w", image=BUSYBOX, entrypoint="true", resource=Resource(cpu=1, mem_mb=64))
    app = AppDef(name="many", roles=[role])
    gate = asyncio.Semaphore(16)
    async with idle_daemon.client() as c:

        async def run() -> str:
            async with gate:
                return str(await c.run(app, SCHED, {"queue": queue.name}))

        handles = await asyncio.gather(*(run() for _ in range(JOBS)))
        assert len(set(handles)) == JOBS
        # Ten clients watch meanwhile: they are answered from the daemon's cache.
        watchers = [asyncio.create_task(_drain(c, h)) for h in handles[:10]]
        start = len(idle_proxy.describes)
        async with asyncio.timeout(60):
            await _until(idle_proxy, start + 12)
        for w in watchers:
            w.cancel()
        window = idle_proxy.describes[start:]
        assert all(len(r) <= 100 for r in window), [len(r) for r in window]
        # From the first poll wholly in the window on, polls are 3 requests that ask for every
        # live job once: 100 + 100 + 50.
        k = next(i for i in range(3) if len({j for r in window[i : i + 3] for j in r}) == JOBS)
        polls = [window[i : i + 3] for i in range(k, len(window) - 2, 3)]
        assert len(polls) >= 3
        for poll in polls:
            assert sorted(len(r) for r in poll) == [50, 100, 100]
            assert len({j for r in poll for j in r}) == JOBS
        # txd's own count of its requests is the proxy's.
        counted = next(
            s.backend_calls["describe_jobs"]
            for s in (await c.schedulers()).schedulers
            if s.name == SCHED
        )
        assert counted >= len(idle_proxy.describes) - 3  # a poll may be on its way


async def _drain(c: Any, handle: str) -> None:
    async for _ in c.watch(handle):
        pass
