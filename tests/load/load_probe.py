"""One Status caller in a process of its own, for `scripts/bench --only load`:

    python load_probe.py SOCKET NICE SEED PAUSE DEADLINE MAX_SECONDS

A user's one client beside the storm, unlike the load's callers (50 to a process, each
process's own event loop busy with the other 49 and their Watch streams). At the scheduling
priority NICE (os.setpriority; below 0 needs root), it lists the daemon's newest jobs (every
tenth call, untimed) and asks the Status of one of them, a random 0..2*PAUSE seconds apart,
until stdin closes (or MAX_SECONDS pass). Prints "ready" once connected and at the end one JSON
line: the Status latencies in seconds, the errors. Each Status call goes where the client's
status() sends it: the daemon's read door where it has one; else its socket, carrying its send
time in metadata (`txd-bench-sent`), for the bench's look inside the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sys
import time

import grpc
from txd import defaults
from txd.client import AsyncClient, NotFoundError, TxdError
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub


async def main(argv: list[str]) -> None:
    socket, nice, seed = argv[0], int(argv[1]), int(argv[2])
    pause, deadline, max_seconds = float(argv[3]), float(argv[4]), float(argv[5])
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    rng = random.Random(seed)
    latencies: list[float] = []
    errors: list[str] = []
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    eof = loop.create_task(stdin.read())
    handles: list[str] = []
    at_door = os.path.exists(defaults.read_door(socket))
    async with (
        AsyncClient(socket, timeout=deadline, own_connection=True) as client,
        grpc.aio.insecure_channel(f"unix:{socket}") as channel,
    ):
        stub = RunnerStub(channel)
        handles = [s.app_handle for s in (await client.list_page(page_size=20)).apps]
        print("ready", flush=True)
        end = time.monotonic() + max_seconds
        k = 0
        while not eof.done() and time.monotonic() < end:
            try:
                if k % 10 == 0 or not handles:
                    page = await client.list_page(page_size=20)
                    handles = [s.app_handle for s in page.apps] or handles
                else:
                    handle = rng.choice(handles)
                    start = time.perf_counter()
                    if at_door:
                        await client.status(handle)
                    else:
                        # The send time, for the bench's look inside the daemon (observe/).
                        sent = (("txd-bench-sent", f"{nice} {time.monotonic()!r}"),)
                        req = pb.StatusRequest(app_handle=handle)
                        await stub.Status(req, timeout=deadline, metadata=sent)
                    latencies.append(time.perf_counter() - start)
            except NotFoundError:
                handles = []
            except grpc.RpcError as e:
                errors.append(f"Status: {e.code()}: {e.details()}")
            except TxdError as e:
                errors.append(f"{type(e).__name__}: {e}")
            k += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(eof), rng.uniform(0, 2 * pause))
    print(json.dumps({"status_latencies": latencies, "errors": errors}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
