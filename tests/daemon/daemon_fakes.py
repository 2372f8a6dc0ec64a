"""Fake schedulers and job records for the daemon's unit tests (a module of its own: pyproject's
pytest `pythonpath` puts this folder on sys.path).

A fake's `describe_many` records the ids it was asked about and then answers as the test says:
either at once from `auto`, or, with `auto` None, with the next answer the test passes to
`answer()` (so the test decides when each query ends)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from txd.daemon.jobstore import JobRecord, JobStore
from txd.schedulers.api import Change, Described, DryRunInfo, Job, Scheduler, Subscribed
from txd.v1 import AppDef, AppState, AppStatus, Role

TIMEOUT = 60.0  # virtual seconds: only a hang or a spin reaches it

Answer = Callable[[Sequence[Job]], dict[str, Described]] | BaseException


def states(state: AppState.ValueType) -> Callable[[Sequence[Job]], dict[str, Described]]:
    """An answer giving every job asked about this state."""
    return lambda jobs: {j.app_id: AppStatus(state=state) for j in jobs}


@dataclass
class NoOpts:
    pass


class FakeScheduler(Scheduler[NoOpts, None]):
    name = "fake"
    Opts = NoOpts

    def __init__(self, session_name: str = "s", settings: Any = None, **_: Any) -> None:
        super().__init__(session_name, settings)
        self.calls: list[list[str]] = []
        self.auto: Answer | None = states(AppState.RUNNING)
        self._answers: asyncio.Queue[Answer] = asyncio.Queue()
        self._started: asyncio.Queue[list[str]] = asyncio.Queue()

    async def _submit_dryrun(self, app: AppDef, opts: NoOpts, ctx: Any) -> DryRunInfo[None]:
        raise NotImplementedError

    async def schedule(self, dryrun: DryRunInfo[None]) -> Any:
        raise NotImplementedError

    async def describe_many(self, jobs: Sequence[Job]) -> dict[str, Described]:
        ids = [j.app_id for j in jobs]
        self.calls.append(ids)
        self._started.put_nowait(ids)
        answer = self.auto if self.auto is not None else await self._answers.get()
        if isinstance(answer, BaseException):
            raise answer
        return answer(jobs)

    async def cancel(self, job: Job) -> None:
        pass

    # -- for the test ----------------------------------------------------------------------

    def answer(self, answer: Answer) -> None:
        self._answers.put_nowait(answer)

    async def next_call(self) -> list[str]:
        """The ids of the next describe_many call (it may have started already)."""
        async with asyncio.timeout(TIMEOUT):
            return sorted(await self._started.get())

    def pending_calls(self) -> int:
        return self._started.qsize()


class FakePusher(FakeScheduler):
    """Pushes what the test puts in `items` (a Change, SUBSCRIBED, an exception to raise, or
    None to end the stream); counts the streams opened and closed. A stream's close waits for
    `closing` while the test holds it (a backend slow to close its watches)."""

    name = "fakepush"

    def __init__(self, session_name: str = "s", settings: Any = None, **kw: Any) -> None:
        super().__init__(session_name, settings, **kw)
        self.items: asyncio.Queue[Change | Subscribed | BaseException | None] = asyncio.Queue()
        self.opened = 0
        self.closed = 0
        self.closing: asyncio.Event | None = None
        self._opens: asyncio.Queue[int] = asyncio.Queue()

    async def changes(self) -> AsyncGenerator[Change | Subscribed, None]:
        self.opened += 1
        self._opens.put_nowait(self.opened)
        try:
            while (item := await self.items.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if self.closing is not None:
                await self.closing.wait()
            self.closed += 1

    async def next_open(self) -> int:
        """The number of the next stream opened (it may have been opened already)."""
        async with asyncio.timeout(TIMEOUT):
            return await self._opens.get()


_ids = itertools.count()


def new_record(store: JobStore, scheduler: str = "fake") -> JobRecord:
    """A SUBMITTED job of `scheduler`, inserted into the store."""
    n = next(_ids)
    rec = JobRecord(
        handle=f"{scheduler}://s/app-{n}",
        scheduler=scheduler,
        app_id=f"app-{n}",
        created=time.time(),
        app=AppDef(name="app", roles=[Role(name="r", entrypoint="x")]),
        status=AppStatus(state=AppState.SUBMITTED),
        cfg={},
        native={},
    )
    store.insert(rec)
    return rec


class Tasks:
    """A task group for feeds: keeps every task it created."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[Any]] = []

    def create_task(self, coro: Any, *, name: str | None = None) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.append(task)
        return task

    async def aclose(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
