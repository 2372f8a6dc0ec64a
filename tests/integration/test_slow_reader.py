"""A stalled log reader must not slow the job or make the daemon buffer its output."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
from txd.v1 import AppDef, AppState, Role
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub

MB = 1 << 20
OUTPUT_MB = 200


async def test_stalled_follower_neither_blocks_the_job_nor_grows_the_daemon(
    daemon: Any, workdir: Path
) -> None:
    # A job that writes 200 MB as fast as it can, after a first line the reader waits for.
    code = (
        "import os, sys\n"
        "sys.stdout.write('first\\n'); sys.stdout.flush()\n"
        "block = b'x' * 99 + b'\\n'\n"
        "chunk = block * 10486\n"
        f"for _ in range({OUTPUT_MB}):\n"
        "    os.write(1, chunk)\n"
    )
    app = AppDef(name="flood", roles=[Role(name="w", entrypoint="python3", args=["-c", code])])
    rss_before = daemon.rss_kib()
    async with daemon.client() as c, grpc.aio.insecure_channel(f"unix:{daemon.socket}") as ch:
        handle = await c.run(app, cwd=str(workdir))
        # Open a follow stream, take one message, then stop reading (but keep the call open).
        call = RunnerStub(ch).Logs(pb.LogsRequest(app_handle=handle, follow=True))
        first = await call.read()
        assert first.data.startswith(b"first\n")
        # The job finishes while the reader stalls: Wait returns within a bound that a job
        # throttled to the reader's pace (zero) could never meet.
        status = await c.wait(handle, timeout=60)
        assert status.state == AppState.SUCCEEDED, status
        rss_after = daemon.rss_kib()
        # 200 MB went to disk; the daemon holds at most a few in-flight chunks of it.
        assert (rss_after - rss_before) * 1024 < 40 * MB, (rss_before, rss_after)
        # The stalled reader can still resume and gets every byte, in order.
        total = len(first.data)
        while (msg := await call.read()) is not grpc.aio.EOF:
            total += len(msg.data)
        assert total == len(b"first\n") + OUTPUT_MB * 10486 * 100


async def test_abandoned_follow_streams_are_released(daemon: Any, workdir: Path) -> None:
    """Clients that hang up mid-follow leave nothing running in the daemon."""
    app = AppDef(
        name="ticker",
        roles=[Role(name="t", entrypoint="sh", args=["-c", "echo go; exec sleep 30"])],
    )
    async with daemon.client() as c:
        handle = await c.run(app, cwd=str(workdir))
        for _ in range(20):
            async for chunk in c.logs(handle, follow=True):
                assert chunk.data == b"go\n"
                break  # hang up: the client cancels the call
        # The daemon still answers promptly and the job is unaffected.
        assert (await c.status(handle)).state == AppState.RUNNING
        await c.cancel(handle)
        assert (await asyncio.wait_for(c.wait(handle), 30)).state == AppState.CANCELLED
