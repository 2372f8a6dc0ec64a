"""Async-iterator plumbing shared by the log readers and the daemon: merging sources, and
streaming until a job has ended. Backends run their scoped tasks through these helpers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


async def merge(iters: Sequence[AsyncIterator[T]], bound: int) -> AsyncIterator[T]:
    """Items of several iterators, interleaved as they come. At most `bound` items wait in the
    queue, so a slow consumer makes the producers wait (on their files, never on the jobs)
    instead of buffering. A producer's error is re-raised once the others are cancelled."""
    queue: asyncio.Queue[tuple[T] | None] = asyncio.Queue(bound)

    async def pump(it: AsyncIterator[T]) -> None:
        async for item in it:
            await queue.put((item,))

    async def run_all() -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                for it in iters:
                    tg.create_task(pump(it))
        finally:
            await queue.put(None)

    runner = asyncio.get_running_loop().create_task(run_all())
    try:
        while (boxed := await queue.get()) is not None:
            yield boxed[0]
        try:
            await runner
        except BaseExceptionGroup as group:  # the task group's wrapping, not the error
            first: BaseException = group
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None
    finally:
        runner.cancel()


class _Stop:
    """A queue marker: the job's end, or the items' end."""


_END, _EXHAUSTED = _Stop(), _Stop()


class JobEnd:
    """A job's end as the daemon tells it (`ended()`, which returns once the job is over),
    watched in a task this scope owns: `async with JobEnd(ended) as end:`. A backend asks it
    without blocking (`over`), waits for it with a bound (`wait`), or streams until it
    (`until`); the task is cancelled when the scope closes."""

    def __init__(self, ended: Callable[[], Awaitable[None]]) -> None:
        self._ended = ended
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> JobEnd:
        self._task = asyncio.ensure_future(self._ended())
        return self

    async def __aexit__(self, *exc: object) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _running(self) -> asyncio.Task[None]:
        if self._task is None:
            raise RuntimeError("JobEnd used outside its `async with`")
        return self._task

    def over(self) -> bool:
        """Whether the job is over, without waiting; ended()'s error (the daemon shutting
        down, say) is raised, never taken for the end."""
        task = self._running()
        if not task.done():
            return False
        task.result()
        return True

    async def wait(self, timeout: float | None = None) -> bool:
        """Waits up to `timeout` s (None: for good) for the end; whether the job is over."""
        await asyncio.wait({self._running()}, timeout=timeout)
        return self.over()

    async def until(
        self, items: AsyncIterator[T], bound: int = 16, *, wait_end: bool = True
    ) -> AsyncGenerator[T, None]:
        """Items as they come until the job is over; items that end first are followed by the
        wait for the end (not with `wait_end=False`: then whichever ends first ends this). What
        `items` had not delivered by then is the caller's to read (from the offset reached,
        say): the end cuts the stream. Errors of either side are raised."""
        end = self._running()
        queue: asyncio.Queue[tuple[T] | _Stop | BaseException] = asyncio.Queue(bound)

        async def pump() -> None:
            try:
                async for item in items:
                    await queue.put((item,))
                await queue.put(_EXHAUSTED)
            except Exception as e:  # a lost connection, say: raised to the reader
                await queue.put(e)

        async def watch() -> None:
            await asyncio.wait({end})
            await queue.put(_END)

        tasks = [asyncio.ensure_future(pump()), asyncio.ensure_future(watch())]
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, tuple):
                    yield item[0]
                elif not wait_end:  # _EXHAUSTED, and the end is not waited for
                    return
                # _EXHAUSTED: nothing more can come from items; the end is still to come.
            self.over()  # ended()'s error, if that is how it returned
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def until(
    items: AsyncIterator[T], ended: Callable[[], Awaitable[None]] | None
) -> AsyncIterator[T]:
    """Every item, then (when following: `ended` given) the wait for the job's end: a follow
    ends with the job, not with one source's output. For a source that cannot end by itself
    (`tail -F`), use `JobEnd.until`, which cuts it at the end."""
    async for item in items:
        yield item
    if ended is not None:
        await ended()
