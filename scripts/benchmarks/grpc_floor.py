"""The floor of a Watch stream's cost: a bare grpc.aio server with txd's server options whose
Runner/Watch sends one 100-byte message and then holds the stream open, doing nothing else.
What a stream costs it is grpcio's own per-call state (C-core's call, its arena and the HTTP/2
stream, and the asyncio server's tasks and coroutines), which txd's Watch cannot go below.

    python grpc_floor.py SOCKET    (prints "ready" once it serves; runs until SIGTERM)
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
from txd.daemon.server import SERVER_OPTIONS


async def serve(socket_path: str) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    async def watch(request: bytes, context: Any) -> AsyncIterator[bytes]:
        yield b"x" * 100
        await stop.wait()

    server = grpc.aio.server(options=SERVER_OPTIONS)
    handler = grpc.unary_stream_rpc_method_handler(watch)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("txd.v1.Runner", {"Watch": handler}),)
    )
    server.add_insecure_port(f"unix:{socket_path}")
    await server.start()
    print("ready", flush=True)
    await stop.wait()
    await server.stop(0)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
