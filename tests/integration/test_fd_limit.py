"""A daemon at its file-descriptor limit (RLIMIT_NOFILE lowered to 256 on the running daemon):
new jobs and new log follows are refused with RESOURCE_EXHAUSTED naming the limit, the daemon
never crashes, the jobs and follows it has keep working, and new work succeeds once the load is
gone."""

from __future__ import annotations

import asyncio
import resource
import socket
from typing import Any

from txd.client import ResourceExhaustedError
from txd.v1 import AppState
from txd_testing import Gates, PidWatch, pids_with_marker, read_logs_by_replica, sh_app, unique

LIMIT = 256
REPLICAS = 4
FIRST_JOBS = 8  # followed from the start
MAX_JOBS = 100  # the limit is reached long before
MAX_FOLLOWS = 50
TIMEOUT = 90.0


def _script(gate: str, marker: str) -> str:
    return f"echo hi ${{replica_id}} {marker}; {gate}; echo bye"


def _expected(marker: str) -> dict[str, bytes]:
    return {f"r/{k}": f"hi {k} {marker}\nbye\n".encode() for k in range(REPLICAS)}


class Follow:
    """A log follow of one job; `open` is set once every replica has sent bytes (the daemon
    holds all its files open then)."""

    def __init__(self, c: Any, handle: str) -> None:
        self.got: dict[str, bytes] = {}
        self.open = asyncio.Event()
        self.task = asyncio.create_task(self._run(c, handle))

    async def _run(self, c: Any, handle: str) -> None:
        async for chunk in c.logs(handle, follow=True):
            key = f"{chunk.role}/{chunk.replica}"
            self.got[key] = self.got.get(key, b"") + chunk.data
            if len(self.got) == REPLICAS:
                self.open.set()

    async def opened(self) -> bool:
        """True once open; False if it failed first (its error stays in the task)."""
        opened = asyncio.create_task(self.open.wait())
        await asyncio.wait({self.task, opened}, return_when=asyncio.FIRST_COMPLETED)
        opened.cancel()
        return self.open.is_set()


async def test_fd_limit_refuses_new_work_and_keeps_the_old(daemon: Any) -> None:
    resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (LIMIT, LIMIT))
    marker = unique("fdlimit")
    with Gates(daemon.root) as gates:
        gate = gates.new("go")
        app = sh_app(_script(gate.wait, marker), name="fd", replicas=REPLICAS)
        async with asyncio.timeout(TIMEOUT), daemon.client(timeout=20) as c:
            handles = [await c.run(app, cwd="/") for _ in range(FIRST_JOBS)]
            follows = [Follow(c, h) for h in handles]
            for f in follows:
                assert await f.opened(), f.task.exception()
            # More jobs until the daemon runs out of descriptors.
            refused = None
            for _ in range(MAX_JOBS):
                try:
                    handles.append(await c.run(app, cwd="/"))
                except ResourceExhaustedError as e:
                    refused = e
                    break
            assert refused is not None, f"{len(handles)} jobs ran under a limit of {LIMIT}"
            assert "RLIMIT_NOFILE" in str(refused), refused
            assert "Too many open files" in str(refused), refused
            # New follows until one is refused the same way.
            extra = []
            for _ in range(MAX_FOLLOWS):
                f = Follow(c, handles[-1])
                if not await f.opened():
                    error = f.task.exception()
                    assert isinstance(error, ResourceExhaustedError), error
                    assert "Too many open files" in str(error), error
                    break
                extra.append(f)
            else:
                raise AssertionError(f"{MAX_FOLLOWS} more follows under a limit of {LIMIT}")
            # The daemon still answers for every job it has.
            for h in handles:
                assert (await c.status(h)).state == AppState.RUNNING

            # The load goes away: every job ends well, every follow open got every byte.
            for _ in range(len(handles) * REPLICAS):
                gate.open()
            for h in handles:
                assert (await c.wait(h)).state == AppState.SUCCEEDED
            for f in [*follows, *extra]:
                await f.task
                assert f.got == _expected(marker)
            # New work succeeds again.
            h = await c.run(sh_app(f"echo again {marker}", name="fd"), cwd="/")
            assert (await c.wait(h)).state == AppState.SUCCEEDED
            assert await read_logs_by_replica(c, h) == {"r/0": f"again {marker}\n".encode()}
    assert daemon.running()
    with PidWatch(pids_with_marker(marker)) as left:
        assert left.wait(10) == [], "processes left behind"
    print(f"fd limit {LIMIT}: {len(handles)} jobs of {REPLICAS} replicas, +{len(extra)} follows")


def test_connections_past_the_limit_wait_and_are_served_once_fds_return(daemon: Any) -> None:
    """gRPC core stops accepting at EMFILE and tries again once a second (its log says "File
    descriptor limit reached. Retrying."): a client past the limit is not refused but waits, so
    it sees its own deadline (exit 5), and is served once descriptors are free again. No RPC
    exists yet to answer RESOURCE_EXHAUSTED on."""
    resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (LIMIT, LIMIT))
    idle = []
    try:
        for _ in range(LIMIT + 50):  # more than the daemon can accept: the rest wait in backlog
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(daemon.socket))
            idle.append(s)
        late = daemon.txctl("--timeout", "2", "list", "--json")
        assert late.returncode == 5, late.stderr  # DEADLINE_EXCEEDED: never accepted
        assert "no answer within --timeout 2 s" in late.stderr
        assert daemon.running()
    finally:
        for s in idle:
            s.close()
    served = daemon.txctl("--timeout", "10", "list", "--json", check=0)
    assert served.stdout.strip() == "[]"
    assert "File descriptor limit reached" in daemon.log()
