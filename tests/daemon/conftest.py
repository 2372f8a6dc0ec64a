"""The daemon's unit tests run on an event loop with a virtual clock: `loop.time()` (which
asyncio.sleep, asyncio.timeout and call_later use) starts at 0 and, whenever nothing is ready to
run, jumps straight to the next timer. Intervals cost no wall time and every count that depends
on them is exact; an `asyncio.timeout` around a wait fires only if the test would otherwise
hang (deadlock) or spin (livelock)."""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from txd.daemon.cache import StatusCache
from txd.daemon.jobstore import JobStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JobStore]:
    s = JobStore(tmp_path / "jobs.db")
    yield s
    s.close()


@pytest.fixture
def cache(store: JobStore) -> StatusCache:
    return StatusCache(store)


class _AutojumpSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)
        if ready or timeout is None or timeout <= 0:
            # timeout None: no timer at all, so nothing but I/O can wake the loop.
            return ready if ready or timeout is not None else super().select(None)
        self._loop.virtual_now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.virtual_now = 0.0
        super().__init__(_AutojumpSelector(self))

    def time(self) -> float:
        return self.virtual_now


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, Any]:
    return {"virtual_time": VirtualTimeLoop}
