"""The Watch method end to end inside one process: txd's servicer on a real grpc.aio server (a
Unix socket in the test's folder) over the real status cache, read by a plain gRPC client. Runs
its own event loop (asyncio.run): gRPC's I/O does not mix with the virtual clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
from daemon_fakes import new_record
from txd.daemon import wire
from txd.daemon.cache import StatusCache
from txd.daemon.jobstore import JobRecord, JobStore
from txd.daemon.servicer import About, RunnerServicer
from txd.schedulers.pulse import Pulse
from txd.v1 import AppState, AppStatus
from txd.v1 import runner_pb2 as pb

STREAMS = 20
LIMIT = 20.0  # seconds: only a hang reaches it


class ObservedPulse(Pulse):
    """A Pulse that says (`moved`) whenever a waiter comes or goes."""

    def __init__(self) -> None:
        super().__init__()
        self.moved = asyncio.Event()

    async def wait_past(self, gen: int) -> None:
        self.moved.set()
        try:
            await super().wait_past(gen)
        finally:
            self.moved.set()

    async def until(self, waiting: int) -> None:
        while self.waiting != waiting:
            self.moved.clear()  # no await since the test: nothing moved in between
            await self.moved.wait()


class WatchOnly:
    """The part of JobService that Watch uses."""

    def __init__(self, cache: StatusCache, rec: JobRecord) -> None:
        self.cache, self.rec = cache, rec

    def watch(self, handle: str) -> object:
        assert handle == self.rec.handle
        return self.cache.watch_shown(self.rec)


async def _streams_end_with_the_job_and_leave_with_the_client(
    sock: Path, cache: StatusCache, rec: JobRecord
) -> None:
    job = cache.follow(rec)
    pulse = job.pulse = ObservedPulse()
    cache.record(job, AppStatus(state=AppState.RUNNING, msg="up"))
    server = grpc.aio.server()
    about = About.here(sock, sock.parent)
    wire.add_runner(RunnerServicer(WatchOnly(cache, rec), about), server)  # type: ignore[arg-type]
    server.add_insecure_port(f"unix:{sock}")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"unix:{sock}") as channel:
            watch = channel.unary_stream(
                "/txd.v1.Runner/Watch",
                pb.WatchRequest.SerializeToString,
                pb.WatchResponse.FromString,
            )
            request = pb.WatchRequest(app_handle=rec.handle)
            async with asyncio.timeout(LIMIT):
                # Streams the client leaves: the daemon lets go of them (nothing waits on the
                # job's pulse any more).
                left = [watch(request) for _ in range(STREAMS)]
                for call in left:
                    first = await anext(aiter(call))
                    assert (first.status.state, first.status.msg) == (AppState.RUNNING, "up")
                await pulse.until(STREAMS)
                for call in left:
                    call.cancel()
                await pulse.until(0)
                # Streams that stay: pushed the change, then the end, each the same.
                kept = [watch(request) for _ in range(STREAMS)]
                its = [aiter(call) for call in kept]
                for it in its:
                    assert (await anext(it)).status.state == AppState.RUNNING
                # No need to wait until they are parked: a fire before that is not lost.
                cache.mark_stale([job], "fake", "down")
                stale = [await anext(it) for it in its]
                assert all(s.status.HasField("stale_since") for s in stale)
                cache.record(job, AppStatus(state=AppState.SUCCEEDED))
                for it in its:
                    rest = [s.status.state async for s in it]
                    assert rest == [AppState.SUCCEEDED]
    finally:
        await server.stop(None)


def test_watch_streams_end_with_the_job_and_leave_with_the_client(
    tmp_path: Path, cache: StatusCache, store: JobStore
) -> None:
    asyncio.run(
        _streams_end_with_the_job_and_leave_with_the_client(
            tmp_path / "s.sock", cache, new_record(store)
        )
    )
