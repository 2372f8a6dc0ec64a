"""A broadcast wake-up for "something changed": log bytes appended, a job's state updated."""

from __future__ import annotations

import asyncio


class Pulse:
    """Wakes every waiter when fired. A waiter passes the generation it last saw, so a fire
    between its last read and its wait is never missed (no lost wake-ups, no polling)."""

    def __init__(self) -> None:
        self.gen = 0
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def waiting(self) -> int:
        """How many callers wait for the next fire."""
        return len(self._waiters)

    def fire(self) -> None:
        self.gen += 1
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait_past(self, gen: int) -> None:
        if self.gen != gen:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)
