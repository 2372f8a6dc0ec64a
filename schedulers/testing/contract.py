"""The checks: `SchedulerContract`, the rules of txd.schedulers.api, run by pytest on any backend
whose tests subclass it and provide a `harness` fixture (see the package's docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from txd.schedulers.api import (
    SUBSCRIBED,
    Change,
    Job,
    LogQuery,
    NoAnswer,
    Scheduler,
    is_terminal,
    num_replicas,
)
from txd.schedulers.errors import BackendUnavailable, InvalidArgument, NotFound, Unsupported
from txd.schedulers.testing.harness import Harness, Output, Script
from txd.schedulers.testing.helpers import (
    SUBMITTED,
    Submission,
    Tasks,
    describe,
    ended_by,
    expect_unsupported,
    last_lines,
    read_all,
    read_until,
    state_name,
    submit,
    tail_of,
    unknown_job,
    wait_for,
    wait_live,
    wait_terminal,
)
from txd.v1 import AppState, AppStatus, CfgValue, Stream

# Output that a text pipeline would damage: Latin-1 and invalid UTF-8, carriage returns
# (progress bars), a long line, a last line without a newline.
RAW = (
    b"caf\xe9 \xff\xfe\x00 not utf-8\n"
    b"progress 10%\rprogress 50%\rprogress 100%\r\n"
    b"crlf line\r\n" + b"x" * 200_000 + b"\n" + b"tail without newline"
)
LINES = b"alpha 1\nbeta 2\n\xe9alpha 3 \xff\nbeta 4\nalpha 5"
# A log of many reads and chunks (several 64 KiB chunks, thousands of engine frames), for tails.
MANY_LINES = b"".join(
    b"line %05d of a log long enough to span many chunks\n" % i for i in range(8000)
)

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
                    for job in SUBMITTED.pop(id(sched), []):
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
                    if isinstance(item.status, AppStatus) and is_terminal(item.status.state):
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
                    functools.partial(sched.log_iter, sub.job, sub.role, 0, query, ended)
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
                f"{job.app_id} was {AppState.Name(state)}, then {state_name(value)}"
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

    async def test_logs_tail_is_exactly_the_last_lines(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        """Rules 6 and 7: with a tail, the daemon keeps the last lines of what log_iter sends up
        to its first empty chunk: a scheduler skips only bytes before those lines, and says it
        has caught up only once it sent every byte written so far. Checked on a long log (many
        chunks) of each of two replicas, read and followed (`tail_of` does what the daemon
        does), while the job runs and after it ended."""
        self._need_logs(sched)
        then = b"after 1\nafter 2\n"
        sub = await submit(
            sched,
            harness,
            Script(
                first=Output(stdout=MANY_LINES), block=True, then=Output(stdout=then), replicas=2
            ),
        )
        first, t = harness.logged(MANY_LINES), harness.timeout
        follow = sched.capabilities.log_follow
        if follow:  # every line of `first` is written: read it whole once
            for k in (0, 1):
                whole = self._logs(sched, harness, sub, k, follow=True)
                assert await read_until(whole, first, t) == first
                await _aclose(whole)
        else:  # tails of the whole log, once the job has ended
            await harness.release(sched, sub.app, sub.job)
            await wait_terminal(sched, harness, sub.job)

        def tail(k: int, n: int, **query: Any) -> AsyncIterator[bytes]:
            return tail_of(self._logs(sched, harness, sub, k, tail=n, **query), n)

        full = first if follow else first + harness.logged(then)
        for k in (0, 1):
            for n in (0, 1, 3, 2500, 9000):
                got = await read_all(tail(k, n), t)
                assert got == last_lines(full, n), f"replica {k}, tail {n}: {_lines_of(got)}"
        if not follow:
            return
        # Followed, from the last 3 lines on; then what comes after them.
        tails = [tail(k, 3, follow=True) for k in (0, 1)]
        for k, it in enumerate(tails):
            got = await read_until(it, last_lines(first, 3), t)
            assert got == last_lines(first, 3), f"replica {k}, tail 3, followed: {_lines_of(got)}"
        await harness.release(sched, sub.app, sub.job)
        for k, it in enumerate(tails):
            assert await read_all(it, t) == harness.logged(then), f"replica {k}"
        await wait_terminal(sched, harness, sub.job)
        for k in (0, 1):
            got = await read_all(tail(k, 4), t)
            assert got == last_lines(first + harness.logged(then), 4), _lines_of(got)

    async def test_logs_resume_at_an_offset(
        self, sched: Scheduler[Any, Any], harness: Harness
    ) -> None:
        """LogQuery.offset (a client resuming a read, LogsRequest.offsets): a scheduler with
        `log_seek` skips exactly that many bytes of what it would send, filtered or not; for
        any other the daemon reads again and skips, which needs a second read of an ended
        job's log to give the same bytes as the first."""
        self._need_logs(sched)
        sub = await submit(sched, harness, Script(first=Output(stdout=MANY_LINES + LINES)))
        await wait_terminal(sched, harness, sub.job)
        t = harness.timeout
        whole = await read_all(self._logs(sched, harness, sub), t)
        assert await read_all(self._logs(sched, harness, sub), t) == whole
        if not sched.log_seek:
            return
        for at in (1, 65536 + 7, len(whole) - 3, len(whole), len(whole) + 10):
            got = await read_all(self._logs(sched, harness, sub, offset=at), t)
            assert got == whole[at:], f"offset {at}: {len(got)} bytes"
        alpha = await read_all(self._logs(sched, harness, sub, regex="alpha"), t)
        got = await read_all(self._logs(sched, harness, sub, regex="alpha", offset=9), t)
        assert got == alpha[9:]

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


def _lines_of(data: bytes) -> str:
    """A short account of a log read: its line count and its first line."""
    nl = b"\n"
    return f"{data.count(nl)} lines, the first {data[: data.find(nl) + 1][:80]!r}"


async def _aclose(it: AsyncIterator[bytes]) -> None:
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        await aclose()


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
