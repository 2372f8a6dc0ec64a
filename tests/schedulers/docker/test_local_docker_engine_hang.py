"""A Docker engine that hangs under a running txd: SIGSTOP to dockerd, so that calls hang
rather than fail (the kernel still accepts connections on its socket; nothing answers).

The engine is one of the test's own (never the session's: other tests use it), resumed with
SIGCONT before it is stopped, whatever happened. A running container job must go stale with a
reason naming the engine, the feed must keep trying (each try bounded), a local_cwd job run
meanwhile through the same daemon is unaffected, and once the engine is resumed the job is
fresh again by itself and its real end is seen once, never UNKNOWN.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from docker_testing import BUSYBOX, Engine, make_docker_daemon
from txd.v1 import AppDef, AppState, Role
from txd_testing import (
    Daemon,
    is_fresh_running,
    is_stale,
    own_daemon,
    repeated_statuses,
    sh_app,
    watching,
)

ENGINE_TIMEOUT = 2  # the daemon's local_docker.engine_timeout here
# Stale within one ping interval plus one ping's timeout; Watched.next's 30 s bounds the wait.
STALE_WITHIN = 2 * ENGINE_TIMEOUT


@pytest.fixture
def own_engine(docker_engine: Engine) -> Iterator[Engine]:
    """A dockerd of this test's own, on its own socket, data root and exec root. Asks for the
    session's engine only for its preparation (images' rootfs, the skip without root)."""
    engine = Engine.start_new()
    try:
        yield engine
    finally:
        os.kill(engine.pid, signal.SIGCONT)  # a stopped dockerd would not stop
        engine.close()


@pytest.fixture
def hang_daemon(own_engine: Engine, request: pytest.FixtureRequest) -> Iterator[Daemon]:
    d = make_docker_daemon(
        own_engine,
        [
            "--set",
            f"local_docker.engine_timeout={ENGINE_TIMEOUT}",
            "--set",
            "local_docker.poll_interval=0.5",
        ],
    )
    with own_daemon(d, request) as started:
        yield started


def _proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


async def _engine_calls(c: Any, kind: str) -> int:
    infos = (await c.schedulers()).schedulers
    return int(next(i for i in infos if i.name == "local_docker").backend_calls.get(kind, 0))


async def _calls_reach(c: Any, kind: str, n: int) -> bool:
    """Whether the daemon's count of `kind` engine calls reaches n within the time of 4 tries
    (the counter is not pushed: it is read every 0.2 s, a bounded number of times)."""
    for _ in range(int(4 * (ENGINE_TIMEOUT + 0.5) / 0.2)):
        if await _engine_calls(c, kind) >= n:
            return True
        await asyncio.sleep(0.2)
    return False


async def test_a_hung_engine_leaves_the_job_running_stale_until_it_answers(
    own_engine: Engine, hang_daemon: Daemon
) -> None:
    script = "until [ -e /tmp/go ]; do sleep 0.1; done"  # ends when the test says so
    app = AppDef(
        name="hung",
        roles=[Role(name="main", image=BUSYBOX, entrypoint="sh", args=["-c", script])],
    )
    async with hang_daemon.client() as c:
        handle = await c.run(app, scheduler="local_docker", cfg={"network": "none"})
        async with watching(c, handle) as w:
            running = await w.next("RUNNING", is_fresh_running)
            container = running.roles[0].replicas[0].hostname
            os.kill(own_engine.pid, signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                stale = await w.next("stale", is_stale)
                noticed = time.monotonic() - t0
                assert stale.state == AppState.RUNNING, stale
                assert stale.stale_msg.startswith("local_docker has not answered since "), stale
                engine_said = f"the Docker engine at {own_engine.host} did not answer "
                assert engine_said in stale.stale_msg, stale.stale_msg
                assert stale.stale_msg.endswith(f" within {ENGINE_TIMEOUT} s"), stale.stale_msg
                text = hang_daemon.txctl("status", handle, check=0).stdout
                assert "STALE:    local_docker has not answered since " in text, text

                # The feed keeps trying to subscribe again, each try given up after the
                # timeout (a subscription's headers never come from a stopped engine).
                tries = await _engine_calls(c, "events")
                assert await _calls_reach(c, "events", tries + 2), "a subscription hung"

                # Meanwhile a local_cwd job runs, is watched to its end and its logs read.
                latencies = []
                local = await c.run(sh_app("echo hi", name="beside"))
                async for _ in c.watch(local):
                    t1 = time.monotonic()
                    now = await c.status(local)
                    latencies.append(time.monotonic() - t1)
                assert now.state == AppState.SUCCEEDED, now
                assert b"".join([ch.data async for ch in c.logs(local)]) == b"hi\n"
                assert _proc_state(own_engine.pid) == "T", "dockerd was resumed too early"
            finally:
                os.kill(own_engine.pid, signal.SIGCONT)
            print(
                f"stale after {noticed:.1f} s (at most ~{STALE_WITHIN} s expected); local_cwd "
                f"status latency during the hang: max {max(latencies) * 1000:.1f} ms"
            )
            await w.next("fresh after the hang", is_fresh_running)

            # The job's real end, seen once.
            own_engine.docker("exec", container, "touch", "/tmp/go")
            final = await w.next("the end", lambda s: s.state != AppState.RUNNING)
        sent = w.sent
    assert final.state == AppState.SUCCEEDED and not is_stale(final), final
    assert [s for s in sent if s.state == AppState.UNKNOWN] == []
    assert [s.state for s in sent if s.state == AppState.SUCCEEDED] == [AppState.SUCCEEDED]
    assert repeated_statuses(sent) == [], sent
