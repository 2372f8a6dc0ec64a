"""Wait and Watch: pushed by the daemon, ending with the terminal status; final statuses that
are complete (every replica accounted for)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from txd.client import DeadlineExceededError, InvalidArgumentError, NotFoundError
from txd.v1 import AppDef, AppState, Role
from txd_testing import PidWatch, pids_with_marker, sh_app

TERMINAL = (AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED)


async def _watch_all(client: Any, handle: str, limit: float = 20) -> list[Any]:
    async with asyncio.timeout(limit):
        return [s async for s in client.watch(handle)]


async def test_watch_pushes_states_and_ends_terminal(client: Any) -> None:
    handle = await client.run(sh_app("sleep 0.5"))
    statuses = await _watch_all(client, handle)
    states = [s.state for s in statuses]
    assert states[0] == AppState.RUNNING
    assert states[-1] == AppState.SUCCEEDED
    assert all(s not in TERMINAL for s in states[:-1]), states
    assert all(s.app_handle == handle for s in statuses)
    final = statuses[-1]
    assert final.roles[0].replicas[0].state == AppState.SUCCEEDED
    assert final.roles[0].replicas[0].exit_code == 0
    assert final.updated.ToNanoseconds() >= final.created.ToNanoseconds()


async def test_watch_sees_cancel_at_once(client: Any) -> None:
    marker = f"60.{uuid.uuid4().int % 10**9}"
    handle = await client.run(
        AppDef(name="watchcancel", roles=[Role(name="s", entrypoint="sleep", args=[marker])])
    )
    stream = client.watch(handle)
    seen = []
    async with asyncio.timeout(20):
        first = await anext(stream)
        assert first.state == AppState.RUNNING
        cancelled_at = time.monotonic()
        cancel_status = await client.cancel(handle)
        assert cancel_status.state in (AppState.RUNNING, AppState.CANCELLED)
        async for status in stream:
            seen.append(status)
    elapsed = time.monotonic() - cancelled_at
    assert seen and seen[-1].state == AppState.CANCELLED
    assert seen[-1].msg
    assert elapsed < 5, f"CANCELLED pushed {elapsed:.1f}s after the cancel"
    assert pids_with_marker(marker) == []


async def test_watch_finished_job_yields_one_terminal_status(client: Any) -> None:
    handle = await client.run(sh_app("exit 2"))
    await client.wait(handle, timeout=30)
    statuses = await _watch_all(client, handle, limit=5)
    assert [s.state for s in statuses] == [AppState.FAILED]


async def test_many_watchers_all_get_the_end(client: Any) -> None:
    handle = await client.run(sh_app("sleep 0.3"))
    results = await asyncio.gather(*(_watch_all(client, handle) for _ in range(5)))
    for statuses in results:
        assert statuses[-1].state == AppState.SUCCEEDED


async def test_wait_on_finished_job_returns_immediately(client: Any) -> None:
    handle = await client.run(sh_app("true"))
    assert (await client.wait(handle, timeout=30)).state == AppState.SUCCEEDED
    start = time.monotonic()
    status = await client.wait(handle, timeout=5)
    assert status.state == AppState.SUCCEEDED
    assert time.monotonic() - start < 0.5


async def test_wait_on_three_concurrent_jobs(client: Any) -> None:
    durations = {"w-fast": 0.1, "w-mid": 0.5, "w-slow": 0.9}
    handles = {
        name: await client.run(sh_app(f"sleep {d}; exit {i}", name=name))
        for i, (name, d) in enumerate(durations.items())
    }
    order: list[str] = []

    async def wait_one(name: str) -> Any:
        status = await client.wait(handles[name], timeout=30)
        order.append(name)
        return status

    results = await asyncio.gather(*(wait_one(n) for n in durations))
    assert [r.state for r in results] == [AppState.SUCCEEDED, AppState.FAILED, AppState.FAILED]
    assert [r.app_handle for r in results] == list(handles.values())
    assert order == list(durations), "waits did not return as each job ended"


async def test_wait_returns_promptly_after_the_job_ends(client: Any) -> None:
    """The end is pushed: Wait returns within a fraction of a second of the job's exit."""
    handle = await client.run(sh_app("sleep 0.3"))
    status = await client.wait(handle, timeout=30)
    received = time.time_ns()
    lag = (received - status.updated.ToNanoseconds()) / 1e9
    assert status.state == AppState.SUCCEEDED
    assert lag < 0.25, f"Wait returned {lag:.3f}s after the job's end was recorded"


async def test_wait_deadline(client: Any) -> None:
    marker = f"60.{uuid.uuid4().int % 10**9}"
    handle = await client.run(
        AppDef(name="waitdl", roles=[Role(name="s", entrypoint="sleep", args=[marker])])
    )
    try:
        with pytest.raises(DeadlineExceededError):
            await client.wait(handle, timeout=0.3)
        assert (await client.status(handle)).state == AppState.RUNNING
    finally:
        await client.cancel(handle)
    assert (await client.wait(handle, timeout=20)).state == AppState.CANCELLED


async def test_delete_wakes_waiters(client: Any) -> None:
    marker = f"60.{uuid.uuid4().int % 10**9}"
    handle = await client.run(
        AppDef(name="waitdel", roles=[Role(name="s", entrypoint="sleep", args=[marker])])
    )
    pids = pids_with_marker(marker)
    waiter = asyncio.ensure_future(client.wait(handle, timeout=20))
    watcher = asyncio.ensure_future(_watch_all(client, handle))
    await client.status(handle)  # a round trip: the wait and watch calls are in
    with PidWatch(pids) as watch:
        await client.delete(handle)
        assert watch.wait(5) == []
    for task in (waiter, watcher):
        try:
            result = await asyncio.wait_for(task, 10)
        except NotFoundError:
            continue
        final = result if task is waiter else result[-1]
        assert final.state == AppState.CANCELLED
    with pytest.raises(NotFoundError):
        await client.status(handle)


async def test_cancel_is_idempotent_and_leaves_terminal_jobs(client: Any) -> None:
    done = await client.run(sh_app("true"))
    await client.wait(done, timeout=30)
    assert (await client.cancel(done)).state == AppState.SUCCEEDED
    assert (await client.status(done)).state == AppState.SUCCEEDED
    live = await client.run(sh_app("sleep 60"))
    await client.cancel(live)
    await client.cancel(live)
    final = await client.wait(live, timeout=20)
    assert final.state == AppState.CANCELLED, final
    assert "cancel" in final.msg, final
    assert final.roles[0].replicas[0].exit_code == 128 + 15, final  # SIGTERM


# -- the final status is complete ----------------------------------------------------------------


@pytest.mark.parametrize("attempt", range(3))
async def test_multi_replica_job_ends_after_its_last_replica(client: Any, attempt: int) -> None:
    """Replica 0 exits at once, replica 3 later and with an error: the job is FAILED, and only
    once every replica has ended."""
    app = AppDef(
        name="replicas",
        roles=[
            Role(
                name="r",
                entrypoint="sh",
                num_replicas=4,
                env={"K": "${replica_id}"},
                args=["-c", 'if [ "$K" = 3 ]; then sleep 0.3; exit 1; fi; exit 0'],
            )
        ],
    )
    handle = await client.run(app)
    status = await client.wait(handle, timeout=30)
    replicas = sorted(status.roles[0].replicas, key=lambda r: r.id)
    assert [r.id for r in replicas] == [0, 1, 2, 3]
    assert [(r.state, r.exit_code) for r in replicas] == [
        (AppState.SUCCEEDED, 0),
        (AppState.SUCCEEDED, 0),
        (AppState.SUCCEEDED, 0),
        (AppState.FAILED, 1),
    ], status
    assert status.state == AppState.FAILED, status
    assert "r/3 exited with 1" in status.msg


async def test_multi_role_status(client: Any) -> None:
    app = AppDef(
        name="multirole",
        roles=[
            Role(name="ok", entrypoint="true", num_replicas=2),
            Role(name="bad", entrypoint="sh", args=["-c", "exit 5"]),
        ],
    )
    handle = await client.run(app)
    status = await client.wait(handle, timeout=30)
    assert status.state == AppState.FAILED
    by_role = {
        r.role: sorted((x.id, x.state, x.exit_code) for x in r.replicas) for r in status.roles
    }
    assert by_role == {
        "ok": [(0, AppState.SUCCEEDED, 0), (1, AppState.SUCCEEDED, 0)],
        "bad": [(0, AppState.FAILED, 5)],
    }


# -- unknown and malformed handles -------------------------------------------------------------


@pytest.mark.parametrize("verb", ["status", "wait", "describe", "cancel", "delete", "watch"])
async def test_unknown_and_malformed_handles(client: Any, verb: str) -> None:
    async def call(handle: str) -> Any:
        if verb == "watch":
            return [s async for s in client.watch(handle)]
        return await getattr(client, verb)(handle)

    with pytest.raises(NotFoundError, match="nosuchjob"):
        await call("local_cwd://txd/nosuchjob-bcdfg")
    with pytest.raises(InvalidArgumentError, match="app_handle"):
        await call("no handle here")
