"""The daemon's background tasks (status feeds, local replicas' finishers ...), all owned by one
asyncio.TaskGroup that `serve` opens: none outlives the daemon, none is left unawaited."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

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

    def cancel_all(self) -> None:
        for task in self._live:
            task.cancel()


async def _logged(coro: Coroutine[Any, Any, Any], name: str) -> None:
    try:
        await coro
    except Exception:
        log.exception("background task %r failed", name)
