"""The contract suite's helpers, usable on their own in a backend's tests: the task group a
scheduler under test gets (`Tasks`), submitting a `Script` (`submit`), and bounded waits and reads
(`wait_for`, `wait_terminal`, `read_all`...) that check what every answer must satisfy.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest
from txd.schedulers.api import Described, Job, NoAnswer, Scheduler, is_terminal
from txd.schedulers.errors import Unsupported
from txd.schedulers.fold import fold, replica_states
from txd.schedulers.testing.harness import Harness, Script
from txd.v1 import AppDef, AppState, AppStatus


class Tasks:
    """The task group a scheduler gets in the suite: tasks are tracked, cancelled at the end of
    the test, and an error any of them died with fails the test (the daemon would only log it,
    but it is a bug)."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[Any]] = []

    def create_task(
        self, coro: Coroutine[Any, Any, Any], *, name: str | None = None
    ) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.append(task)
        return task

    async def aclose(self) -> list[BaseException]:
        for task in self.tasks:
            task.cancel()
        results = await asyncio.gather(*self.tasks, return_exceptions=True)
        return [
            r
            for r in results
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
        ]


# -- helpers, usable on their own ---------------------------------------------------------------


@dataclass
class Submission:
    app: AppDef
    job: Job  # as the daemon hands it back: native through JSON
    role: str = field(init=False)

    def __post_init__(self) -> None:
        self.role = self.app.roles[0].name


async def submit(sched: Scheduler[Any, Any], harness: Harness, script: Script) -> Submission:
    """Runs `script` on the backend (skips the test if the harness cannot)."""
    app = harness.app(script)
    if app is None:
        pytest.skip(f"the harness cannot run {script}")
    info = await sched.submit_dryrun(app, harness.cfg, harness.context())
    assert isinstance(info.text, str)
    submitted = await sched.schedule(info)
    assert submitted.app_id, "schedule() returned no app id"
    SUBMITTED.setdefault(id(sched), []).append(Job(submitted.app_id, submitted.native))
    # The daemon persists `native` as JSON and hands that back: a job must work from it.
    native = json.loads(json.dumps(submitted.native))
    return Submission(app, Job(submitted.app_id, native))


# Jobs each scheduler under test was given, by id(sched): cancelled when its test ends, since a
# cluster backend's jobs outlive the scheduler's shutdown.
SUBMITTED: dict[int, list[Job]] = {}


def unknown_job() -> Job:
    """A job no backend knows: a made-up app id, no native facts."""
    return Job(f"contract-unknown-{uuid.uuid4().hex[:10]}", {})


async def describe(sched: Scheduler[Any, Any], job: Job) -> Described:
    """One describe_many for one job. Checks what every answer must satisfy: the job's key is
    present (absent counts as NoAnswer, which a reachable backend has no reason to give), and a
    status with replicas has the state they fold to (txd.schedulers.fold.fold)."""
    found = await sched.describe_many([job])
    assert job.app_id in found, f"describe_many left {job.app_id} out: {found}"
    value = found[job.app_id]
    assert not isinstance(value, NoAnswer), f"{job.app_id}: {value}"
    if isinstance(value, AppStatus):
        states = replica_states(value.roles)
        if states:
            assert value.state == fold(states), (
                f"{AppState.Name(value.state)} is not what the replicas fold to: "
                f"{[AppState.Name(s) for s in states]}"
            )
    return value


def state_name(value: Described) -> str:
    return AppState.Name(value.state) if isinstance(value, AppStatus) else repr(value)


async def wait_for(
    sched: Scheduler[Any, Any],
    harness: Harness,
    job: Job,
    done: Callable[[Described], bool],
    what: str,
) -> Described:
    """Describes the job until `done(value)`, at most `harness.timeout` seconds. Once a
    terminal status was seen, every later answer must be the same terminal state or None."""
    seen: list[str] = []
    terminal: AppStatus | None = None
    try:
        async with asyncio.timeout(harness.timeout):
            while True:
                value = await describe(sched, job)
                if not seen or seen[-1] != state_name(value):
                    seen.append(state_name(value))
                if terminal is not None:
                    assert value is None or (
                        isinstance(value, AppStatus) and value.state == terminal.state
                    ), f"{job.app_id} left its terminal state: {seen}"
                elif isinstance(value, AppStatus) and is_terminal(value.state):
                    terminal = value
                if done(value):
                    return value
                await harness.advance(sched)
    except TimeoutError:
        shown = await harness.explain(sched, job)
        pytest.fail(f"{job.app_id}: not {what} within {harness.timeout} s (states: {seen}){shown}")


async def wait_terminal(sched: Scheduler[Any, Any], harness: Harness, job: Job) -> AppStatus:
    value = await wait_for(
        sched,
        harness,
        job,
        lambda v: isinstance(v, AppStatus) and is_terminal(v.state),
        "terminal",
    )
    assert isinstance(value, AppStatus)
    return value


async def wait_live(sched: Scheduler[Any, Any], harness: Harness, job: Job) -> AppStatus:
    value = await wait_for(
        sched, harness, job, lambda v: isinstance(v, AppStatus), "described (live)"
    )
    assert isinstance(value, AppStatus)
    assert not is_terminal(value.state), (
        f"the harness's blocking job ended before it was released: {state_name(value)}"
    )
    return value


def ended_by(sched: Scheduler[Any, Any], harness: Harness, job: Job) -> Callable[[], Any]:
    """An `ended` for log_iter, as the daemon gives it: returns once the job is terminal."""

    async def ended() -> None:
        await wait_terminal(sched, harness, job)

    return ended


async def read_all(it: AsyncIterator[bytes], timeout: float) -> bytes:
    """Every chunk of a log iterator, joined; each chunk must be non-empty bytes."""
    out = bytearray()
    async with asyncio.timeout(timeout):
        async for chunk in it:
            assert isinstance(chunk, bytes), type(chunk)
            out += chunk
    return bytes(out)


async def read_until(it: AsyncIterator[bytes], want: bytes, timeout: float) -> bytes:
    """Chunks until at least `want`'s length arrived; returns what arrived."""
    out = bytearray()
    try:
        async with asyncio.timeout(timeout):
            while len(out) < len(want):
                out += await anext(it)
    except StopAsyncIteration:
        pytest.fail(f"the log ended after {bytes(out)!r}, before {want!r}")
    except TimeoutError:
        pytest.fail(f"only {bytes(out)!r} of {want!r} arrived within {timeout} s")
    return bytes(out)


async def tail_of(chunks: AsyncIterator[bytes], n: int) -> AsyncIterator[bytes]:
    """What the daemon makes of a log iterator read with `LogQuery(tail=n)` (Scheduler.log_iter,
    rules 6 and 7): the last n lines of what it sends up to its first empty chunk (or its end),
    then every chunk after."""
    held = bytearray()
    async for chunk in chunks:
        if not chunk:
            break
        held += chunk
    if last := last_lines(bytes(held), n):
        yield last
    async for chunk in chunks:
        if chunk:
            yield chunk


def last_lines(data: bytes, n: int) -> bytes:
    """The last n lines of data; a last line without a newline counts as one."""
    starts = [0] + [m.end() for m in re.finditer(b"\n", data)]  # where lines begin
    if starts[-1] == len(data):  # data ends with a newline (or is empty): no line begins there
        starts.pop()
    return data[starts[-n] :] if 0 < n <= len(starts) else (data if n else b"")


async def expect_unsupported(call: Callable[[], Any]) -> None:
    """`call()` raises Unsupported, at once or from its iterator."""
    with pytest.raises(Unsupported):
        result = call()
        if hasattr(result, "__anext__"):
            async for _ in result:
                pass
        elif asyncio.iscoroutine(result):
            await result
