"""Waiting for a job in txctl: progress on stderr, driven by the Watch stream, and Ctrl-C.

On a terminal, one live line (state, elapsed time, replicas per state per role) is redrawn in
place on every status the daemon pushes, and its clock ticks once a second; elsewhere a plain
line is printed whenever that summary changes. Nothing here polls the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, TextIO

from txd.client._format import state_name
from txd.v1 import AppStatus

CLEAR_LINE = "\r\x1b[K"  # to column 0, then erase to the end of the line
TICK = 1.0  # seconds between redraws of the elapsed time


def replicas_text(status: AppStatus) -> str:
    """`trainer: 2 RUNNING, 1 PENDING; ps: 1 RUNNING`: replicas by state, per role."""
    roles = []
    for role in status.roles:
        counts = Counter(state_name(r.state) for r in role.replicas)
        if counts:
            by_state = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            roles.append(f"{role.role}: {by_state}")
    return "; ".join(roles)


def elapsed(seconds: float) -> str:
    """0:07, 12:30, 2:05:09."""
    m, s = divmod(max(int(seconds), 0), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """What `txctl wait` and `run --wait` show on stderr while the job runs."""

    def __init__(self, out: TextIO, live: bool) -> None:
        self.out = out
        self.live = live
        self._status: AppStatus | None = None
        self._since = time.time()
        self._printed: tuple[int, str] | None = None

    @classmethod
    def for_stderr(cls) -> Progress:
        return cls(sys.stderr, sys.stderr.isatty())

    def update(self, status: AppStatus) -> None:
        if self._status is None and status.created.seconds:
            self._since = status.created.ToNanoseconds() / 1e9  # the job's age, not the wait's
        self._status = status
        if self.live:
            self.tick()
        elif (now := (status.state, replicas_text(status))) != self._printed:
            self._printed = now
            self._write(self._line(status) + "\n")

    def tick(self) -> None:
        """Redraws the live line (the clock moved), cut to the terminal's width: a line that
        wrapped could not be redrawn in place."""
        if self.live and self._status is not None:
            self._write(CLEAR_LINE + self._line(self._status)[: _columns(self.out) - 1])

    def end(self) -> None:
        """Erases the live line: the final status goes to stdout."""
        if self.live and self._status is not None:
            self._write(CLEAR_LINE)

    def _line(self, status: AppStatus) -> str:
        """`RUNNING 0:12  trainer: 2 RUNNING, 1 PENDING`."""
        line = f"{state_name(status.state)} {elapsed(time.time() - self._since)}"
        replicas = replicas_text(status)
        return f"{line}  {replicas}" if replicas else line

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError):  # a closed stderr must not end the wait
            self.out.write(text)
            self.out.flush()


def _columns(out: TextIO) -> int:
    """The terminal's width; 80 when it does not say (a new pty says 0)."""
    try:
        return os.get_terminal_size(out.fileno()).columns or 80
    except (OSError, ValueError):
        return 80


async def follow(watch: AsyncIterator[AppStatus], progress: Progress) -> AppStatus:
    """The job's final status (terminal, or UNKNOWN for good), showing progress meanwhile.
    The clock ticks only while the Watch stream is open: a timer of the loop (no task),
    cancelled when it ends, however it ends."""
    loop = asyncio.get_running_loop()
    timer: asyncio.TimerHandle | None = None

    def tick() -> None:
        nonlocal timer
        progress.tick()
        timer = loop.call_later(TICK, tick)  # bounded by the watch: cancelled below

    if progress.live:
        timer = loop.call_later(TICK, tick)
    last: AppStatus | None = None
    try:
        async for status in watch:
            last = status
            progress.update(status)
    finally:
        if timer is not None:
            timer.cancel()
        progress.end()
    if last is None:
        from txd.client._errors import UnavailableError

        raise UnavailableError("the daemon ended the watch before it sent a status")
    # The daemon ends a watch only when nothing about the job can change any more (a daemon
    # that stops ends it with an error instead): a job the backend forgot ends UNKNOWN.
    return last


@contextlib.asynccontextmanager
async def interruptible(client: Any, handle: str, cancel: bool = False) -> AsyncIterator[None]:
    """Ctrl-C while waiting on `handle`: says on stderr that the job goes on and how to stop
    it, or (cancel) cancels it and says so; the interrupt then ends txctl (exit 130).

    asyncio.run turns SIGINT into a cancellation of the main task, caught here."""
    try:
        yield
    except asyncio.CancelledError:
        if cancel:
            try:
                await client.cancel(handle)
                print(f"txctl: interrupted: cancelled {handle}", file=sys.stderr)
            except Exception as e:  # one line, whatever went wrong; exit 130 still
                print(f"txctl: interrupted: could not cancel {handle}: {e}", file=sys.stderr)
        else:
            print(
                f"txctl: interrupted; {handle} keeps running (stop it with "
                f"`txctl cancel {handle}`)",
                file=sys.stderr,
            )
        raise
