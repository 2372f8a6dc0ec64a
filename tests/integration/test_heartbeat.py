"""The serving record's heartbeat (txd.daemon.serving) beats on a thread of its own: a loop's
shared worker pool full of slow blocking work (module imports, job folders on a hung file
system) must not delay it, or another host would take a live daemon's state dir over."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from txd.daemon import serving
from txd_testing import remove_tree, short_tmpdir

PERIOD = 0.05
BOUND = 5.0  # seconds: 100 periods; a beat comes within one or two


async def test_a_full_worker_pool_does_not_hold_the_heartbeat_back() -> None:
    root = short_tmpdir("txdhb-")
    release = threading.Event()
    loop = asyncio.get_running_loop()
    beaten = asyncio.Event()
    try:
        s = serving.acquire(root / "state", Path(root / "txd.sock"), period=PERIOD, host="h1")
        first = serving.read_record(root / "state")
        beat = s.beat

        def observed_beat() -> bool:
            ours = beat()
            loop.call_soon_threadsafe(beaten.set)
            return ours

        s.beat = observed_beat  # type: ignore[method-assign]
        # Every worker of the loop's shared pool blocked until the end of the test.
        blockers = [loop.run_in_executor(None, release.wait) for _ in range(64)]
        beating = asyncio.ensure_future(s.heartbeat())
        try:
            async with asyncio.timeout(BOUND):
                await beaten.wait()
        finally:
            beating.cancel()
            release.set()
            await asyncio.gather(*blockers)
            s.close()
        now = serving.read_record(root / "state")
        assert first is not None and now is not None and now.heartbeat > first.heartbeat
    finally:
        release.set()
        remove_tree(root)
