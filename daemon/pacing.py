"""A few starts per turn of the event loop: how a burst of submissions shares the loop.

asyncio runs every callback that is ready in one turn, in order. A wave of 250 Run calls that
arrive together makes 250 ready tasks, each doing about a millisecond of work (checks, the
request, the record, the spawn request) before its first real wait, so a Status call that
arrives behind them waits a quarter of a second. A Pacer lets `per_turn` of them start each
turn; the rest wait their turn in order. The work is the same, so the throughput is too; what
changes is that every other call gets a turn between each few submissions.
"""

from __future__ import annotations

import asyncio
import collections


class Pacer:
    def __init__(self, per_turn: int) -> None:
        if per_turn < 1:
            raise ValueError(f"per_turn must be at least 1, not {per_turn}")
        self.per_turn = per_turn
        self._left = per_turn  # starts left in this turn
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._refill_due = False

    async def turn(self) -> None:
        """Returns at once while this turn has starts left (and nobody waits before us), else
        once a later turn gives us one. Cancelling a waiter gives its start to the next."""
        if self._left > 0 and not self._waiting:
            self._take()
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        self._schedule_refill()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # given a start it will not use
                self._left += 1
                self._wake()
            raise

    def _take(self) -> None:
        self._left -= 1
        self._schedule_refill()

    def _schedule_refill(self) -> None:
        if not self._refill_due:
            self._refill_due = True
            asyncio.get_running_loop().call_soon(self._refill)

    def _refill(self) -> None:
        """Runs once per turn while starts are being taken: a new turn's starts, handed to
        the first waiters (who run in the next turn)."""
        self._refill_due = False
        self._left = self.per_turn
        self._wake()

    def _wake(self) -> None:
        while self._left > 0 and self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                self._left -= 1
                waiter.set_result(None)
        if self._waiting or self._left < self.per_turn:
            self._schedule_refill()
