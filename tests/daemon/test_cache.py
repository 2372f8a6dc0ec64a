"""StatusCache (daemon/cache.py): the daemon's only copy of job statuses, written through to a
real job store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from daemon_fakes import TIMEOUT, new_record
from txd.daemon.cache import LiveJob, StatusCache
from txd.daemon.jobstore import JobRecord, JobStore
from txd.schedulers.errors import BackendUnavailable
from txd.v1 import AppState, AppStatus
from txd.v1.runner_pb2 import WatchResponse


def st(state: AppState.ValueType, msg: str = "") -> AppStatus:
    return AppStatus(state=state, msg=msg)


async def stored(store: JobStore, rec: JobRecord) -> AppStatus:
    """The job's status in the store, once this turn's statuses are written (its end)."""
    await asyncio.sleep(0)
    got = store.get(rec.handle)
    assert got is not None
    return got.status


async def collect(it: AsyncIterator[AppStatus]) -> list[AppStatus]:
    async with asyncio.timeout(TIMEOUT):
        return [s async for s in it]


def follow(cache: StatusCache, store: JobStore) -> tuple[JobRecord, LiveJob]:
    rec = new_record(store)
    return rec, cache.follow(rec)


async def test_record_stores_writes_through_and_wakes_watchers(
    cache: StatusCache, store: JobStore
) -> None:
    rec, job = follow(cache, store)
    watch = cache.watch(rec)
    assert (await anext(watch)).state == AppState.SUBMITTED
    cache.record(job, st(AppState.RUNNING))
    async with asyncio.timeout(TIMEOUT):
        now = await anext(watch)
    assert now.state == AppState.RUNNING
    assert now.app_handle == rec.handle and now.app_id == rec.app_id and now.scheduler == "fake"
    assert (await stored(store, rec)).state == AppState.RUNNING
    await watch.aclose()


async def test_watch_never_sends_the_same_status_twice(cache: StatusCache, store: JobStore) -> None:
    rec, job = follow(cache, store)
    cache.record(job, st(AppState.RUNNING, "up"))
    watch = cache.watch(rec)
    first = await anext(watch)
    assert (first.state, first.msg) == (AppState.RUNNING, "up")
    # The backend missed a poll and answered again before the watcher looked: what it would
    # send now is what it sent.
    cache.mark_stale([job], "fake", "down")
    cache.record(job, st(AppState.RUNNING, "up"))
    nxt = asyncio.ensure_future(anext(watch))
    done, _ = await asyncio.wait([nxt], timeout=1)  # virtual time: passes once the loop idles
    assert not done
    cache.record(job, st(AppState.SUCCEEDED))
    async with asyncio.timeout(TIMEOUT):
        assert (await nxt).state == AppState.SUCCEEDED
    assert await collect(watch) == []


async def test_an_identical_status_wakes_nobody(cache: StatusCache, store: JobStore) -> None:
    _, job = follow(cache, store)
    cache.record(job, st(AppState.RUNNING, "up"))
    gen, updated = job.pulse.gen, AppStatus().updated
    updated.CopyFrom(job.status.updated)
    cache.record(job, st(AppState.RUNNING, "up"))
    assert job.pulse.gen == gen
    assert job.status.updated == updated
    cache.record(job, st(AppState.RUNNING, "other message"))
    assert job.pulse.gen == gen + 1


async def test_a_terminal_status_is_final(cache: StatusCache, store: JobStore) -> None:
    rec, job = follow(cache, store)
    cache.record(job, st(AppState.SUCCEEDED))
    assert not job.followed and cache.get(rec.handle) is None
    assert cache.by_app_id("fake", rec.app_id) is None and cache.followed("fake") == []
    cache.record(job, st(AppState.RUNNING))
    assert job.status.state == AppState.SUCCEEDED
    assert (await stored(store, rec)).state == AppState.SUCCEEDED


async def test_forgotten_is_unknown_with_the_last_state(
    cache: StatusCache, store: JobStore
) -> None:
    rec, job = follow(cache, store)
    cache.record(job, st(AppState.RUNNING, "on node 3"))
    waiter = asyncio.create_task(cache.wait(rec))
    cache.forgotten(job, "fake")
    async with asyncio.timeout(TIMEOUT):
        final = await waiter
    assert final.state == AppState.UNKNOWN
    assert final.msg == (
        "fake no longer knows this job; its last known state was RUNNING (on node 3)"
    )
    assert not job.followed and cache.get(rec.handle) is None
    assert (await stored(store, rec)).state == AppState.UNKNOWN


async def test_mark_stale_keeps_the_first_failures_time_and_the_latest_reason(
    cache: StatusCache, store: JobStore
) -> None:
    rec, job = follow(cache, store)
    cache.record(job, st(AppState.RUNNING))
    gen = job.pulse.gen
    cache.mark_stale([job], "fake", "login node down")
    assert job.pulse.gen == gen + 1
    first = AppStatus()
    first.CopyFrom(job.status)
    assert first.HasField("stale_since")
    assert first.stale_msg.startswith("fake has not answered since ")
    assert first.stale_msg.endswith(": login node down")
    assert (await stored(store, rec)).stale_since == first.stale_since  # List reads the store

    cache.mark_stale([job], "fake", "login node down")  # the same failure again: no change
    assert job.pulse.gen == gen + 1
    assert job.status.stale_msg == first.stale_msg

    cache.mark_stale([job], "fake", "connection refused")  # the cause changed: said at once
    assert job.pulse.gen == gen + 2
    assert job.status.stale_since == first.stale_since  # since the outage began
    assert job.status.stale_msg == first.stale_msg.replace("login node down", "connection refused")
    assert (await stored(store, rec)).stale_msg == job.status.stale_msg

    watch = cache.watch(rec)
    assert (await anext(watch)).HasField("stale_since")
    cache.record(job, st(AppState.RUNNING))  # the same answer, at last
    async with asyncio.timeout(TIMEOUT):
        now = await anext(watch)
    assert not now.HasField("stale_since") and now.stale_msg == ""
    assert not (await stored(store, rec)).HasField("stale_since")
    await watch.aclose()


async def test_drop_wakes_waiters_with_cancelled(cache: StatusCache, store: JobStore) -> None:
    rec, job = follow(cache, store)
    cache.record(job, st(AppState.RUNNING))
    waiter = asyncio.create_task(cache.wait(rec))
    watched = asyncio.create_task(collect(cache.watch(rec)))
    await asyncio.sleep(0)  # both are waiting now
    cache.drop(rec.handle, "deleted")
    async with asyncio.timeout(TIMEOUT):
        final = await waiter
        seen = await watched
    assert (final.state, final.msg) == (AppState.CANCELLED, "deleted")
    assert [(s.state, s.msg) for s in seen] == [
        (AppState.RUNNING, ""),
        (AppState.CANCELLED, "deleted"),
    ]
    assert cache.get(rec.handle) is None


async def test_watch_yields_the_current_status_then_changes_until_terminal(
    cache: StatusCache, store: JobStore
) -> None:
    rec, job = follow(cache, store)
    watch = cache.watch(rec)
    seen = [(await anext(watch)).state]
    for state in (AppState.PENDING, AppState.RUNNING, AppState.FAILED):
        cache.record(job, st(state))
        async with asyncio.timeout(TIMEOUT):
            seen.append((await anext(watch)).state)
    assert seen == [AppState.SUBMITTED, AppState.PENDING, AppState.RUNNING, AppState.FAILED]
    with pytest.raises(StopAsyncIteration):  # ended after the terminal status
        await anext(watch)
    # A job no longer followed: its stored status, once.
    assert [s.state for s in await collect(cache.watch(rec))] == [AppState.FAILED]


async def test_watchers_of_a_job_share_what_they_are_sent(
    cache: StatusCache, store: JobStore
) -> None:
    """An open Watch stream holds no status of its own: every watcher of a job is sent the
    same copy, serialized once (25,000 streams cost the daemon 26 KB each when each held a
    copy and a response of its own)."""
    rec, job = follow(cache, store)
    cache.record(job, st(AppState.RUNNING, "up"))
    watches = [cache.watch_shown(rec) for _ in range(3)]
    firsts = [await anext(w) for w in watches]
    assert all(f is firsts[0] for f in firsts)
    wire = firsts[0].wire()
    assert all(f.wire() is wire for f in firsts)
    assert WatchResponse.FromString(wire).status == job.status
    cache.mark_stale([job], "fake", "down")  # changes the cached status in place
    async with asyncio.timeout(TIMEOUT):
        nexts = [await anext(w) for w in watches]
    assert all(n is nexts[0] for n in nexts) and nexts[0] is not firsts[0]
    assert nexts[0].status.HasField("stale_since")
    assert not firsts[0].status.HasField("stale_since")  # what was sent stays as sent
    assert WatchResponse.FromString(nexts[0].wire()).status == job.status
    for w in watches:
        await w.aclose()


async def test_wait_returns_the_final_status(cache: StatusCache, store: JobStore) -> None:
    rec, job = follow(cache, store)
    waiters = [asyncio.create_task(cache.wait(rec)) for _ in range(5)]
    await asyncio.sleep(0)
    cache.record(job, st(AppState.RUNNING))
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    cache.record(job, st(AppState.CANCELLED, "by request"))
    async with asyncio.timeout(TIMEOUT):
        finals = await asyncio.gather(*waiters)
    assert {(f.state, f.msg) for f in finals} == {(AppState.CANCELLED, "by request")}


async def test_until_ended_returns_once_the_job_is_not_followed(
    cache: StatusCache, store: JobStore
) -> None:
    rec, job = follow(cache, store)
    ended = asyncio.create_task(cache.until_ended(rec.handle))
    cache.record(job, st(AppState.RUNNING))
    await asyncio.sleep(0)
    assert not ended.done()
    cache.record(job, st(AppState.SUCCEEDED))
    async with asyncio.timeout(TIMEOUT):
        await ended


async def test_readers_in_the_turn_of_a_change_find_it_in_the_store(
    cache: StatusCache, store: JobStore
) -> None:
    """Wait, Watch and a log follow's end tell a status only once the store has it (the read
    door answers Status from the store), also when they look in the same turn of the event
    loop as the change, before that turn's write: no await between the change and the look."""

    def in_store(rec: JobRecord) -> AppState.ValueType:
        got = store.get(rec.handle)
        assert got is not None
        return got.status.state

    rec, job = follow(cache, store)
    cache.record(job, st(AppState.SUCCEEDED))
    assert (await cache.wait(rec)).state == AppState.SUCCEEDED
    assert in_store(rec) == AppState.SUCCEEDED

    rec, job = follow(cache, store)
    cache.record(job, st(AppState.FAILED))
    await cache.until_ended(rec.handle)
    assert in_store(rec) == AppState.FAILED

    rec, job = follow(cache, store)
    cache.record(job, st(AppState.RUNNING))
    watch = cache.watch(rec)
    assert (await anext(watch)).state == AppState.RUNNING
    assert in_store(rec) == AppState.RUNNING
    await watch.aclose()


async def test_close_ends_waits_and_watches_of_followed_jobs(
    cache: StatusCache, store: JobStore
) -> None:
    rec, _ = follow(cache, store)
    done_rec, done_job = follow(cache, store)
    cache.record(done_job, st(AppState.SUCCEEDED))
    waiter = asyncio.create_task(cache.wait(rec))
    watch = cache.watch(rec)
    assert (await anext(watch)).state == AppState.SUBMITTED
    cache.close("txd is shutting down")
    with pytest.raises(BackendUnavailable, match="shutting down"):
        async with asyncio.timeout(TIMEOUT):
            await waiter
    with pytest.raises(BackendUnavailable, match="shutting down"):
        await anext(watch)
    # A job that has ended still answers.
    assert (await cache.wait(done_rec)).state == AppState.SUCCEEDED


async def test_the_statuses_of_a_turn_are_written_in_one_transaction(
    cache: StatusCache, store: JobStore
) -> None:
    """A burst of 50 exits in one turn of the loop: one commit, not 50 (each held the loop);
    meanwhile lookups answer from memory."""
    jobs = [follow(cache, store) for _ in range(50)]
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    for _, job in jobs:
        cache.record(job, st(AppState.SUCCEEDED))
    assert all(cache.unsaved(rec.handle) is rec for rec, _ in jobs)
    for rec, _ in jobs:
        assert (await stored(store, rec)).state == AppState.SUCCEEDED
    store._db.set_trace_callback(None)
    writes = [s.split()[0] for s in statements if not s.startswith("SELECT")]
    # Each status with its event (daemon.events), in the same transaction.
    assert writes == ["BEGIN", *["UPDATE", "INSERT"] * 50, "COMMIT"]
    assert all(cache.unsaved(rec.handle) is None for rec, _ in jobs)
