"""Async-iterator plumbing shared by the log readers and the daemon."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
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
