"""The status cache: the daemon's only copy of every job's status.

A job is *followed* from submission until nothing about it can change any more: it reached a
terminal state, the backend no longer knows it, or it was deleted. A followed job lives here
with a Pulse that wakes its Wait/Watch callers and log follows the moment its status changes;
every status is written through to the job store, so a job that is no longer followed costs no
memory (10,000 finished jobs live only in SQLite). A status the store cannot take (a full disk)
is kept here instead, served from here, and written with the next write that succeeds. The
feeds (daemon.feeds) are the only writers; clients only read.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from google.protobuf.timestamp_pb2 import Timestamp
from txd.daemon.jobstore import JobRecord, JobStore
from txd.daemon.metrics import Metrics
from txd.schedulers.api import Job, is_terminal
from txd.schedulers.errors import ShuttingDown
from txd.schedulers.pulse import Pulse
from txd.v1 import AppState
from txd.v1.app_pb2 import AppStatus
from txd.v1.runner_pb2 import WatchResponse

log = logging.getLogger(__name__)


class Shown:
    """A status as Watch streams are sent it: a copy of the job's status at one pulse
    generation, made once and shared by every stream of the job (with its WatchResponse
    serialized once, on first use). Nobody changes it: the cache changes its own status in
    place (mark_stale), and makes a new Shown for the next generation."""

    __slots__ = ("_wire", "gen", "status")

    def __init__(self, gen: int, status: AppStatus) -> None:
        self.gen = gen
        self.status = AppStatus()
        self.status.CopyFrom(status)
        self._wire: bytes | None = None

    def wire(self) -> bytes:
        """The serialized WatchResponse carrying the status."""
        if self._wire is None:
            self._wire = WatchResponse(status=self.status).SerializeToString()
        return self._wire


@dataclass(eq=False)
class LiveJob:
    record: JobRecord
    pulse: Pulse = field(default_factory=Pulse)
    followed: bool = True  # False once nothing can change: waiters return, watchers end
    # Changes the backend pushed for this job: a describe that began before one is older than
    # it, and is not applied (the job's status would go back, RUNNING -> PENDING, say).
    pushes: int = 0
    _shown: Shown | None = None  # the latest status shown to Watch streams

    @property
    def status(self) -> AppStatus:
        return self.record.status

    @property
    def job(self) -> Job:
        return self.record.job

    def shown(self) -> Shown:
        """The status as of the pulse's generation, for Watch streams: one copy per change
        for all of them (every writer fires the pulse after changing the status)."""
        shown = self._shown
        if shown is None or shown.gen != self.pulse.gen:
            shown = self._shown = Shown(self.pulse.gen, self.record.status)
        return shown


def now() -> Timestamp:
    ts = Timestamp()
    ts.GetCurrentTime()
    return ts


def unknown(old: AppStatus, msg: str) -> AppStatus:
    """`old` turned UNKNOWN for the reason `msg` (nothing about the job can be learnt any more),
    without stale marks."""
    status = AppStatus()
    status.CopyFrom(old)
    status.ClearField("stale_since")
    status.ClearField("stale_msg")
    status.state = AppState.UNKNOWN
    status.msg = msg
    return status


def _same(a: AppStatus, b: AppStatus) -> bool:
    """Equal apart from what the daemon stamps on (updated, stale marks)."""
    a2, b2 = AppStatus(), AppStatus()
    a2.CopyFrom(a)
    b2.CopyFrom(b)
    for s in (a2, b2):
        s.ClearField("updated")
        s.ClearField("stale_since")
        s.ClearField("stale_msg")
    return a2 == b2


def _same_but_updated(a: AppStatus, b: AppStatus) -> bool:
    b2 = AppStatus()
    b2.CopyFrom(b)
    b2.updated.CopyFrom(a.updated)
    if not a.HasField("updated"):
        b2.ClearField("updated")
    return a == b2


class StatusCache:
    def __init__(self, store: JobStore, metrics: Metrics | None = None) -> None:
        self._store = store
        # Counts state transitions here, and the feeds' backend calls (daemon.feeds).
        self.metrics = metrics or Metrics()
        self._followed: dict[str, LiveJob] = {}  # by handle
        self._by_app: dict[tuple[str, str], LiveJob] = {}  # by (scheduler, app_id)
        self._count: Counter[str] = Counter()  # followed jobs by scheduler
        self._closing = ""  # why waits and watches of followed jobs end now, once set
        self._unsaved: dict[str, JobRecord] = {}  # by handle: statuses the store lacks
        self._flush_due = False  # a write of _unsaved is due at the end of this turn
        self._store_failing = False  # the last write failed (said once, until one succeeds)
        # Told when the store starts and stops failing writes (the read door closes meanwhile:
        # it reads the store, which then lacks statuses this cache holds).
        self.on_store_failing: Callable[[bool], None] | None = None

    def _save(self, rec: JobRecord) -> None:
        """Writes rec's status to the store with every other status changed in this turn of
        the event loop, in one transaction at the turn's end: a commit per change held the
        loop through a burst of exits. Until then, and while a failing store (a full disk)
        cannot take it, lookups and List answer from _unsaved; it is written with the next
        write that succeeds."""
        self._unsaved[rec.handle] = rec
        if self._flush_due:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a tool, a test): at once
            self.flush()
            return
        self._flush_due = True
        loop.call_soon(self._flush_turn)

    def _flush_turn(self) -> None:
        self._flush_due = False
        self.flush()

    def flush(self) -> None:
        """Writes every status the store lacks, in one transaction; keeps them if it fails."""
        if not self._unsaved:
            return
        pending = list(self._unsaved.values())
        try:
            self._store.update_statuses([(r.handle, r.status) for r in pending])
        except sqlite3.Error as e:
            if not self._store_failing:
                log.warning("cannot record %d job statuses for now: %s", len(pending), e)
                self._store_failing = True
                if self.on_store_failing is not None:
                    self.on_store_failing(True)
            return
        if self._store_failing:
            self._store_failing = False
            if self.on_store_failing is not None:
                self.on_store_failing(False)
        for r in pending:
            if self._unsaved.get(r.handle) is r:
                del self._unsaved[r.handle]

    def _saved_before_told(self, handle: str) -> None:
        """The store has the job's status before a reader (Wait, Watch, a log follow's end)
        tells anyone of it: the read door answers Status from the store. A reader woken by the
        change runs after this turn's write; one that found the change already made (it looked
        in the same turn) may run before it, so the write is made now."""
        if handle in self._unsaved:
            self.flush()

    def unsaved(self, handle: str) -> JobRecord | None:
        """The job's record, if the store lacks its latest status."""
        return self._unsaved.get(handle)

    def follow(self, rec: JobRecord) -> LiveJob:
        """Starts following a live job (a new one, or one recorded live before a restart)."""
        job = LiveJob(rec)
        self.fill_identity(rec, rec.status)
        self._followed[rec.handle] = job
        self._by_app[(rec.scheduler, rec.app_id)] = job
        self._count[rec.scheduler] += 1
        return job

    def get(self, handle: str) -> LiveJob | None:
        return self._followed.get(handle)

    def by_app_id(self, scheduler: str, app_id: str) -> LiveJob | None:
        return self._by_app.get((scheduler, app_id))

    def followed(self, scheduler: str) -> list[LiveJob]:
        if not self._count[scheduler]:
            return []
        return [j for j in self._followed.values() if j.record.scheduler == scheduler]

    def any_followed(self, scheduler: str) -> bool:
        return self._count[scheduler] > 0

    def stale_counts(self) -> Counter[str]:
        """Followed jobs whose status is stale, by scheduler (for the metrics)."""
        return Counter(
            j.record.scheduler for j in self._followed.values() if j.status.HasField("stale_since")
        )

    # -- writers (the feeds) ----------------------------------------------------------------

    def record(self, job: LiveJob, status: AppStatus) -> None:
        """Stores the backend's new status if it differs (a terminal status is final), clears
        a stale mark, and wakes everyone waiting on the job."""
        if not job.followed:
            return
        self.fill_identity(job.record, status)
        old = job.record.status
        if _same(old, status):
            if old.HasField("stale_since"):
                old.ClearField("stale_since")
                old.ClearField("stale_msg")
                self._save(job.record)
                job.pulse.fire()
            return
        if old.state != status.state:
            self.metrics.transition(job.record.scheduler, status.state)
        if old.state != status.state or not old.HasField("updated"):
            status.updated.CopyFrom(now())
        else:
            status.updated.CopyFrom(old.updated)
        job.record.status = status
        self._save(job.record)
        if is_terminal(status.state):
            self._unfollow(job)
        job.pulse.fire()

    def forgotten(self, job: LiveJob, scheduler: str) -> None:
        """The backend no longer knows the job: nothing will change, record UNKNOWN."""
        old = job.record.status
        msg = (
            f"{scheduler} no longer knows this job; its last known state was "
            f"{AppState.Name(old.state)}" + (f" ({old.msg})" if old.msg else "")
        )
        self.record(job, unknown(old, msg))
        self._unfollow(job)
        job.pulse.fire()

    def mark_stale(self, jobs: list[LiveJob], scheduler: str, reason: str) -> None:
        """The backend did not answer for these jobs: their statuses may be out of date. The
        first failure's time is kept until the backend answers again; the reason is the
        latest failure's (an outage's cause changes: a dropped stream, then a refused
        connection)."""
        for job in jobs:
            status = job.record.status
            if not job.followed:
                continue
            if not status.HasField("stale_since"):
                status.stale_since.CopyFrom(now())
            since = status.stale_since.ToDatetime(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            msg = f"{scheduler} has not answered since {since}: {reason}"
            if msg == status.stale_msg:
                continue
            status.stale_msg = msg
            self._save(job.record)  # List reads the store
            job.pulse.fire()

    def drop(self, handle: str, msg: str) -> None:
        """The job was deleted: wake anyone still waiting with a final status."""
        job = self._followed.get(handle)
        if job is None:
            return
        final = AppStatus()
        final.CopyFrom(job.status)
        if not is_terminal(final.state):
            final.state = AppState.CANCELLED
            self.metrics.transition(job.record.scheduler, final.state)
        final.msg = msg
        job.record.status = final
        self._unfollow(job)
        job.pulse.fire()

    def close(self, reason: str) -> None:
        """The daemon is stopping: Wait and Watch calls on jobs still followed (jobs that
        outlive the daemon) end now with ShuttingDown(reason), instead of holding the
        server's shutdown for its whole grace period and being cancelled there."""
        self._closing = reason
        for job in self._followed.values():
            job.pulse.fire()

    def _unfollow(self, job: LiveJob) -> None:
        if self._followed.pop(job.record.handle, None) is not None:
            self._by_app.pop((job.record.scheduler, job.record.app_id), None)
            self._count[job.record.scheduler] -= 1
        job.followed = False

    @staticmethod
    def fill_identity(rec: JobRecord, status: AppStatus) -> None:
        status.app_handle = rec.handle
        status.scheduler = rec.scheduler
        status.app_id = rec.app_id
        status.name = rec.app.name
        status.created.FromNanoseconds(int(rec.created * 1e9))

    # -- readers (clients, log follows) -----------------------------------------------------

    async def wait(self, rec: JobRecord) -> AppStatus:
        """The job's status once nothing can change any more."""
        job = self._followed.get(rec.handle)
        while job is not None and job.followed:
            if self._closing:
                raise ShuttingDown(self._closing)
            await job.pulse.wait_past(job.pulse.gen)
        self._saved_before_told(rec.handle)
        return rec.status if job is None else job.status

    async def watch(self, rec: JobRecord) -> AsyncIterator[AppStatus]:
        """The statuses of `watch_shown`. Callers must not change them (they are shared)."""
        async for shown in self.watch_shown(rec):
            yield shown.status

    async def watch_shown(self, rec: JobRecord) -> AsyncIterator[Shown]:
        """The current status, then every change, until nothing can change any more. Each
        status yielded differs from the one before in something besides `updated` (which
        moves only with the state): changes that cancel out between two looks (stale, then
        fresh again) send nothing. What is yielded is shared by every watcher of the job: an
        open stream holds no status of its own, only a reference (25,000 open streams)."""
        job = self._followed.get(rec.handle)
        if job is None:
            self._saved_before_told(rec.handle)
            yield Shown(0, rec.status)
            return
        sent: Shown | None = None
        while True:
            gen = job.pulse.gen
            shown = job.shown()
            ended = not job.followed
            if self._closing and not ended:
                raise ShuttingDown(self._closing)
            if sent is None or (
                shown is not sent and not _same_but_updated(sent.status, shown.status)
            ):
                sent = shown
                self._saved_before_told(rec.handle)
                yield shown
            # Test what was sent: the job may have ended during the yield.
            if ended:
                return
            await job.pulse.wait_past(gen)

    async def until_ended(self, handle: str) -> None:
        """Returns once the job is no longer followed (terminal, forgotten or deleted); raises
        ShuttingDown when the daemon stops first (a log follow then ends at once)."""
        job = self._followed.get(handle)
        while job is not None and job.followed:
            if self._closing:
                raise ShuttingDown(self._closing)
            await job.pulse.wait_past(job.pulse.gen)
        self._saved_before_told(handle)
