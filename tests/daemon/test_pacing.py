"""Submissions share the event loop: a burst of Runs starts a few per turn of the loop
(daemon.pacing), so that every other call is answered between them."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from txd.daemon.core import SUBMITS_PER_TURN, JobService
from txd.daemon.pacing import Pacer
from txd.daemon.tasks import Tasks
from txd.schedulers.api import Described, DryRunInfo, Job, Scheduler, SubmitContext, Submitted
from txd.schedulers.plugins import Entry
from txd.v1 import AppDef, AppState, AppStatus, Role
from txd.v1.runner_pb2 import RunRequest


class Turns:
    """Counts the turns of the event loop: a callback that schedules itself for the next."""

    def __init__(self) -> None:
        self.now = 0
        self._running = True
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.now += 1
        if self._running:
            asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._running = False


def _per_turn(turns: Sequence[int]) -> list[int]:
    return [len(list(g)) for _, g in itertools.groupby(sorted(turns))]


async def test_a_pacer_lets_a_few_through_per_turn_in_order() -> None:
    pacer, turns = Pacer(3), Turns()
    passed: list[tuple[int, int]] = []

    async def one(i: int) -> None:
        await pacer.turn()
        passed.append((i, turns.now))

    await asyncio.gather(*(one(i) for i in range(10)))
    turns.stop()
    assert [i for i, _ in passed] == list(range(10))  # first come, first through
    assert _per_turn([t for _, t in passed]) == [3, 3, 3, 1]


async def test_a_cancelled_waiter_gives_its_place_to_the_next() -> None:
    pacer, order = Pacer(1), []

    async def one(name: str) -> None:
        await pacer.turn()
        order.append(name)

    a, b, c = (asyncio.ensure_future(one(name)) for name in "abc")
    await asyncio.sleep(0)  # a went through; b and c wait for the next turns
    b.cancel()
    async with asyncio.timeout(1):
        await asyncio.gather(a, c)
    assert order == ["a", "c"]
    assert b.cancelled()


def test_a_pacer_needs_a_start_per_turn() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Pacer(0)


@dataclass
class NoOpts:
    pass


class Recording(Scheduler[NoOpts, str]):
    """Records in which turn of the loop each schedule() began."""

    name = "rec"
    Opts = NoOpts

    def __init__(self, now: Callable[[], int]) -> None:
        super().__init__("s", {"poll_interval": 60})
        self.now = now
        self.turns: list[int] = []
        self.ids = itertools.count()

    async def _submit_dryrun(self, app: AppDef, opts: NoOpts, ctx: SubmitContext) -> Any:
        return DryRunInfo(app=app, request=app.name, opts=opts)

    async def schedule(self, dryrun: DryRunInfo[str]) -> Submitted:
        self.turns.append(self.now())
        return Submitted(str(next(self.ids)), {})

    async def describe_many(self, jobs: Sequence[Job]) -> dict[str, Described]:
        return {j.app_id: AppStatus(state=AppState.RUNNING) for j in jobs}

    async def cancel(self, job: Job) -> None:
        pass


async def test_a_burst_of_runs_starts_a_few_per_turn(tmp_path: Path) -> None:
    """50 Runs at once: at most SUBMITS_PER_TURN reach their scheduler in any one turn (all 50
    in one turn before), and all go through."""
    turns = Turns()
    sched = Recording(lambda: turns.now)
    async with asyncio.TaskGroup() as group:
        entries = {"rec": Entry("rec", lambda: lambda *a, **k: sched)}
        c = JobService.open(tmp_path, "s", tasks=Tasks(group), entries=entries)
        try:
            app = AppDef(name="a", roles=[Role(name="r", entrypoint="x")])
            req = RunRequest(app=app, scheduler="rec", cwd="/")
            await c.schedulers.get("rec")  # built before the burst
            handles = await asyncio.gather(*(c.run(req) for _ in range(50)))
        finally:
            turns.stop()
            await c.shutdown(0.1)
            await c.aclose()
    assert len({h for h, _ in handles}) == 50
    assert max(_per_turn(sched.turns)) <= SUBMITS_PER_TURN
