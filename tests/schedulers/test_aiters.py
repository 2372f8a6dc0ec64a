"""The kernel's async-iterator helpers (schedulers/aiters.py): streaming until a job's end, cut
or not, and asking whether it is over, ordered by events (no timing decides a result)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from txd.schedulers.aiters import JobEnd, until

TIMEOUT = 10


class Source:
    """An async iterator fed by the test; `None` ends it, an exception is raised from it."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        self.closed = asyncio.Event()

    async def items(self) -> AsyncIterator[bytes]:
        try:
            while (item := await self.queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.closed.set()


class End:
    """`ended()` that returns (or raises) when the test says so."""

    def __init__(self) -> None:
        self.fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        await self.fut


async def test_until_yields_every_item_then_waits_for_the_end() -> None:
    src, end = Source(), End()
    got: list[bytes] = []

    async def read() -> None:
        async for chunk in until(src.items(), end):
            got.append(chunk)

    reader = asyncio.ensure_future(read())
    for b in (b"a", b"b", None):
        src.queue.put_nowait(b)
    await src.closed.wait()
    await asyncio.sleep(0)
    assert got == [b"a", b"b"] and not reader.done(), "it ended before the job did"
    end.fut.set_result(None)
    async with asyncio.timeout(TIMEOUT):
        await reader
    assert got == [b"a", b"b"]


async def test_until_without_ended_stops_with_the_items() -> None:
    src = Source()
    src.queue.put_nowait(b"x")
    src.queue.put_nowait(None)
    async with asyncio.timeout(TIMEOUT):
        assert [c async for c in until(src.items(), None)] == [b"x"]


async def test_job_end_cuts_a_source_that_never_ends() -> None:
    src, end = Source(), End()
    got: list[bytes] = []
    src.queue.put_nowait(b"1")
    async with asyncio.timeout(TIMEOUT), JobEnd(end) as job:
        async for chunk in job.until(src.items()):
            got.append(chunk)
            end.fut.set_result(None)  # the job ends; the source would go on for good
        assert job.over()
        await src.closed.wait()  # the source was closed, not left pending
    assert got == [b"1"]
    assert end.calls == 1


async def test_job_end_keeps_waiting_when_the_source_ends_first() -> None:
    src, end = Source(), End()
    got: list[bytes] = []
    async with JobEnd(end) as job:

        async def read() -> None:
            async for chunk in job.until(src.items()):
                got.append(chunk)

        reader = asyncio.ensure_future(read())
        src.queue.put_nowait(b"a")
        src.queue.put_nowait(None)
        await src.closed.wait()
        for _ in range(5):
            await asyncio.sleep(0)
        assert got == [b"a"] and not reader.done() and not job.over()
        end.fut.set_result(None)
        async with asyncio.timeout(TIMEOUT):
            await reader
        assert job.over()


async def test_job_end_raises_the_source_error_and_the_end_error() -> None:
    src, end = Source(), End()
    async with JobEnd(end) as job:
        src.queue.put_nowait(ConnectionError("link lost"))
        with pytest.raises(ConnectionError, match="link lost"):
            async with asyncio.timeout(TIMEOUT):
                async for _ in job.until(src.items()):
                    pass
    src2, end2 = Source(), End()
    async with JobEnd(end2) as job2:
        end2.fut.set_exception(RuntimeError("shutting down"))
        with pytest.raises(RuntimeError, match="shutting down"):
            async with asyncio.timeout(TIMEOUT):
                async for _ in job2.until(src2.items()):
                    pass
        with pytest.raises(RuntimeError, match="shutting down"):
            job2.over()


async def test_job_end_wait_is_bounded_and_the_scope_cancels_ended() -> None:
    end = End()
    async with JobEnd(end) as job:
        assert await job.wait(0.01) is False
        assert not job.over()
    assert end.calls == 1
    with pytest.raises(RuntimeError, match="outside its `async with`"):
        job.over()


async def test_job_end_without_wait_end_stops_with_whichever_ends_first() -> None:
    src, end = Source(), End()
    async with JobEnd(end) as job:
        src.queue.put_nowait(b"a")
        src.queue.put_nowait(None)
        async with asyncio.timeout(TIMEOUT):  # the source ends first: so does the iteration
            assert [c async for c in job.until(src.items(), wait_end=False)] == [b"a"]
        assert not job.over()
        src2 = Source()
        src2.queue.put_nowait(b"b")
        got: list[bytes] = []
        async with asyncio.timeout(TIMEOUT):  # the job ends first: the source is cut
            async for chunk in job.until(src2.items(), wait_end=False):
                got.append(chunk)
                end.fut.set_result(None)
        assert got == [b"b"] and job.over()
        await src2.closed.wait()
