"""The job service keeps each job's native request (issue 21) as rendered once schedule()
returned, whether the job is recorded before schedule() (an app id the scheduler chose) or
after; a request that cannot be rendered leaves the job submitted and recorded without one."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from txd.daemon.core import JobService
from txd.daemon.tasks import Tasks
from txd.schedulers.api import Described, DryRunInfo, Job, Scheduler, SubmitContext, Submitted
from txd.schedulers.plugins import Entry
from txd.v1 import AppDef, AppState, AppStatus, Role
from txd.v1.runner_pb2 import RunRequest


@dataclass
class NoOpts:
    pass


class Rendering(Scheduler[NoOpts, list[str]]):
    """Its request is a list of lines; schedule() adds one (as Slurm adds its checks), and an
    app named "broken" cannot be rendered. `early`: it chooses the app id before schedule()."""

    name = "rend"
    Opts = NoOpts

    def __init__(self) -> None:
        super().__init__("s", {"poll_interval": 60})
        self.early = False
        self.ids = iter(range(1, 1000))

    async def _submit_dryrun(self, app: AppDef, opts: NoOpts, ctx: SubmitContext) -> Any:
        lines = [f"request of {app.name}"]

        def render() -> str:
            if app.name == "broken":
                raise ValueError("cannot render")
            return "\n".join(lines) + "\n"

        app_id = f"{app.name}-{next(self.ids)}" if self.early else ""
        return DryRunInfo(app=app, request=lines, opts=opts, render=render, app_id=app_id)

    async def schedule(self, dryrun: DryRunInfo[list[str]]) -> Submitted:
        dryrun.request.append("checked before queueing: ok")
        return Submitted(dryrun.app_id or f"{dryrun.app.name}-{next(self.ids)}", {"n": 1})

    async def describe_many(self, jobs: Sequence[Job]) -> dict[str, Described]:
        return {j.app_id: AppStatus(state=AppState.RUNNING) for j in jobs}

    async def cancel(self, job: Job) -> None:
        pass


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[tuple[JobService, Rendering]]:
    sched = Rendering()
    async with asyncio.TaskGroup() as tasks:
        entries = {"rend": Entry("rend", lambda: lambda *a, **k: sched)}
        c = JobService.open(tmp_path, "s", tasks=Tasks(tasks), entries=entries)
        try:
            yield c, sched
        finally:
            await c.shutdown(0.1)
            await c.aclose()


def _run(name: str) -> RunRequest:
    return RunRequest(
        app=AppDef(name=name, roles=[Role(name="r", entrypoint="x")]), scheduler="rend", cwd="/"
    )


@pytest.mark.parametrize("early", [False, True], ids=["recorded-after", "recorded-before"])
async def test_the_request_is_kept_as_schedule_left_it(
    core: tuple[JobService, Rendering], early: bool
) -> None:
    c, sched = core
    sched.early = early
    handle, _ = await c.run(_run("job"))
    rec = c.lookup(handle)
    assert c.native_request(rec) == "request of job\nchecked before queueing: ok\n"
    stored = c.store.get(handle)
    assert stored is not None and stored.native == {"n": 1}


@pytest.mark.parametrize("early", [False, True], ids=["recorded-after", "recorded-before"])
async def test_a_request_that_cannot_be_rendered_leaves_the_job_without_one(
    core: tuple[JobService, Rendering], early: bool, caplog: pytest.LogCaptureFixture
) -> None:
    c, sched = core
    sched.early = early
    with caplog.at_level(logging.ERROR, logger="txd.daemon.core"):
        handle, _ = await c.run(_run("broken"))
    assert c.native_request(c.lookup(handle)) is None
    assert c.store.get(handle) is not None
    assert "could not render the rend request of broken" in caplog.text
    assert "ValueError: cannot render" in caplog.text


async def test_a_request_the_store_cannot_take_leaves_the_job_recorded(
    core: tuple[JobService, Rendering],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kept after the job is recorded: a store that refuses the request (a full disk) loses
    only the request, never the job, which runs on."""
    c, _ = core

    def full(handle: str, native_request: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(c.store, "put_native_request", full)
    with caplog.at_level(logging.WARNING, logger="txd.daemon.core"):
        handle, _ = await c.run(_run("job"))
    assert c.store.get(handle) is not None
    assert c.native_request(c.lookup(handle)) is None
    assert f"could not keep the native request of {handle}: database or disk is full" in (
        caplog.text
    )
