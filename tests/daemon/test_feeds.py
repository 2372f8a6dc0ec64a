"""The status feeds (daemon/feeds.py) over fake schedulers and a real job store, on the
virtual clock of tests/daemon/conftest.py: a poll interval costs no wall time, and the fakes'
describe_many answers when the test says, so every count below is exact."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from daemon_fakes import TIMEOUT, FakePusher, FakeScheduler, Tasks, new_record, states
from txd.daemon.cache import LiveJob, StatusCache
from txd.daemon.feeds import ChangeFeed, PollFeed
from txd.daemon.jobstore import JobStore
from txd.schedulers.api import SUBSCRIBED, Change, NoAnswer
from txd.schedulers.errors import BackendUnavailable
from txd.v1 import AppState, AppStatus

INTERVAL = 1.0


@pytest.fixture
async def tasks() -> AsyncIterator[Tasks]:
    t = Tasks()
    yield t
    await t.aclose()


def follow(cache: StatusCache, store: JobStore, n: int, scheduler: str = "fake") -> list[LiveJob]:
    return [cache.follow(new_record(store, scheduler)) for _ in range(n)]


def poll_feed(
    cache: StatusCache, tasks: Tasks, gated: bool = True
) -> tuple[FakeScheduler, PollFeed]:
    sched = FakeScheduler(settings={"poll_interval": INTERVAL})
    if gated:
        sched.auto = None
    return sched, PollFeed("fake", sched, cache, tasks)


async def feed_ended(tasks: Tasks) -> None:
    async with asyncio.timeout(TIMEOUT):
        await tasks.tasks[-1]


def ids(jobs: list[LiveJob]) -> list[str]:
    return sorted(j.record.app_id for j in jobs)


# -- PollFeed ---------------------------------------------------------------------------------


async def test_one_query_per_poll_for_every_job_however_many_watch(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    sched, feed = poll_feed(cache, tasks)
    jobs = follow(cache, store, 3)

    async def watch(job: LiveJob) -> list[int]:
        return [s.state async for s in cache.watch(job.record)]

    watchers = [asyncio.create_task(watch(jobs[i % 3])) for i in range(20)]
    feed.start()
    assert await sched.next_call() == ids(jobs)
    sched.answer(states(AppState.RUNNING))
    assert await sched.next_call() == ids(jobs)
    sched.answer(states(AppState.SUCCEEDED))
    async with asyncio.timeout(TIMEOUT):
        seen = await asyncio.gather(*watchers)
    await feed_ended(tasks)
    assert len(sched.calls) == 2 and feed.polls == 2
    for states_seen in seen:
        assert states_seen[-1] == AppState.SUCCEEDED


async def test_the_feed_ends_without_jobs_and_starts_again(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    sched, feed = poll_feed(cache, tasks, gated=False)
    sched.auto = states(AppState.SUCCEEDED)
    follow(cache, store, 2)
    feed.start()
    await feed_ended(tasks)
    assert len(sched.calls) == 1 and len(tasks.tasks) == 1
    feed.start()  # no job: one look, and the task ends without a query
    await feed_ended(tasks)
    assert len(sched.calls) == 1
    new = follow(cache, store, 1)
    feed.start()
    await feed_ended(tasks)
    assert sched.calls[-1] == ids(new) and len(tasks.tasks) == 3


async def test_refresh_waits_for_a_poll_that_started_after_it(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    sched, feed = poll_feed(cache, tasks)
    jobs = follow(cache, store, 1)
    feed.start()
    await sched.next_call()  # poll 1 is under way: it may predate the caller's change
    refresh = asyncio.create_task(feed.refresh(jobs, wait=True))
    await asyncio.sleep(0)
    sched.answer(states(AppState.RUNNING))
    await sched.next_call()  # poll 2 has started (kicked: a fifth of the interval later)
    for _ in range(5):
        await asyncio.sleep(0)  # whatever poll 1's end woke has run
    assert not refresh.done(), "refresh returned after a poll that started before it"
    sched.answer(states(AppState.RUNNING))
    async with asyncio.timeout(TIMEOUT):
        await refresh
    assert feed.polls == 2


async def test_refresh_without_a_running_feed_starts_it(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    sched, feed = poll_feed(cache, tasks, gated=False)
    jobs = follow(cache, store, 2)
    async with asyncio.timeout(TIMEOUT):
        await feed.refresh(jobs[:1], wait=True)
    assert sched.calls == [ids(jobs)]  # batched with every followed job
    assert all(j.status.state == AppState.RUNNING for j in jobs)


async def test_refresh_returns_when_the_feed_ends_meanwhile(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    sched, feed = poll_feed(cache, tasks)
    jobs = follow(cache, store, 1)
    feed.start()
    await sched.next_call()
    refresh = asyncio.create_task(feed.refresh(jobs, wait=True))
    await asyncio.sleep(0)
    sched.answer(states(AppState.SUCCEEDED))  # no job left: no poll 2 will come
    async with asyncio.timeout(TIMEOUT):
        await refresh
    assert len(sched.calls) == 1


async def test_kicks_cut_the_wait_to_a_fifth_of_the_interval_and_no_less(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    _, feed = poll_feed(cache, tasks, gated=False)
    jobs = follow(cache, store, 1)
    loop = asyncio.get_running_loop()
    feed.start()
    await asyncio.sleep(10 * INTERVAL)  # unkicked: one poll per interval
    assert 10 <= feed.polls <= 11, feed.polls
    before, start = feed.polls, loop.time()
    while loop.time() < start + 10 * INTERVAL:  # a burst of submissions
        await feed.refresh(jobs, wait=False)
        await asyncio.sleep(INTERVAL / 100)
    burst = feed.polls - before
    assert 49 <= burst <= 51, burst  # 5 per interval


async def test_an_unavailable_backend_marks_every_job_stale_and_the_feed_goes_on(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    sched, feed = poll_feed(cache, tasks)
    jobs = follow(cache, store, 3)
    feed.start()
    await sched.next_call()
    sched.answer(states(AppState.RUNNING))
    await sched.next_call()
    sched.answer(BackendUnavailable("login node down"))
    await sched.next_call()  # the feed goes on
    assert all(j.status.HasField("stale_since") for j in jobs)
    assert all(j.status.stale_msg.endswith(": login node down") for j in jobs)
    assert all(j.status.state == AppState.RUNNING for j in jobs)
    sched.answer(states(AppState.RUNNING))
    await sched.next_call()
    assert not any(j.status.HasField("stale_since") for j in jobs)


async def test_a_scheduler_bug_marks_stale_too(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    sched, feed = poll_feed(cache, tasks)
    jobs = follow(cache, store, 1)
    feed.start()
    await sched.next_call()
    sched.answer(KeyError("oops"))
    await sched.next_call()
    assert "internal error: KeyError('oops')" in jobs[0].status.stale_msg


async def test_per_job_answers(cache: StatusCache, store: JobStore, tasks: Tasks) -> None:
    """NoAnswer or left out: that job stale; None: that job forgotten; a status: recorded."""
    sched, feed = poll_feed(cache, tasks)
    live, quiet, left_out, gone = follow(cache, store, 4)
    feed.start()
    await sched.next_call()
    sched.answer(states(AppState.RUNNING))
    await sched.next_call()
    sched.answer(
        lambda _: {
            live.record.app_id: AppStatus(state=AppState.RUNNING, msg="still"),
            quiet.record.app_id: NoAnswer("its login node is down"),
            gone.record.app_id: None,
        }
    )
    await sched.next_call()
    assert live.status.msg == "still" and not live.status.HasField("stale_since")
    assert quiet.status.stale_msg.endswith(": its login node is down")
    assert left_out.status.stale_msg.endswith(": the backend's answer left this job out")
    assert gone.status.state == AppState.UNKNOWN and not gone.followed
    assert sched.calls[-1] == ids([live, quiet, left_out])


# -- ChangeFeed -------------------------------------------------------------------------------


def change_feed(cache: StatusCache, tasks: Tasks) -> tuple[FakePusher, ChangeFeed]:
    sched = FakePusher(settings={"poll_interval": INTERVAL})
    return sched, ChangeFeed("fakepush", sched, cache, tasks)


async def settle() -> None:
    """Lets the feed take what was pushed (it needs no timer to do so)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_subscribed_describes_every_followed_job_once(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    sched, feed = change_feed(cache, tasks)
    jobs = follow(cache, store, 3, "fakepush")
    feed.start()
    await settle()
    assert sched.opened == 1 and sched.calls == []  # nothing until subscribed
    sched.items.put_nowait(SUBSCRIBED)
    assert await sched.next_call() == ids(jobs)
    await settle()
    assert len(sched.calls) == 1
    assert all(j.status.state == AppState.RUNNING for j in jobs)


async def test_changes_are_recorded_for_followed_jobs_only(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    sched, feed = change_feed(cache, tasks)
    a, b = follow(cache, store, 2, "fakepush")
    feed.start()
    sched.items.put_nowait(SUBSCRIBED)
    sched.items.put_nowait(Change("somebody-elses", AppStatus(state=AppState.FAILED)))
    sched.items.put_nowait(Change(a.record.app_id, AppStatus(state=AppState.SUCCEEDED)))
    sched.items.put_nowait(Change(b.record.app_id, None))
    await feed_ended(tasks)  # no job left
    assert a.status.state == AppState.SUCCEEDED
    assert b.status.state == AppState.UNKNOWN and "no longer knows" in b.status.msg
    assert sched.closed == 1, "the stream was not closed when the feed ended"
    assert len(sched.calls) == 1


async def test_a_job_followed_while_the_ending_feed_closes_its_stream_gets_a_new_feed(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    """The last job ends, and while the stream closes (awaits) a new job is followed: its
    refresh finds the old task still there, so the feed must start again as it ends."""
    sched, feed = change_feed(cache, tasks)
    [a] = follow(cache, store, 1, "fakepush")
    feed.start()
    assert await sched.next_open() == 1
    sched.items.put_nowait(SUBSCRIBED)
    sched.closing = asyncio.Event()
    sched.items.put_nowait(Change(a.record.app_id, AppStatus(state=AppState.SUCCEEDED)))
    await settle()
    assert a.status.state == AppState.SUCCEEDED and sched.closed == 0  # closing, held
    [b] = follow(cache, store, 1, "fakepush")
    await feed.refresh([b])
    sched.closing.set()
    assert await sched.next_open() == 2
    sched.closing = None
    sched.items.put_nowait(SUBSCRIBED)
    sched.items.put_nowait(Change(b.record.app_id, AppStatus(state=AppState.FAILED)))
    await feed_ended(tasks)
    assert b.status.state == AppState.FAILED


async def test_a_pushed_no_answer_marks_the_job_stale_with_no_resync(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    sched, feed = change_feed(cache, tasks)
    (a,) = follow(cache, store, 1, "fakepush")
    feed.start()
    sched.items.put_nowait(SUBSCRIBED)
    await sched.next_call()
    await settle()
    sched.items.put_nowait(Change(a.record.app_id, NoAnswer("its pods vanished")))
    await settle()
    assert a.status.stale_msg.endswith(": its pods vanished")
    assert a.status.state == AppState.RUNNING and a.followed
    assert len(sched.calls) == 1, "a NoAnswer change made the feed describe again"


@pytest.mark.parametrize("drop", ["ends", "raises"])
async def test_a_dropped_stream_marks_stale_reopens_after_the_interval_and_resyncs(
    cache: StatusCache, store: JobStore, tasks: Tasks, drop: str
) -> None:
    sched, feed = change_feed(cache, tasks)
    jobs = follow(cache, store, 2, "fakepush")
    loop = asyncio.get_running_loop()
    feed.start()
    sched.items.put_nowait(SUBSCRIBED)
    await sched.next_call()
    sched.items.put_nowait(None if drop == "ends" else BackendUnavailable("watch lost"))
    await settle()
    dropped_at = loop.time()
    reason = "its change stream ended" if drop == "ends" else "watch lost"
    assert all(j.status.stale_msg.endswith(f": {reason}") for j in jobs)
    assert sched.closed == 1 and sched.opened == 1
    assert await sched.next_open() == 1
    assert await sched.next_open() == 2
    assert loop.time() - dropped_at >= INTERVAL
    sched.items.put_nowait(SUBSCRIBED)
    assert await sched.next_call() == ids(jobs)  # the resync
    await settle()
    assert not any(j.status.HasField("stale_since") for j in jobs)


async def test_refresh_describes_the_jobs(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    sched, feed = change_feed(cache, tasks)
    a, b = follow(cache, store, 2, "fakepush")
    async with asyncio.timeout(TIMEOUT):
        await feed.refresh([a])
    assert sched.calls == [[a.record.app_id]]
    assert a.status.state == AppState.RUNNING and b.status.state == AppState.SUBMITTED
    assert len(tasks.tasks) == 1  # and the feed runs


async def test_a_status_pushed_before_the_job_is_followed_answers_its_refresh(
    cache: StatusCache, store: JobStore, tasks: Tasks
) -> None:
    """A job's first changes come while it is submitted, before the daemon follows it: the
    stream that pushed them stays open, so the refresh after the submit takes the last of them
    and asks the backend nothing."""
    sched, feed = change_feed(cache, tasks)
    follow(cache, store, 1, "fakepush")  # the feed runs for another job
    feed.start()
    sched.items.put_nowait(SUBSCRIBED)
    await sched.next_call()
    new = new_record(store, "fakepush")
    sched.items.put_nowait(Change(new.app_id, AppStatus(state=AppState.SUBMITTED)))
    sched.items.put_nowait(Change(new.app_id, AppStatus(state=AppState.RUNNING, msg="pushed")))
    await settle()
    job = cache.follow(new)
    async with asyncio.timeout(TIMEOUT):
        await feed.refresh([job], wait=False)
    assert (job.status.state, job.status.msg) == (AppState.RUNNING, "pushed")
    assert len(sched.calls) == 1, "the refresh asked the backend"


@pytest.mark.parametrize("then", ["dropped", "no answer"])
async def test_a_status_pushed_before_the_job_is_followed_is_dropped_when_it_may_be_stale(
    cache: StatusCache, store: JobStore, tasks: Tasks, then: str
) -> None:
    """Once the stream that pushed it drops (changes may be missed), or the backend says it
    cannot tell, the refresh asks the backend."""
    sched, feed = change_feed(cache, tasks)
    follow(cache, store, 1, "fakepush")
    feed.start()
    sched.items.put_nowait(SUBSCRIBED)
    await sched.next_call()
    new = new_record(store, "fakepush")
    sched.items.put_nowait(Change(new.app_id, AppStatus(state=AppState.RUNNING, msg="pushed")))
    await settle()
    if then == "dropped":
        sched.items.put_nowait(BackendUnavailable("watch lost"))
        await sched.next_open()
        sched.items.put_nowait(SUBSCRIBED)  # a new stream: the first's pushes may be stale
        await sched.next_open()
    else:
        sched.items.put_nowait(Change(new.app_id, NoAnswer("cannot tell")))
    await settle()
    calls = len(sched.calls)
    job = cache.follow(new)
    async with asyncio.timeout(TIMEOUT):
        await feed.refresh([job], wait=False)
    assert sched.calls[calls:][-1] == [new.app_id]
    assert job.status.msg != "pushed"
