"""Wait and Watch: pushed by the daemon, ending with the terminal status; final statuses that
are complete (every replica accounted for).

Jobs that must still run at some point block on a gate (txd_testing.Gate) the test opens:
what happens in which order follows from those events, never from how long a job sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txd.client import DeadlineExceededError, InvalidArgumentError, NotFoundError
from txd.v1 import AppDef, AppState, Role
from txd_testing import Gates, PidWatch, pids_with_marker, repeated_statuses, sh_app


async def _states(stream: Any) -> list[int]:
    return [s.state async for s in stream]


@pytest.fixture
def gates(tmp_path: Path) -> Iterator[Gates]:
    with Gates(tmp_path) as g:
        yield g


async def _watch_all(client: Any, handle: str, limit: float = 20) -> list[Any]:
    async with asyncio.timeout(limit):
        return [s async for s in client.watch(handle)]


async def test_watch_pushes_states_and_ends_terminal(client: Any, gates: Gates) -> None:
    """The watcher sees RUNNING, then, with no further call from the test, the end that came
    after it, and the stream ends there."""
    gate = gates.new("end")
    handle = await client.run(sh_app(gate.wait))
    stream = client.watch(handle)
    async with asyncio.timeout(20):
        first = await anext(stream)
        assert first.state == AppState.RUNNING  # the job cannot end before the gate opens
        released = time.time_ns()
        gate.open()
        statuses = [first, *[s async for s in stream]]
    states = [s.state for s in statuses]
    assert states[-1] == AppState.SUCCEEDED
    assert all(s == AppState.RUNNING for s in states[:-1]), states
    assert all(s.app_handle == handle for s in statuses)
    final = statuses[-1]
    assert final.roles[0].replicas[0].state == AppState.SUCCEEDED
    assert final.roles[0].replicas[0].exit_code == 0
    assert final.updated.ToNanoseconds() >= released > final.created.ToNanoseconds()


async def test_watch_sees_cancel(client: Any) -> None:
    marker = f"60.{uuid.uuid4().int % 10**9}"
    handle = await client.run(
        AppDef(name="watchcancel", roles=[Role(name="s", entrypoint="sleep", args=[marker])])
    )
    stream = client.watch(handle)
    seen = []
    async with asyncio.timeout(20):
        first = await anext(stream)
        assert first.state == AppState.RUNNING
        cancel_status = await client.cancel(handle)
        # Cancel answers at once with the status of the moment: the replica may or may not
        # have exited from its SIGTERM yet, and both answers are right.
        assert cancel_status.state in (AppState.RUNNING, AppState.CANCELLED)
        async for status in stream:
            seen.append(status)
    assert seen and seen[-1].state == AppState.CANCELLED
    assert seen[-1].msg
    assert pids_with_marker(marker) == []


async def test_watch_finished_job_yields_one_terminal_status(client: Any) -> None:
    handle = await client.run(sh_app("exit 2"))
    await client.wait(handle, timeout=30)
    statuses = await _watch_all(client, handle, limit=5)
    assert [s.state for s in statuses] == [AppState.FAILED]


async def test_many_watchers_all_get_the_end(client: Any, gates: Gates) -> None:
    gate = gates.new("end")
    handle = await client.run(sh_app(gate.wait))
    streams = [client.watch(handle) for _ in range(5)]
    async with asyncio.timeout(20):
        # Every watcher is in, and sees the job running, before it can end.
        for stream in streams:
            assert (await anext(stream)).state == AppState.RUNNING
        gate.open()
        results = await asyncio.gather(*(_states(stream) for stream in streams))
    for states in results:
        assert states[-1] == AppState.SUCCEEDED
        assert all(s == AppState.RUNNING for s in states[:-1]), states


async def test_wait_on_finished_job_returns_its_final_status(client: Any) -> None:
    handle = await client.run(sh_app("true"))
    final = await client.wait(handle, timeout=30)
    assert final.state == AppState.SUCCEEDED
    assert await client.wait(handle, timeout=5) == final == await client.status(handle)


async def test_wait_on_three_concurrent_jobs(client: Any, gates: Gates) -> None:
    """Three waits in flight; the jobs end in the order the test opens their gates (not the
    order they were started in), and each wait returns when its own job ends, with that end."""
    names = ["w-0", "w-1", "w-2"]
    job_gates = {name: gates.new(name) for name in names}
    handles = {
        name: await client.run(sh_app(f"{job_gates[name].wait}; exit {i}", name=name))
        for i, name in enumerate(names)
    }
    waits = {name: asyncio.ensure_future(client.wait(handles[name], timeout=30)) for name in names}
    try:
        for name in ["w-1", "w-2", "w-0"]:
            released = time.time_ns()
            job_gates[name].open()
            pending = {t for t in waits.values() if not t.done()}
            done, _ = await asyncio.wait(pending, timeout=20, return_when=asyncio.FIRST_COMPLETED)
            # Only the released job can have ended: any other wait back now returned too soon.
            assert done == {waits[name]}, f"released {name}, done: {done}"
            status = waits[name].result()
            assert status.app_handle == handles[name]
            assert status.updated.ToNanoseconds() >= released, "a status from before the end"
    finally:
        for task in waits.values():
            task.cancel()
    states = [waits[n].result().state for n in names]
    assert states == [AppState.SUCCEEDED, AppState.FAILED, AppState.FAILED]


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
    stream = client.watch(handle)
    async with asyncio.timeout(20):
        assert (await anext(stream)).state == AppState.RUNNING  # the watch is in
        with PidWatch(pids) as watch:
            await client.delete(handle)
            assert watch.wait(5) == []
        states = await _states(stream)
        assert states[-1] == AppState.CANCELLED
        assert all(s == AppState.RUNNING for s in states[:-1]), states
        # Nothing tells when the Wait call reaches the daemon: before the delete it returns the
        # end, after it the job is unknown. Either way it must not hang.
        with contextlib.suppress(NotFoundError):
            assert (await waiter).state == AppState.CANCELLED
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


async def test_multi_replica_job_ends_after_its_last_replica(client: Any, gates: Gates) -> None:
    """Replicas 0-2 exit at once, replica 3 only when the test says, and with an error: while
    it runs the job is RUNNING; then it is FAILED, with every replica accounted for."""
    gate = gates.new("last")
    app = AppDef(
        name="replicas",
        roles=[
            Role(
                name="r",
                entrypoint="sh",
                num_replicas=4,
                env={"K": "${replica_id}"},
                args=["-c", f'if [ "$K" = 3 ]; then {gate.wait}; exit 1; fi; exit 0'],
            )
        ],
    )
    handle = await client.run(app)
    three_done = [
        (0, AppState.SUCCEEDED),
        (1, AppState.SUCCEEDED),
        (2, AppState.SUCCEEDED),
        (3, AppState.RUNNING),
    ]
    stream = client.watch(handle)
    async with asyncio.timeout(20):
        # Watch pushes every change; the last one before the gate opens is replicas 0-2 done.
        async for status in stream:
            assert status.state == AppState.RUNNING, status
            if sorted((r.id, r.state) for r in status.roles[0].replicas) == three_done:
                break
        gate.open()
        statuses = [s async for s in stream]
    status = statuses[-1]
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


async def test_watch_sends_only_changes(client: Any, gates: Gates) -> None:
    """Three replicas end one at a time, each when the watcher has seen the one before end:
    every status sent differs from the one before in more than `updated`."""
    gate = [gates.new(f"r{k}") for k in range(3)]
    app = AppDef(
        name="changes",
        roles=[
            Role(
                name="r",
                entrypoint="sh",
                num_replicas=3,
                env={"K": "${replica_id}"},
                args=[
                    "-c",
                    "case $K in "
                    + " ".join(f"{k}) {g.wait};;" for k, g in enumerate(gate))
                    + " esac",
                ],
            )
        ],
    )
    handle = await client.run(app)
    sent, opened = [], 0
    async with asyncio.timeout(20):
        async for status in client.watch(handle):
            sent.append(status)
            ended = sum(r.state == AppState.SUCCEEDED for x in status.roles for r in x.replicas)
            if ended == opened < 3:  # the last gate opened has let its replica end
                gate[opened].open()
                opened += 1
    assert sent[-1].state == AppState.SUCCEEDED
    assert repeated_statuses(sent) == [], sent


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
        await call("local_cwd://no-app-id")
    with pytest.raises(NotFoundError, match="no job 'no such id'"):  # a short id: not known
        await call("no such id")


async def test_a_burst_of_4000_watch_streams_all_get_their_first_status(
    client: Any, gates: Gates
) -> None:
    """gRPC core cancels new calls beyond 3,000 waiting for the server to take them (1,000
    after a while); the daemon raises those limits, so a burst of watchers (100 clients
    opening their watches at once) loses none. 4,000 streams over 10 connections of their
    own, opened at once: every one gets the job's status, none is CANCELLED."""
    import grpc
    from txd.v1 import runner_pb2 as pb
    from txd.v1.runner_pb2_grpc import RunnerStub

    gate = gates.new("end")
    handle = await client.run(sh_app(gate.wait))
    channels = [
        grpc.aio.insecure_channel(
            f"unix:{client.socket_path}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        for _ in range(10)
    ]
    request = pb.WatchRequest(app_handle=handle)

    async def first(channel: Any) -> int:
        stream = RunnerStub(channel).Watch(request)
        try:
            return int((await anext(aiter(stream))).status.state)
        finally:
            stream.cancel()

    try:
        async with asyncio.timeout(120):
            states = await asyncio.gather(
                *(first(channels[k % 10]) for k in range(4000)), return_exceptions=True
            )
    finally:
        for channel in channels:
            await channel.close()
        gate.open()
    errors = [s for s in states if isinstance(s, BaseException)]
    assert not errors, f"{len(errors)} of 4000 streams failed, the first: {errors[0]!r}"
    assert set(states) == {AppState.RUNNING}
