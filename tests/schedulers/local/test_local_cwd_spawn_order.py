"""local_cwd's status while an app's replicas are still being started: one that has already
exited does not make the app look ended (found under load: a two-replica `echo` job was pushed
SUCCEEDED with one replica, 8 runs in 30, while the second was still being spawned)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from txd.schedulers.api import SUBSCRIBED, Change, Job, SubmitContext, is_terminal
from txd.schedulers.local.local_cwd import LocalScheduler
from txd.v1 import AppDef, AppState, AppStatus, Role
from txd_testing import Gates, sh_app


async def test_an_app_is_not_ended_while_a_replica_is_still_to_start(tmp_path: Path) -> None:
    sched = LocalScheduler("t", state_dir=tmp_path / "state")
    first_exited = asyncio.Event()
    started: list[int] = []
    real_start = sched._start

    async def start_in_order(replica: object) -> None:
        """Replica 1 starts only once replica 0 has exited: the order a slow spawn gives."""
        if started:
            await first_exited.wait()
        started.append(1)
        await real_start(replica)  # type: ignore[arg-type]

    sched._start = start_in_order  # type: ignore[method-assign]
    async with asyncio.TaskGroup() as group:
        await sched.start(group)
        try:
            ctx = SubmitContext(cwd=str(tmp_path), env=dict(os.environ))
            info = await sched.submit_dryrun(sh_app("true", replicas=2), {}, ctx)
            changes = sched.changes()
            assert await anext(changes) is SUBSCRIBED
            scheduling = asyncio.ensure_future(sched.schedule(info))
            seen = []
            async with asyncio.timeout(10):
                async for change in changes:
                    if not isinstance(change, Change):
                        continue
                    seen.append(change.status)
                    states = {r.id: r.state for role in change.status.roles for r in role.replicas}
                    if states.get(0) == AppState.SUCCEEDED and len(started) == 1:
                        first_exited.set()
                        assert not is_terminal(change.status.state), change.status
                        assert states.get(1) == AppState.PENDING, change.status
                    if is_terminal(change.status.state):
                        break
            await scheduling
            await changes.aclose()
        finally:
            await sched.shutdown(2.0)
            await sched.aclose()
    assert first_exited.is_set(), seen
    assert seen[-1].state == AppState.SUCCEEDED, seen[-1]
    assert [len(role.replicas) for role in seen[-1].roles] == [2], seen[-1]


async def test_a_change_taken_after_a_describe_is_never_older_than_it(tmp_path: Path) -> None:
    """A replica that exits while a later one is being started is news while the app still has
    a PENDING replica; taken by the daemon only after it described the app (RUNNING) at the end
    of the submit, it must not take the app back to PENDING (found in CI: one of 12 jobs
    submitted at once stored SUBMITTED, RUNNING, PENDING, SUCCEEDED)."""
    sched = LocalScheduler("t", state_dir=tmp_path / "state")
    first: list[Any] = []
    real_start = sched._start

    async def start_after_the_first_ended(replica: Any) -> None:
        if first:
            await first[0].ended.wait()  # exited, its output on disk: the news is queued
        first.append(replica)
        await real_start(replica)

    sched._start = start_after_the_first_ended  # type: ignore[method-assign]
    with Gates(tmp_path) as gates:
        gate = gates.new("second")
        app = AppDef(
            name="t",
            roles=[
                Role(name="quick", entrypoint="true"),
                Role(name="held", entrypoint="sh", args=["-c", gate.wait]),
            ],
        )
        async with asyncio.TaskGroup() as group:
            await sched.start(group)
            try:
                ctx = SubmitContext(cwd=str(tmp_path), env=dict(os.environ))
                info = await sched.submit_dryrun(app, {}, ctx)
                changes = sched.changes()
                assert await anext(changes) is SUBSCRIBED  # subscribed, not read meanwhile
                submitted = await sched.schedule(info)
                job = Job(submitted.app_id, submitted.native)
                described = (await sched.describe_many([job]))[submitted.app_id]
                assert isinstance(described, AppStatus)
                assert described.state == AppState.RUNNING, described
                gate.open()
                states = [described.state]
                async with asyncio.timeout(10):
                    async for change in changes:
                        assert isinstance(change, Change) and isinstance(change.status, AppStatus)
                        states.append(change.status.state)
                        if is_terminal(change.status.state):
                            break
                await changes.aclose()
            finally:
                await sched.shutdown(2.0)
                await sched.aclose()
    assert states == sorted(states) and states[-1] == AppState.SUCCEEDED, states
