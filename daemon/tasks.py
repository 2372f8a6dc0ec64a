"""The daemon's tasks (status feeds, local replicas' finishers, submissions ...), all owned by
one asyncio.TaskGroup that `serve` opens: none outlives the daemon, none is left unawaited.
Every task the daemon makes is made here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


class Tasks:
    """A TaskGroup that a task's unexpected error does not tear down (it is logged: one job's
    bug must not stop the daemon), and that can cancel what is left at shutdown."""

    def __init__(self, group: asyncio.TaskGroup) -> None:
        self._group = group
        self._live: set[asyncio.Task[Any]] = set()

    def create_task(
        self, coro: Coroutine[Any, Any, Any], *, name: str | None = None
    ) -> asyncio.Task[Any]:
        task = self._group.create_task(_logged(coro, name or "task"), name=name)
        self._live.add(task)
        task.add_done_callback(self._live.discard)
        return task

    def create_awaited(self, coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Future[T]:
        """Runs coro as a task of the group, its outcome (result or error) handed to the future
        returned and nowhere else: not logged, never tearing down the group. For work a caller
        awaits but must not stop by giving up: it awaits `asyncio.shield(future)`, which also
        retrieves an error nobody is left to await. Cancelled with the rest at shutdown."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                future.set_result(await coro)
            except Exception as e:  # the caller's to handle
                future.set_exception(e)
            finally:
                if not future.done():  # cancelled (at shutdown), or the loop is ending
                    future.cancel()

        task = self._group.create_task(run(), name=name)
        self._live.add(task)
        task.add_done_callback(self._live.discard)
        return future

    def cancel_all(self) -> None:
        for task in self._live:
            task.cancel()


async def _logged(coro: Coroutine[Any, Any, Any], name: str) -> None:
    try:
        await coro
    except Exception:
        log.exception("background task %r failed", name)
