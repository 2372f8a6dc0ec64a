"""Status feeds: how each scheduler's job statuses reach the status cache.

One feed per scheduler, of one of two kinds, chosen by the scheduler (`Scheduler.pushes()`):
- PollFeed asks `describe_many` about every followed job once per poll interval, however many
  clients wait on or watch those jobs;
- ChangeFeed consumes the scheduler's `changes()` stream, describes every followed job once
  each time the stream is (re)subscribed, and reopens a dropped stream after the interval.

A feed runs as one task in the daemon's task group, started when its scheduler's first job is
followed and ended when none is left. Both kinds offer `refresh()`: "make these jobs' statuses
current now" (after a submit or a cancel), so the job service never asks which kind it has.
Backend trouble never escapes a feed: the jobs' statuses are marked stale and the feed goes on.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from txd.daemon.cache import LiveJob, StatusCache
from txd.schedulers.api import Described, NoAnswer, Scheduler, Subscribed, TaskGroupLike
from txd.schedulers.errors import TxdError
from txd.schedulers.pulse import Pulse
from txd.v1 import AppStatus

log = logging.getLogger(__name__)

NOT_DESCRIBED = NoAnswer("the backend's answer left this job out")
# Statuses a ChangeFeed keeps of jobs not followed (yet), the oldest dropped first: pushes for
# other daemons' jobs on a shared backend must not grow the daemon.
UNCLAIMED = 1024


class Feed(abc.ABC):
    def __init__(
        self, name: str, sched: Scheduler[Any, Any], cache: StatusCache, tasks: TaskGroupLike
    ) -> None:
        self.name = name
        self.sched = sched
        self.cache = cache
        self._tasks = tasks  # the daemon's task group
        self._task: asyncio.Task[None] | None = None

    @property
    def interval(self) -> float:
        return float(self.sched.settings.poll_interval)

    def start(self) -> None:
        """Makes sure the feed runs (a job of its scheduler is followed now)."""
        if self._task is None:
            self._task = self._tasks.create_task(self._main(), name=f"{self.name} status feed")

    async def stop(self) -> None:
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _main(self) -> None:
        try:
            await self._run()
        finally:
            self._task = None
            self._ended()
            # A job followed after _run saw none left but before it returned (closing a change
            # stream awaits) found this task still there and started none: start one for it.
            task = asyncio.current_task()
            if not (task and task.cancelling()) and self.cache.any_followed(self.name):
                self.start()

    @abc.abstractmethod
    async def _run(self) -> None:
        """Keeps statuses current until no job of the scheduler is followed."""

    def _ended(self) -> None:  # noqa: B027 (optional hook)
        """The task has ended (no job left, or stopped)."""

    @abc.abstractmethod
    async def refresh(self, jobs: Sequence[LiveJob], *, wait: bool = True) -> None:
        """Has these jobs' statuses asked of the backend now; with `wait`, returns once they
        were (a polled scheduler is otherwise only nudged)."""

    async def _describe(self, jobs: Sequence[LiveJob]) -> None:
        """One describe_many for `jobs`, applied to the cache; never raises a backend error."""
        if not jobs:
            return
        pushes = [j.pushes for j in jobs]
        try:
            with self.cache.metrics.backend(self.name, "describe"):
                found = await self.sched.describe_many([j.job for j in jobs])
        except TxdError as e:
            log.warning("%s: status query failed, keeping the last statuses: %s", self.name, e)
            self.cache.mark_stale(list(jobs), self.name, str(e))
            return
        except Exception as e:  # a scheduler's bug must not stop its feed
            log.exception("%s: status query raised", self.name)
            self.cache.mark_stale(list(jobs), self.name, f"internal error: {e!r}")
            return
        # A change pushed while the backend was asked is newer than its answer.
        self._apply([j for j, n in zip(jobs, pushes, strict=True) if j.pushes == n], found)

    def _apply(self, jobs: Sequence[LiveJob], found: Mapping[str, Described]) -> None:
        for job in jobs:
            value = found.get(job.record.app_id, NOT_DESCRIBED)
            if isinstance(value, NoAnswer):
                self.cache.mark_stale([job], self.name, value.reason)
            elif value is None:
                self.cache.forgotten(job, self.name)
            else:
                self.cache.record(job, value)


class PollFeed(Feed):
    """One batched query per interval. A refresh (a submit, a cancel) cuts the wait short, but
    never below a fifth of the interval: a burst of submissions costs at most 5 polls per
    interval."""

    def __init__(
        self, name: str, sched: Scheduler[Any, Any], cache: StatusCache, tasks: TaskGroupLike
    ) -> None:
        super().__init__(name, sched, cache, tasks)
        self._kick = asyncio.Event()  # set: poll soon
        self._polled = Pulse()  # fired after each poll, and when the task ends
        self._started = 0  # polls started so far
        self.polls = 0  # polls done so far

    async def _run(self) -> None:
        while jobs := self.cache.followed(self.name):
            self._kick.clear()
            self._started += 1
            await self._describe(jobs)
            self.polls += 1
            self._polled.fire()
            await asyncio.sleep(self.interval / 5)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval * 4 / 5):
                    await self._kick.wait()

    def _ended(self) -> None:
        self._polled.fire()  # wakes refresh callers: no poll will come

    async def refresh(self, jobs: Sequence[LiveJob], *, wait: bool = True) -> None:
        self.start()
        if not wait:
            self._kick.set()
            return
        # A poll under way may have queried the backend before the caller's change: the one
        # that counts is the next to start. Polls start and finish in turn, so it is done when
        # the finished count passes the started count of now.
        target = self._started + 1
        self._kick.set()
        while self.polls < target and self._task is not None:
            await self._polled.wait_past(self._polled.gen)


class ChangeFeed(Feed):
    """The informer pattern: subscribe, describe everything once, then apply pushed changes.

    A status pushed for a job not followed yet (one being submitted: its first changes come
    while schedule() runs) is kept, while the stream that pushed it stays open: the job's
    refresh once it is followed takes it instead of asking the backend, as every later change
    will be pushed too."""

    def __init__(
        self, name: str, sched: Scheduler[Any, Any], cache: StatusCache, tasks: TaskGroupLike
    ) -> None:
        super().__init__(name, sched, cache, tasks)
        # The last status pushed for each app id not followed, on the open stream (see above).
        self._unclaimed: OrderedDict[str, AppStatus] = OrderedDict()

    async def _run(self) -> None:
        while self.cache.any_followed(self.name):
            try:
                # One subscription is one backend call; one that ends in an error, a failure.
                with self.cache.metrics.backend(self.name, "changes"):
                    async with contextlib.aclosing(self.sched.changes()) as changes:
                        async for item in changes:
                            if isinstance(item, Subscribed):
                                self._unclaimed.clear()  # pushed before: maybe missed since
                                await self._describe(self.cache.followed(self.name))
                            elif (job := self.cache.by_app_id(self.name, item.app_id)) is not None:
                                job.pushes += 1
                                self._apply([job], {item.app_id: item.status})
                            else:
                                self._keep_unclaimed(item.app_id, item.status)
                            if not self.cache.any_followed(self.name):
                                return
                reason = "its change stream ended"
            except TxdError as e:
                reason = str(e)
            except Exception as e:  # a scheduler's bug must not stop its feed
                log.exception("%s: change stream raised", self.name)
                reason = f"internal error: {e!r}"
            finally:
                self._unclaimed.clear()  # nothing will keep them current now
            jobs = self.cache.followed(self.name)
            log.warning("%s: %s; reconnecting in %g s", self.name, reason, self.interval)
            self.cache.mark_stale(jobs, self.name, reason)
            await asyncio.sleep(self.interval)

    def _keep_unclaimed(self, app_id: str, status: Described) -> None:
        self._unclaimed.pop(app_id, None)
        if isinstance(status, AppStatus):  # else the refresh asks
            self._unclaimed[app_id] = status
            while len(self._unclaimed) > UNCLAIMED:
                self._unclaimed.popitem(last=False)

    async def refresh(self, jobs: Sequence[LiveJob], *, wait: bool = True) -> None:
        self.start()
        followed = [j for j in jobs if j.followed]
        pushed = {
            j.record.app_id: status
            for j in followed
            if (status := self._unclaimed.pop(j.record.app_id, None)) is not None
        }
        self._apply([j for j in followed if j.record.app_id in pushed], pushed)
        await self._describe([j for j in followed if j.record.app_id not in pushed])


def feed_for(
    name: str, sched: Scheduler[Any, Any], cache: StatusCache, tasks: TaskGroupLike
) -> Feed:
    kind = ChangeFeed if sched.pushes() else PollFeed
    return kind(name, sched, cache, tasks)
