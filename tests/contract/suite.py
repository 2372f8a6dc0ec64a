"""The scheduler contract suite: the rules of txd.schedulers.api, checked against any backend.

Modelled on containerd's `SnapshotterSuite(t, name, factory)`: a backend supplies a *harness*
(how to build a started scheduler, how to turn a `Script` into an AppDef it can run, how to let a
blocking job go on) and subclasses `SchedulerContract`; pytest then runs every check on it. A
check that needs what the backend does not claim (`Capabilities`) checks instead that it raises
Unsupported; one that needs what the harness cannot do (a failing job, say) is skipped, and says
why.

The module needs nothing but txd, pytest and pytest-asyncio: a third-party scheduler's tests
import it (from a txd checkout: put its tests/contract folder on pytest's `pythonpath`, or copy
this one file into the plugin's tests) and write, for example:

    import pytest
    from suite import Harness, SchedulerContract, Script, TaskGroupLike
    from txd.schedulers.api import Job, Scheduler
    from txd.v1 import AppDef, Role

    class MyHarness(Harness):
        def __init__(self, tmp_path):
            self.tmp = tmp_path

        async def scheduler(self, tasks: TaskGroupLike) -> Scheduler:
            sched = my_plugin.create_scheduler("contract", state_dir=self.tmp / "state")
            await sched.start(tasks)
            return sched

        def app(self, script: Script) -> AppDef | None:
            if script.first.stdout or script.then.stdout:
                return None  # this backend keeps no logs
            args = ["block"] if script.block else ["exit", str(script.exit_code)]
            return AppDef(name="contract", roles=[Role(name="r", entrypoint="x", args=args)])

        async def release(self, sched: Scheduler, app: AppDef, job: Job) -> None:
            my_plugin.finish(job.app_id)

    class TestMyScheduler(SchedulerContract):
        @pytest.fixture
        def harness(self, tmp_path):
            return MyHarness(tmp_path)

Every scheduler a test builds is fresh, started with a task group of the suite's own, and shut
down and closed after the test; a background task that died with an error fails the test. No
check sleeps to decide its result: waits are loops over `describe_many` (paced by
`Harness.advance`) bounded by `Harness.timeout`.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import datetime as dt
import itertools
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from txd.schedulers.api import (
    SUBSCRIBED,
    Change,
    Described,
    Job,
    LogQuery,
    NoAnswer,
    Scheduler,
    SubmitContext,
    TaskGroupLike,
    is_terminal,
    num_replicas,
)
from txd.schedulers.errors import BackendUnavailable, InvalidArgument, NotFound, Unsupported
from txd.schedulers.fold import fold, replica_states
from txd.v1 import AppDef, AppState, AppStatus, CfgValue, Role, Stream

__all__ = [
    "CommandScripts",
    "Harness",
    "Output",
    "SchedulerContract",
    "Script",
    "Submission",
    "TaskGroupLike",
    "Tasks",
    "describe",
    "read_all",
    "submit",
    "wait_for",
    "wait_terminal",
]

# -- what a backend supplies --------------------------------------------------------------------


@dataclass(frozen=True)
class Output:
    """Bytes a job writes to its stdout and to its stderr, exactly."""

    stdout: bytes = b""
    stderr: bytes = b""


@dataclass(frozen=True)
class Script:
    """What a test job does, in the harness's terms: write `first`; with `block`, wait until the
    harness releases it (or it is cancelled); write `then`; exit with `exit_code` (0: the job
    SUCCEEDS, else it FAILS). One role, one replica unless `replicas` says otherwise."""

    first: Output = Output()
    block: bool = False
    then: Output = Output()
    exit_code: int = 0
    replicas: int = 1

    @property
    def writes(self) -> bool:
        return any((self.first.stdout, self.first.stderr, self.then.stdout, self.then.stderr))


class Harness(abc.ABC):
    """How the suite drives one backend. Override the abstract methods; the attributes have
    defaults that suit a backend on this host."""

    # Bounds every wait of a check (seconds).
    timeout: float = 30.0
    # Between two describe_many calls while waiting for a status to change.
    poll_pause: float = 0.02
    # The precision of the times a backend stamps on log lines (log_since_until): lines written
    # more than this apart are told apart.
    clock_resolution: float = 0.002
    # Run options every submission passes.
    cfg: Mapping[str, CfgValue] = {}
    # Given to shutdown() at the end of every test.
    grace: float = 2.0
    # The backend keeps logs as text, so invalid UTF-8 comes back as U+FFFD (Docker's
    # json-file log driver behind the kubelet does): the byte checks expect that instead.
    utf8_logs: bool = False

    def logged(self, data: bytes) -> bytes:
        """`data` as the backend's logs give it back."""
        return data.decode("utf-8", "replace").encode() if self.utf8_logs else data

    @abc.abstractmethod
    async def scheduler(self, tasks: TaskGroupLike) -> Scheduler[Any, Any]:
        """A new scheduler instance, started with `tasks` (`await sched.start(tasks)`)."""

    @abc.abstractmethod
    def app(self, script: Script) -> AppDef | None:
        """An AppDef the backend runs as `script` says, or None if it cannot (the check that
        needs it is then skipped). A backend without logs may ignore the outputs; with
        `capabilities.logs` it must write them byte for byte."""

    async def release(self, sched: Scheduler[Any, Any], app: AppDef, job: Job) -> None:  # noqa: B027
        """Lets a job of a blocking Script go on (to `then` and its exit). The default does
        nothing: for backends whose jobs end by themselves as time (`advance`) passes."""

    def context(self) -> SubmitContext:
        """The SubmitContext of every submission."""
        import os

        return SubmitContext(cwd=os.getcwd(), env=dict(os.environ))

    async def explain(self, sched: Scheduler[Any, Any], job: Job) -> str:
        """What the backend shows of `job`, added to a failed wait's message ("": nothing)."""
        return ""

    async def advance(self, sched: Scheduler[Any, Any]) -> None:
        """Lets time pass between two status queries of a wait (recorded backends push their
        next recorded answer here)."""
        await asyncio.sleep(self.poll_pause)

    def backend_down(
        self, sched: Scheduler[Any, Any]
    ) -> contextlib.AbstractContextManager[None] | None:
        """A context manager inside which the backend cannot be reached (a login node down, a
        recorded host that refuses every command), or None when the harness cannot do that."""
        return None

    async def close(self) -> None:  # noqa: B027
        """Cleans up after a test (the scheduler is shut down and closed already)."""


class CommandScripts:
    """Scripts as commands, for backends that run a command where it can read the files the
    test writes (this host, a shared filesystem): the job is a Python interpreter running
    JOB_PROGRAM, which copies files of exact bytes to its stdout and stderr and, to block,
    waits for a release file. `python` is the interpreter's path where the job runs."""

    JOB_PROGRAM = """\
import os, sys, time
spec = sys.argv[1]

def write(name, fd):
    with open(os.path.join(spec, name), "rb") as f:
        view = memoryview(f.read())
    while view:
        view = view[os.write(fd, view):]

write("first.out", 1)
write("first.err", 2)
if os.path.exists(os.path.join(spec, "block")):
    release = os.path.join(spec, "release")
    while not os.path.exists(release):
        time.sleep(0.01)
write("then.out", 1)
write("then.err", 2)
sys.exit(int(open(os.path.join(spec, "exit")).read()))
"""

    def __init__(self, root: Path, python: str = sys.executable, role: str = "main") -> None:
        self.root = root
        self.python = python
        self.role = role
        self._ids = itertools.count()

    def app(self, script: Script) -> AppDef:
        spec = self.root / f"job{next(self._ids)}"
        spec.mkdir(parents=True)
        for name, data in (
            ("first.out", script.first.stdout),
            ("first.err", script.first.stderr),
            ("then.out", script.then.stdout),
            ("then.err", script.then.stderr),
            ("exit", str(script.exit_code).encode()),
        ):
            (spec / name).write_bytes(data)
        if script.block:
            (spec / "block").touch()
        role = Role(
            name=self.role,
            entrypoint=self.python,
            args=["-c", self.JOB_PROGRAM, str(spec)],
            num_replicas=script.replicas,
        )
        return AppDef(name="contract", roles=[role])

    def release(self, app: AppDef) -> None:
        (Path(app.roles[0].args[2]) / "release").touch()


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
    _SUBMITTED.setdefault(id(sched), []).append(Job(submitted.app_id, submitted.native))
    # The daemon persists `native` as JSON and hands that back: a job must work from it.
    native = json.loads(json.dumps(submitted.native))
    return Submission(app, Job(submitted.app_id, native))


# Jobs each scheduler under test was given, by id(sched): cancelled when its test ends, since a
# cluster backend's jobs outlive the scheduler's shutdown.
_SUBMITTED: dict[int, list[Job]] = {}


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


def _state(value: Described) -> str:
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
                if not seen or seen[-1] != _state(value):
                    seen.append(_state(value))
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
        f"the harness's blocking job ended before it was released: {_state(value)}"
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


async def expect_unsupported(call: Callable[[], Any]) -> None:
    """`call()` raises Unsupported, at once or from its iterator."""
    with pytest.raises(Unsupported):
        result = call()
        if hasattr(result, "__anext__"):
            async for _ in result:
                pass
        elif asyncio.iscoroutine(result):
            await result


# Output that a text pipeline would damage: Latin-1 and invalid UTF-8, carriage returns
# (progress bars), a long line, a last line without a newline.
RAW = (
    b"caf\xe9 \xff\xfe\x00 not utf-8\n"
    b"progress 10%\rprogress 50%\rprogress 100%\r\n"
    b"crlf line\r\n" + b"x" * 200_000 + b"\n" + b"tail without newline"
)
LINES = b"alpha 1\nbeta 2\n\xe9alpha 3 \xff\nbeta 4\nalpha 5"

# -- the checks -------------------------------------------------------------------------------


class SchedulerContract:
    """Subclass it (as `Test<Backend>`) and provide the `harness` fixture."""

    pytestmark = pytest.mark.asyncio

    @pytest.fixture
    def harness(self) -> Harness:
        raise NotImplementedError("a SchedulerContract subclass provides a `harness` fixture")

    @pytest_asyncio.fixture
    async def sched(self, harness: Harness) -> AsyncIterator[Scheduler[Any, Any]]:
        tasks = Tasks()
        sched = await harness.scheduler(tasks)
        try:
            yield sched
        finally:
            try:
                async with asyncio.timeout(harness.grace * 3 + 10):
                    for job in _SUBMITTED.pop(id(sched), []):
                        with contextlib.suppress(Exception):  # a test may have taken it down
                            await sched.cancel(job)
                    await sched.shutdown(harness.grace)
            finally:  # however the above ended: no connection may outlive the test
                try:
                    await sched.aclose()
                finally:
                    errors = await tasks.aclose()
                    await harness.close()
            assert not errors, f"background tasks of {sched.name} failed: {errors!r}"

    # -- capabilities ----------------------------------------------------------------------

    async def test_push_status_is_what_changes_does(self, sched: Scheduler[Any, Any]) -> None:
        assert sched.capabilities.push_status == sched.pushes()

    async def test_workspace_is_claimed_or_ignored_saying_so(
        self, sched: Scheduler[Any, Any], harness: Harness, tmp_path: Path
    ) -> None:
        """A scheduler claims `workspace` exactly when it overrides prepare_workspace; one that
        does not leaves the app as it is and says it ignored the workspace."""
        overridden = type(sched).prepare_workspace is not Scheduler.prepare_workspace
        assert sched.capabilities.workspace == overridden
        if overridden:
            return
        app = harness.app(Script())
        if app is None:
            pytest.skip("the harness cannot run the default script")
        ctx = harness.context()
        ctx.workspace = str(tmp_path)
        info = await sched.submit_dryrun(app, harness.cfg, ctx)
        assert info.workspace == f"workspace ignored: {sched.name} has no workspace support"
        plain = await sched.submit_dryrun(app, harness.cfg, harness.context())
        assert plain.workspace == ""
        assert info.app == plain.app

    async def test_changes_subscribes_first_or_is_unsupported(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        if not sched.pushes():
            await expect_unsupported(sched.changes)
            return
        async with contextlib.aclosing(sched.changes()) as changes:
            async with asyncio.timeout(harness.timeout):
                assert await anext(changes) is SUBSCRIBED

    async def test_pushed_changes_report_the_end(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        """A push scheduler reports a job's terminal status through changes()."""
        if not sched.pushes():
            pytest.skip("the scheduler is polled")
        async with contextlib.aclosing(sched.changes()) as changes:
            async with asyncio.timeout(harness.timeout):
                assert await anext(changes) is SUBSCRIBED
                sub = await submit(sched, harness, Script(block=True))
                await harness.release(sched, sub.app, sub.job)
                async for item in changes:
                    if item is SUBSCRIBED:  # subscribed again: allowed (a resync)
                        continue
                    assert isinstance(item, Change), item
                    if item.app_id != sub.job.app_id:
                        continue
                    if item.status is not None and is_terminal(item.status.state):
                        assert item.status.state == AppState.SUCCEEDED, item.status
                        break

    async def test_list(self, sched: Scheduler[Any, Any], harness: Harness) -> None:
        if not sched.capabilities.list:
            await expect_unsupported(sched.list)
            return
        sub = await submit(sched, harness, Script(block=True))
        await wait_live(sched, harness, sub.job)
        listed = await sched.list()
        assert all(isinstance(s, AppStatus) and s.app_id for s in listed), listed
        assert sub.job.app_id in {s.app_id for s in listed}

    async def test_unclaimed_cancel_is_unsupported(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        if sched.capabilities.cancel:
            pytest.skip("cancel is claimed (checked by the cancel tests)")
        sub = await submit(sched, harness, Script(block=True))
        await expect_unsupported(lambda: sched.cancel(sub.job))

    async def test_delete(self, sched: Scheduler[Any, Any], harness: Harness) -> None:
        """A delete ends a live job (it is no longer described live), and is idempotent. A
        scheduler that does not claim `delete` either refuses (Unsupported) or only cancels,
        as the default does."""
        sub = await submit(sched, harness, Script(block=True))
        await wait_live(sched, harness, sub.job)
        try:
            await sched.delete(sub.job)
        except Unsupported:
            assert not sched.capabilities.delete, "delete is claimed but raised Unsupported"
            return
        if not sched.capabilities.delete and not sched.capabilities.cancel:
            pytest.fail("delete worked though neither delete nor cancel is claimed")
        await wait_for(
            sched,
            harness,
            sub.job,
            lambda v: v is None or (isinstance(v, AppStatus) and is_terminal(v.state)),
            "gone or terminal after delete",
        )
        await sched.delete(sub.job)
        await sched.delete(unknown_job())

    async def test_unclaimed_log_capabilities_are_unsupported(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        caps = sched.capabilities
        if caps.logs and caps.log_follow and caps.log_streams and caps.log_since_until:
            pytest.skip("every log capability is claimed")
        sub = await submit(sched, harness, Script())
        await wait_terminal(sched, harness, sub.job)
        ended = ended_by(sched, harness, sub.job)
        now = dt.datetime.now(dt.UTC)
        queries = {
            "logs": LogQuery(),
            "log_follow": LogQuery(follow=True),
            "log_streams": LogQuery(stream=Stream.STDERR),
            "log_since_until": LogQuery(since=now - dt.timedelta(hours=1)),
        }
        for cap, query in queries.items():
            if not caps.logs or not getattr(caps, cap):
                await expect_unsupported(
                    lambda q=query: sched.log_iter(sub.job, sub.role, 0, q, ended)
                )

    # -- cancel ----------------------------------------------------------------------------

    async def test_cancel_twice(self, sched: Scheduler[Any, Any], harness: Harness) -> None:
        if not sched.capabilities.cancel:
            pytest.skip("cancel is not claimed")
        sub = await submit(sched, harness, Script(block=True))
        await wait_live(sched, harness, sub.job)
        await sched.cancel(sub.job)
        await sched.cancel(sub.job)
        final = await wait_terminal(sched, harness, sub.job)
        assert final.state == AppState.CANCELLED, final
        await self._stays(sched, harness, sub.job, AppState.CANCELLED)
        await sched.cancel(sub.job)  # and once more, ended

    async def test_cancel_of_a_finished_job_changes_nothing(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        if not sched.capabilities.cancel:
            pytest.skip("cancel is not claimed")
        sub = await submit(sched, harness, Script())
        final = await wait_terminal(sched, harness, sub.job)
        assert final.state == AppState.SUCCEEDED, final
        await sched.cancel(sub.job)
        await sched.cancel(sub.job)
        await self._stays(sched, harness, sub.job, AppState.SUCCEEDED)

    async def test_cancel_of_an_unknown_job_is_a_noop(self, sched: Scheduler[Any, Any]) -> None:
        if not sched.capabilities.cancel:
            pytest.skip("cancel is not claimed")
        await sched.cancel(unknown_job())

    # -- status ----------------------------------------------------------------------------

    async def _stays(
        self, sched: Scheduler[Any, Any], harness: Harness, job: Job, state: AppState
    ) -> None:
        """A terminal state stays: later answers are the same state, or None."""
        for _ in range(3):
            await harness.advance(sched)
            value = await describe(sched, job)
            assert value is None or (isinstance(value, AppStatus) and value.state == state), (
                f"{job.app_id} was {AppState.Name(state)}, then {_state(value)}"
            )

    async def test_a_job_that_succeeds(self, sched: Scheduler[Any, Any], harness: Harness) -> None:
        sub = await submit(sched, harness, Script())
        final = await wait_terminal(sched, harness, sub.job)
        assert final.state == AppState.SUCCEEDED, final
        await self._stays(sched, harness, sub.job, AppState.SUCCEEDED)

    async def test_a_job_that_fails(self, sched: Scheduler[Any, Any], harness: Harness) -> None:
        sub = await submit(sched, harness, Script(exit_code=3))
        final = await wait_terminal(sched, harness, sub.job)
        assert final.state == AppState.FAILED, final
        await self._stays(sched, harness, sub.job, AppState.FAILED)

    async def test_a_released_job_succeeds(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        sub = await submit(sched, harness, Script(block=True))
        await wait_live(sched, harness, sub.job)
        await harness.release(sched, sub.app, sub.job)
        final = await wait_terminal(sched, harness, sub.job)
        assert final.state == AppState.SUCCEEDED, final

    async def test_describe_of_an_unknown_job_is_none(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        ghost = unknown_job()
        assert await sched.describe_many([ghost]) == {ghost.app_id: None}
        # Beside a job it knows, too: one answer per job.
        sub = await submit(sched, harness, Script(block=True))
        found = await sched.describe_many([sub.job, ghost])
        assert found[ghost.app_id] is None
        assert isinstance(found[sub.job.app_id], AppStatus)

    async def test_describe_many_of_nothing(self, sched: Scheduler[Any, Any]) -> None:
        assert await sched.describe_many([]) == {}

    async def test_an_unknown_option_is_invalid_argument(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        app = harness.app(Script())
        if app is None:
            pytest.skip("the harness cannot run a plain job")
        cfg = {**harness.cfg, "contract_no_such_option": CfgValue(str="x")}
        with pytest.raises(InvalidArgument) as e:
            await sched.submit_dryrun(app, cfg, harness.context())
        assert "contract_no_such_option" in str(e.value)

    async def test_aclose_twice(self, sched: Scheduler[Any, Any]) -> None:
        await sched.aclose()
        await sched.aclose()

    async def test_an_unreachable_backend_raises_backend_unavailable(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        """While the backend is down: describe_many raises BackendUnavailable or answers
        NoAnswer per job, a change stream ends or raises BackendUnavailable, shutdown raises
        nothing but BackendUnavailable, and aclose nothing at all."""
        down = harness.backend_down(sched)
        if down is None:
            pytest.skip("the harness cannot take the backend down")
        sub = await submit(sched, harness, Script(block=True))
        await wait_live(sched, harness, sub.job)
        with down:
            try:
                found = await sched.describe_many([sub.job])
            except BackendUnavailable:
                pass
            else:
                assert isinstance(found.get(sub.job.app_id, NoAnswer("")), NoAnswer), found
            if sched.pushes():
                with contextlib.suppress(BackendUnavailable):
                    async with contextlib.aclosing(sched.changes()) as changes:
                        async with asyncio.timeout(harness.timeout):
                            async for item in changes:
                                assert item is SUBSCRIBED or isinstance(item, Change)
            # shutdown may say that it could not reach the backend, and only that.
            with contextlib.suppress(BackendUnavailable):
                await sched.shutdown(harness.grace)
            await sched.aclose()

    # -- logs (api.py, Scheduler.log_iter rules 1-5) -----------------------------------------

    def _need_logs(self, sched: Scheduler[Any, Any], *caps: str) -> None:
        for cap in ("logs", *caps):
            if not getattr(sched.capabilities, cap):
                pytest.skip(f"{cap} is not claimed (see the Unsupported check)")

    def _logs(
        self,
        sched: Scheduler[Any, Any],
        harness: Harness,
        sub: Submission,
        k: int = 0,
        **query: Any,
    ) -> AsyncIterator[bytes]:
        return sched.log_iter(
            sub.job, sub.role, k, LogQuery(**query), ended_by(sched, harness, sub.job)
        )

    async def test_logs_are_the_bytes_written(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        """Rule 1: no decoding; `\\r`, invalid UTF-8 and a 200 kB line arrive as written."""
        self._need_logs(sched)
        sub = await submit(sched, harness, Script(first=Output(stdout=RAW)))
        assert (await wait_terminal(sched, harness, sub.job)).state == AppState.SUCCEEDED
        got, raw = (
            await read_all(self._logs(sched, harness, sub), harness.timeout),
            harness.logged(RAW),
        )
        assert got == raw, f"{len(got)} bytes, differing from byte {_first_diff(got, raw)}"

    async def test_logs_of_each_replica(self, sched: Scheduler[Any, Any], harness: Harness) -> None:
        self._need_logs(sched)
        sub = await submit(sched, harness, Script(first=Output(stdout=b"same\n"), replicas=2))
        assert num_replicas(sub.app.roles[0]) == 2
        await wait_terminal(sched, harness, sub.job)
        for k in (0, 1):
            assert await read_all(self._logs(sched, harness, sub, k), harness.timeout) == b"same\n"

    async def test_logs_of_stdout_and_stderr_apart(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        self._need_logs(sched, "log_streams")
        out, err = b"to stdout \xff\n" * 3, b"to stderr\r\n" * 2
        sub = await submit(sched, harness, Script(first=Output(stdout=out, stderr=err)))
        await wait_terminal(sched, harness, sub.job)
        t = harness.timeout
        assert await read_all(self._logs(sched, harness, sub, stream=Stream.STDOUT), t) == out
        assert await read_all(self._logs(sched, harness, sub, stream=Stream.STDERR), t) == err
        both = await read_all(self._logs(sched, harness, sub, stream=Stream.COMBINED), t)
        assert sorted(both) == sorted(out + err), both

    async def test_logs_of_an_unknown_replica_are_not_found(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        self._need_logs(sched)
        sub = await submit(sched, harness, Script(first=Output(stdout=b"x\n")))
        await wait_terminal(sched, harness, sub.job)
        ended = ended_by(sched, harness, sub.job)
        for role, k in (("no-such-role", 0), (sub.role, 7)):
            with pytest.raises(NotFound):
                await read_all(sched.log_iter(sub.job, role, k, LogQuery(), ended), harness.timeout)

    async def test_logs_regex_selects_whole_lines(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        """Rule 2: whole matching lines; the last line, without `\\n`, is tested too."""
        self._need_logs(sched)
        sub = await submit(sched, harness, Script(first=Output(stdout=LINES)))
        await wait_terminal(sched, harness, sub.job)
        t = harness.timeout
        alpha = await read_all(self._logs(sched, harness, sub, regex="alpha"), t)
        assert alpha == harness.logged(b"alpha 1\n\xe9alpha 3 \xff\nalpha 5")
        assert await read_all(self._logs(sched, harness, sub, regex="^beta"), t) == (
            b"beta 2\nbeta 4\n"
        )
        assert await read_all(self._logs(sched, harness, sub, regex="nowhere"), t) == b""

    async def test_logs_follow_until_the_job_ends(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        """Rule 3: a follow sends what is there, waits for more while the job lives, and ends
        once the job has ended and every byte was sent. Without follow, a read ends at the
        current end of the log."""
        self._need_logs(sched, "log_follow")
        written = b"first \xff\r\n", b"then\nlast, no newline"
        sub = await submit(
            sched,
            harness,
            Script(first=Output(stdout=written[0]), block=True, then=Output(stdout=written[1])),
        )
        first, then = map(harness.logged, written)
        follow = self._logs(sched, harness, sub, follow=True)
        assert await read_until(follow, first, harness.timeout) == first
        assert await read_all(self._logs(sched, harness, sub), harness.timeout) == first
        await harness.release(sched, sub.app, sub.job)
        assert await read_all(follow, harness.timeout) == then
        # Every byte was sent by then: the log holds no more.
        assert await read_all(self._logs(sched, harness, sub), harness.timeout) == first + then
        assert (await wait_terminal(sched, harness, sub.job)).state == AppState.SUCCEEDED

    async def test_logs_follow_of_a_cancelled_job_ends(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        self._need_logs(sched, "log_follow")
        if not sched.capabilities.cancel:
            pytest.skip("cancel is not claimed")
        sub = await submit(sched, harness, Script(first=Output(stdout=b"up\n"), block=True))
        follow = self._logs(sched, harness, sub, follow=True)
        assert await read_until(follow, b"up\n", harness.timeout) == b"up\n"
        await sched.cancel(sub.job)
        # It ends; the backend may add a line of its own (slurmstepd's "CANCELLED").
        rest = await read_all(follow, harness.timeout)
        assert b"up\n" not in rest, rest

    async def test_logs_since_until(self, sched: Scheduler[Any, Any], harness: Harness) -> None:
        """Rule 4: lines are selected by when they were written."""
        self._need_logs(sched, "log_since_until")
        first, then = b"early 1\nearly 2\n", b"late 1\nlate 2\n"
        sub = await submit(
            sched, harness, Script(first=Output(stdout=first), block=True, then=Output(stdout=then))
        )
        follow = self._logs(sched, harness, sub, follow=True)
        await read_until(follow, first, harness.timeout)
        # `first` is written (we read it): every later line is stamped after `middle`.
        middle = dt.datetime.now(dt.UTC)
        await _clock_past(middle, harness.clock_resolution)
        await harness.release(sched, sub.app, sub.job)
        await read_all(follow, harness.timeout)
        await wait_terminal(sched, harness, sub.job)
        end = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
        t = harness.timeout
        assert await read_all(self._logs(sched, harness, sub, until=middle), t) == first
        assert await read_all(self._logs(sched, harness, sub, since=middle), t) == then
        assert await read_all(self._logs(sched, harness, sub, since=end), t) == b""
        both = self._logs(sched, harness, sub, since=middle, until=end, regex="2")
        assert await read_all(both, t) == b"late 2\n"

    async def test_log_iterators_are_independent(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        """Rule 5: one reader pausing does not hold up another on the same replica."""
        self._need_logs(sched, "log_follow")
        first, then = b"a" * 300_000 + b"\n", b"b" * 300_000 + b"\n"
        sub = await submit(
            sched, harness, Script(first=Output(stdout=first), block=True, then=Output(stdout=then))
        )
        slow = self._logs(sched, harness, sub, follow=True)
        head = await anext(slow)  # then it pauses
        fast = self._logs(sched, harness, sub, follow=True)
        assert await read_until(fast, first, harness.timeout) == first
        await harness.release(sched, sub.app, sub.job)
        assert first + await read_all(fast, harness.timeout) == first + then
        assert head + await read_all(slow, harness.timeout) == first + then


def _first_diff(a: bytes, b: bytes) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


async def _clock_past(moment: dt.datetime, resolution: float) -> None:
    """Returns once the wall clock is `resolution` past `moment`, so that a backend stamping
    lines with that precision stamps later lines after `moment`."""
    target = moment + dt.timedelta(seconds=resolution)
    for _ in range(1000):
        left = (target - dt.datetime.now(dt.UTC)).total_seconds()
        if left <= 0:
            return
        await asyncio.sleep(left)
    raise AssertionError("the wall clock does not advance")
