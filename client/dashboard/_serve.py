"""`txctl dashboard`: serves the page on 127.0.0.1 until Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from aiohttp import web
from txd.client.dashboard._feed import Feed
from txd.client.dashboard._guard import Guard
from txd.client.dashboard._server import app

SHUTDOWN = 1.0  # seconds the open streams get to end when the dashboard stops


def _can_open_browser() -> bool:
    """A graphical browser can be started here: not on a login node reached over ssh, where
    `webbrowser` would start a text browser in the terminal."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


async def serve(client: Any, port: int = 0, open_browser: bool = True) -> int:
    feed = Feed()
    guard = Guard()
    runner = web.AppRunner(
        app(client, guard, feed),
        handler_cancellation=True,  # a closed tab ends its streams (and their RPCs) at once
        access_log=None,
        shutdown_timeout=SHUTDOWN,
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        print(f"txctl: error: cannot listen on 127.0.0.1:{port}: {e.strerror}", file=sys.stderr)
        return 2
    guard.port = runner.addresses[0][1]  # the port picked when asked for 0
    url = guard.url
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with asyncio.TaskGroup() as tasks:
            following = tasks.create_task(feed.run(client))
            print(
                "txctl dashboard: serving on 127.0.0.1 (Ctrl-C to stop); open this URL, "
                f"which holds its token:\n    {url}",
                flush=True,
            )
            if open_browser and _can_open_browser():
                import webbrowser

                await asyncio.to_thread(webbrowser.open, url)
            await stop.wait()
            feed.close()
            following.cancel()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
    return 0
