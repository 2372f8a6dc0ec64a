"""The job service's submission rules, with a fake scheduler: a handle is never reused and no
record is ever overwritten; a submission that cannot be recorded is cancelled for real; a
submission outlives a caller that gives up, and a retry or a shutdown waits for it."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from txd.daemon.core import JobService
from txd.daemon.tasks import Tasks
from txd.schedulers.api import Described, DryRunInfo, Job, Scheduler, SubmitContext, Submitted
from txd.schedulers.errors import InvalidArgument, NotFound
from txd.schedulers.plugins import Entry
from txd.v1 import AppDef, AppState, AppStatus, Role
from txd.v1.runner_pb2 import RunRequest


@dataclass
class NoOpts:
    pass


class ReusingIds(Scheduler[NoOpts, str]):
    """Hands out the app ids it is told to, as a batch system that lost its id counter does."""

    name = "reuse"
    Opts = NoOpts

    def __init__(self) -> None:
        super().__init__("s", {"poll_interval": 60})
        self.next_ids = ["42", "42", "42"]
        self.deleted: list[Job] = []
        self.gate: asyncio.Event | None = None  # when set, schedule() waits for it
        self.scheduling = asyncio.Event()

    async def _submit_dryrun(self, app: AppDef, opts: NoOpts, ctx: SubmitContext) -> Any:
        return DryRunInfo(app=app, request=app.name, opts=opts)

    async def schedule(self, dryrun: DryRunInfo[str]) -> Submitted:
        self.scheduling.set()
        if self.gate is not None:
            await self.gate.wait()
        return Submitted(self.next_ids.pop(0), {"submitted_as": dryrun.request})

    async def describe_many(self, jobs: Sequence[Job]) -> dict[str, Described]:
        return {j.app_id: AppStatus(state=AppState.RUNNING) for j in jobs}

    async def cancel(self, job: Job) -> None:
        pass

    async def delete(self, job: Job) -> None:
        self.deleted.append(job)


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[tuple[JobService, ReusingIds]]:
    sched = ReusingIds()
    async with asyncio.TaskGroup() as tasks:
        entries = {"reuse": Entry("reuse", lambda: _factory(sched))}
        c = JobService.open(tmp_path, "s", tasks=Tasks(tasks), entries=entries)
        try:
            yield c, sched
        finally:
            await c.shutdown(0.1)
            await c.aclose()


def _factory(sched: ReusingIds) -> Any:
    return lambda *args, **kwargs: sched


def _run(name: str, request_id: str = "") -> RunRequest:
    return RunRequest(
        app=AppDef(name=name, roles=[Role(name="r", entrypoint="x")]),
        scheduler="reuse",
        cwd="/",
        request_id=request_id,
    )


async def test_a_reused_app_id_gets_a_new_handle(core: tuple[JobService, ReusingIds]) -> None:
    c, _ = core
    first, _ = await c.run(_run("first"))
    second, second_id = await c.run(_run("second"))
    third, _ = await c.run(_run("third"))
    assert (first, second, third) == ("reuse://s/42", "reuse://s/42.2", "reuse://s/42.3")
    assert second_id == "42.2"
    # Each record is its own: nothing was overwritten.
    assert c.lookup(first).app.name == "first"
    assert c.lookup(second).native == {"submitted_as": "second"}
    assert c.lookup(third).app.name == "third"


async def test_a_submission_that_cannot_be_recorded_is_cancelled(
    core: tuple[JobService, ReusingIds], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, sched = core

    def broken_insert(rec: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(c.store, "insert", broken_insert)
    with pytest.raises(sqlite3.OperationalError):
        await c.run(_run("lost"))
    assert sched.deleted == [Job("42", {"submitted_as": "lost"})]


async def test_short_ids_name_a_job_by_app_id_or_unique_prefix(
    core: tuple[JobService, ReusingIds],
) -> None:
    """Ids 42, 42.2, 42.3: an app id equal to the text wins over longer ones it begins."""
    c, _ = core
    first, _ = await c.run(_run("first"))
    await c.run(_run("second"))
    third, _ = await c.run(_run("third"))
    assert c.resolve(first) == first
    assert c.lookup("42").app.name == "first"
    assert c.lookup("42.3").handle == third
    with pytest.raises(InvalidArgument) as ambiguous:
        c.lookup("42.")
    assert str(ambiguous.value) == (
        "app_handle: '42.' matches 2 jobs: reuse://s/42.2, reuse://s/42.3; give more of the app "
        "id, or the whole handle"
    )
    with pytest.raises(NotFound, match="no job '43'"):
        c.lookup("43")
    with pytest.raises(InvalidArgument, match="empty"):
        c.lookup("")


async def test_an_ambiguous_short_id_names_ten_jobs_and_counts_the_rest(
    core: tuple[JobService, ReusingIds],
) -> None:
    c, sched = core
    sched.next_ids = [f"7{i:02d}" for i in range(12)]
    for i in range(12):
        await c.run(_run(f"j{i}"))
    with pytest.raises(InvalidArgument) as ambiguous:
        c.lookup("7")
    message = str(ambiguous.value)
    assert "'7' matches 12 jobs: reuse://s/700, reuse://s/701," in message
    assert "reuse://s/709 and 2 more;" in message
    assert "reuse://s/710" not in message
    assert c.lookup("711").app.name == "j11"


async def test_a_submission_outlives_its_caller_and_a_retry_waits_for_it(
    core: tuple[JobService, ReusingIds],
) -> None:
    """A Run whose client gave up (its call cancelled) between spawning and recording still
    ends recorded; a retry with its request id meanwhile waits for that outcome."""
    c, sched = core
    sched.gate = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        first = group.create_task(c.run(_run("once", "rid-1")))
        await sched.scheduling.wait()
        first.cancel()
        retry = group.create_task(c.run(_run("once", "rid-1")))
        done, _ = await asyncio.wait([retry], timeout=60)  # virtual time: costs nothing
        assert not done, "the retry did not wait for the submission under way"
        sched.gate.set()
    assert first.cancelled()
    handle, app_id = retry.result()
    assert (handle, app_id) == ("reuse://s/42", "42")
    assert [r.handle for r in c.store.live()] == [handle]
    assert sched.next_ids == ["42", "42"]  # scheduled once


async def test_shutdown_waits_for_a_submission_under_way(
    core: tuple[JobService, ReusingIds],
) -> None:
    c, sched = core
    sched.gate = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        run = group.create_task(c.run(_run("late")))
        await sched.scheduling.wait()
        shutdown = group.create_task(c.shutdown(grace=600))
        done, _ = await asyncio.wait([shutdown], timeout=60)
        assert not done, "shutdown did not wait for the submission under way"
        sched.gate.set()
    handle, _ = run.result()
    assert c.store.get(handle) is not None


async def test_a_whole_handle_is_parsed_and_a_malformed_one_refused(
    core: tuple[JobService, ReusingIds],
) -> None:
    c, _ = core
    handle, _ = await c.run(_run("named"))
    assert c.resolve(handle) == handle == "reuse://s/42"
    with pytest.raises(InvalidArgument) as malformed:
        c.resolve("re:use://s/42")
    assert str(malformed.value) == (
        "app_handle: 're:use://s/42' is not of the form {scheduler}://{session}/{app_id}"
    )
    with pytest.raises(NotFound):
        c.lookup("reuse://s/43")  # well formed, but no such job
