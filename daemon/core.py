"""The job service: runs jobs on schedulers, records them, and answers for them.

Plain asyncio, no gRPC: the servicer adapts requests to these methods and maps TxdError to
status codes. It composes the job store (every job, durable), the status cache (the followed
jobs' statuses, fed by one status feed per scheduler) and the scheduler instances.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import os
import sqlite3
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from txd.daemon import config, exposition, handles, logs, submission, validate
from txd.daemon.backends import Backends, SettingsError
from txd.daemon.cache import Shown, StatusCache, unknown
from txd.daemon.events import EventHub, EventSettings, EventSettingsError
from txd.daemon.jobstore import JobRecord, JobStore, NativeRequest
from txd.daemon.listing import ListQuery
from txd.daemon.metrics import Metrics, MetricsSettings
from txd.daemon.pacing import Pacer
from txd.daemon.tasks import Tasks
from txd.handle import Handle
from txd.schedulers import options, plugins
from txd.schedulers.api import DryRunInfo, Job, Scheduler, SubmitContext, Submitted, num_replicas
from txd.schedulers.errors import (
    AlreadyExists,
    BackendUnavailable,
    InvalidArgument,
    ShuttingDown,
    TxdError,
    Unsupported,
)
from txd.schedulers.plugins import DEFAULT_SCHEDULER
from txd.schedulers.workspace.files import check_dir
from txd.v1 import TERMINAL_STATES, AppState
from txd.v1.app_pb2 import AppDef, AppStatus
from txd.v1.runner_pb2 import ListRequest, LogsRequest, LogsResponse, PruneRequest, RunRequest
from txd.v1.scheduler_pb2 import CfgValue, RunOpt, SchedulerInfo

log = logging.getLogger(__name__)

# A backend that hands out an app id the store already holds (Slurm job ids after slurmctld
# lost its state, or wrapped around) gets `<id>.2`, `<id>.3` ...: handles are never reused.
MAX_ID_SUFFIX = 1000
# An ambiguous short id names this many of the jobs it matches.
# The most jobs one Prune call removes (its response lists them all).
PRUNE_BATCH = 1000
# DryRun's native request is cut to this many characters: with one entry per replica it can
# outgrow the response limit (txd.defaults.MAX_RESPONSE_BYTES, 64 MiB) even for a valid app.
MAX_DRYRUN_TEXT = 8 << 20
# Describe's word for a job recorded without its native request.
NO_NATIVE_REQUEST = (
    "txd kept no native request for this job: it was submitted by a txd that did not keep "
    "them yet, or it could not be kept (its scheduler could not render it, the job store "
    "could not take it, or the daemon stopped first; the daemon's log says which)"
)
# The native request of an app of at most this many replicas is rendered on the loop (about
# 0.2 ms a replica for local_cwd's table, the slowest), of a bigger one in a thread.
RENDER_INLINE_REPLICAS = 16
# Submissions that start their work in one turn of the event loop (daemon.pacing): a wave of
# Runs goes through a few at a time, every other call answered between them.
SUBMITS_PER_TURN = 4


class JobService:
    """The job service over its collaborators, which it owns from then on (aclose closes
    them): the job store, the status cache over it, the schedulers (Backends), and the
    daemon's task group, where submissions run (see open())."""

    def __init__(
        self,
        session: str,
        store: JobStore,
        cache: StatusCache,
        schedulers: Backends,
        tasks: Tasks,
        events: EventSettings | None = None,
        metrics: MetricsSettings | None = None,
    ) -> None:
        self.session = session
        self.default_scheduler = DEFAULT_SCHEDULER
        self.store = store
        self.cache = cache
        self.schedulers = schedulers
        self.tasks = tasks
        self.closing = False
        self.started = False  # start() settled the jobs recorded as live
        self._pending_runs: dict[str, asyncio.Future[JobRecord]] = {}  # by request id
        self._submitting: set[asyncio.Future[JobRecord]] = set()
        self._pacer = Pacer(SUBMITS_PER_TURN)
        self.events = EventHub(store, events or EventSettings())
        self.metrics: Metrics = cache.metrics
        self.metrics.bind(self)
        self.metrics_settings = metrics or MetricsSettings()

    @classmethod
    def open(
        cls,
        state_dir: Path,
        session: str,
        settings: dict[str, dict[str, Any]] | None = None,
        *,
        tasks: Tasks,
        entries: dict[str, plugins.Entry] | None = None,
    ) -> JobService:
        """The job service of a state dir: its job store (jobs.db), a status cache over it,
        and the schedulers with their `settings`."""
        settings = dict(settings or {})
        try:
            events = EventSettings.parse(settings.pop(config.EVENTS, {}))
            metrics = MetricsSettings.parse(settings.pop(config.METRICS, {}))
        except (EventSettingsError, ValueError) as e:
            raise SettingsError(str(e)) from None
        store = JobStore.in_state_dir(state_dir)
        try:
            cache = StatusCache(store, Metrics())
            backends = Backends(session, state_dir, settings, cache, tasks, entries)
        except BaseException:
            store.close()
            raise
        return cls(session, store, cache, backends, tasks, events, metrics)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, moved_from: str | None = None) -> None:
        """Follows again every job recorded as live (after a restart or a crash): its scheduler
        first settles what it can (`recover`), then its status feed takes over. `moved_from`:
        the other host whose daemon served the state dir before this one (daemon.serving);
        jobs of a scheduler whose jobs live on the daemon's host (local_cwd) ran there, so
        they are recorded as lost (FAILED, as local_cwd records a job a crash left unknown),
        never looked for (or stopped) here by their pids, which are another host's."""
        await self.schedulers.check_settings()
        by_scheduler: dict[str, list[JobRecord]] = defaultdict(list)
        for rec in self.store.live():
            by_scheduler[rec.scheduler].append(rec)
        for name, recs in by_scheduler.items():
            try:
                sched = await self.schedulers.get(name)
                if moved_from is not None and sched.jobs_live_on_host:
                    why = (
                        f"lost: the job ran on host {moved_from}, whose txd stopped without "
                        "ending it; the state dir was taken over from this host, which cannot "
                        "reach the job: its outcome is unknown (look on that host)"
                    )
                    self.store.update_statuses([(r.handle, _lost(r.status, why)) for r in recs])
                    for _ in recs:
                        self.metrics.transition(name, AppState.FAILED)
                    log.warning("%d %s job(s) of host %s lost", len(recs), name, moved_from)
                    continue
                settled = await sched.recover([(r.job, r.status) for r in recs])
            except TxdError as e:
                for rec in recs:
                    lost = unknown(rec.status, f"cannot follow the job after a restart: {e}")
                    self.store.update_status(rec.handle, lost)
                    self.metrics.transition(name, AppState.UNKNOWN)
                continue
            for rec in recs:
                job = self.cache.follow(rec)
                if (status := settled.get(rec.app_id)) is not None:
                    self.cache.record(job, status)
                log.info("following %s again: %s", rec.handle, AppState.Name(job.status.state))
            if self.cache.followed(name):
                self.schedulers.feed(name).start()
        self.tasks.create_task(self.events.upkeep(), name="events upkeep")
        await exposition.start(self.metrics, self.metrics_settings, self.tasks)
        self.started = True

    async def shutdown(self, grace: float) -> None:
        """Stops accepting runs, ends local jobs (SIGKILL after `grace` seconds) and records
        them, which wakes their waiters with the final status; ends the waits and watches of
        jobs that outlive the daemon; then stops the status feeds.
        Never raises for a backend's sake."""
        self.closing = True
        if self._submitting:  # submissions under way end recorded, then stopped with the rest
            await asyncio.wait(self._submitting, timeout=grace)
        await self.schedulers.shutdown(grace)
        self.cache.close("txd is shutting down; the job goes on without it")
        self.events.close("txd is shutting down; resume from the last cursor received")
        await self.schedulers.stop_feeds()

    async def aclose(self) -> None:
        """Closes schedulers (in reverse order of creation) and the job store."""
        await self.schedulers.aclose()
        self.cache.flush()  # the statuses of the last turn, written at its end otherwise
        self.store.close()

    # -- metrics (daemon.metrics.Sources) ---------------------------------------------------

    def job_counts(self) -> builtins.list[tuple[str, int, int]]:
        return self.store.counts()

    def stale_counts(self) -> builtins.list[tuple[str, int]]:
        return sorted(self.cache.stale_counts().items())

    def events_committed(self) -> int:
        return self.events.committed_count

    def event_subscribers(self) -> int:
        return self.events.subscribers

    @contextlib.contextmanager
    def _backend(self, scheduler: str, op: str) -> Iterator[None]:
        """A backend operation: counted (and its failure) in the metrics, and its scheduler
        named as the backend of a BackendUnavailable (backend_calls)."""
        with self.metrics.backend(scheduler, op), backend_calls(scheduler):
            yield

    # -- schedulers -------------------------------------------------------------------------

    async def scheduler_infos(self, *, check: bool = False) -> list[SchedulerInfo]:
        return await self.schedulers.infos(check=check)

    async def run_opts(self, name: str) -> list[RunOpt]:
        validate.check_scheduler("scheduler", name)
        name = name or self.default_scheduler
        with self._backend(name, "run_opts"):
            return (await self.schedulers.get(name)).run_opts()

    # -- submission -------------------------------------------------------------------------

    async def dryrun(self, req: RunRequest) -> tuple[AppDef, str, str, str]:
        """(the app as it would be submitted, the scheduler, the native request, what would be
        done with the workspace); nothing is submitted, built or copied."""
        with self._backend(req.scheduler or self.default_scheduler, "dryrun"):
            name, sched, app, ctx = await self._prepare(req)
            info = await sched.submit_dryrun(app, req.cfg, ctx)
        return info.app, name, cut_text(info.text), info.workspace

    async def run(self, req: RunRequest) -> tuple[str, str]:
        """Submits and records a job; returns (handle, app_id). Idempotent per request_id: the
        same request again returns the same job; another request with that id is refused."""
        if self.closing:
            raise ShuttingDown("txd is shutting down; no new jobs are accepted")
        rid = req.request_id
        if rid:
            validate.check_request_id(rid)
            if rid in self._pending_runs:  # being submitted right now: its outcome
                rec: JobRecord | None = await asyncio.shield(self._pending_runs[rid])
            else:
                rec = self.store.by_request_id(rid)
            if rec is not None:
                await self._check_same_request(rec, req)
                return rec.handle, rec.app_id
        new = await asyncio.shield(self._start_submit(req))
        return new.handle, new.app_id

    def _start_submit(self, req: RunRequest) -> asyncio.Future[JobRecord]:
        """The submission, as a task of its own: a caller that gives up (a client's deadline
        cancels its Run) does not stop it between spawning a job and recording it; it ends
        recorded and followed, or undone. Until then a Run with its request id waits for it."""
        name = f"submission {req.request_id or req.app.name!r}"
        task = self.tasks.create_awaited(self._submit(req), name=name)
        self._submitting.add(task)
        task.add_done_callback(self._submitting.discard)
        if rid := req.request_id:
            self._pending_runs[rid] = task
            task.add_done_callback(lambda _: self._pending_runs.pop(rid, None))
        return task

    async def _check_same_request(self, rec: JobRecord, req: RunRequest) -> None:
        """Refuses a Run whose request id names a job submitted otherwise: every field of the
        request that defines the job must match (see txd.daemon.submission)."""
        name, sched, app, _ = await self._prepare(req)
        if name != rec.scheduler:
            differ = ["scheduler"]
        else:
            recorded = rec.app
            if req.workspace and sched.capabilities.workspace:
                # The record has the image built from the workspace, not the request's.
                app, recorded = _without_images(app), _without_images(rec.app)
            differ = ["app"] if app != recorded else []
            if rec.submission is not None:
                differ += submission.differing(rec.submission, req)
            else:  # recorded before the digests were kept: what its record holds
                resolved = options.as_cfg(options.resolve(sched.Opts, req.cfg))
                differ += submission.differing_legacy(rec.cfg, resolved, req)
        if differ:
            raise AlreadyExists(
                f"request id {req.request_id!r} belongs to job {rec.handle}, submitted with "
                f"another {submission.said(differ)}; use a new request id for a new job"
            )

    async def _prepare(
        self, req: RunRequest
    ) -> tuple[str, Scheduler[Any, Any], AppDef, SubmitContext]:
        validate.check_scheduler("scheduler", req.scheduler)
        name = req.scheduler or self.default_scheduler
        sched = await self.schedulers.get(name)
        app = validate.normalize_app(req.app)
        validate.check_text("cwd", req.cwd)
        validate.check_text("workspace", req.workspace)
        validate.check_env("env", req.env)
        validate.check_cfg(req.cfg)
        cwd = req.cwd or os.getcwd()
        if not os.path.isdir(cwd):
            raise InvalidArgument("cwd", f"{cwd!r} is not an existing directory")
        env = dict(req.env) if req.env else dict(os.environ)
        workspace = os.path.normpath(os.path.join(cwd, req.workspace)) if req.workspace else ""
        if workspace:
            check_dir(workspace)
        handle_template = str(Handle(name, self.session, "${app_id}"))
        for role in app.roles:
            role.env.setdefault("TORCHX_JOB_ID", handle_template)
        return name, sched, app, SubmitContext(cwd=cwd, env=env, workspace=workspace)

    async def _submit(self, req: RunRequest) -> JobRecord:
        await self._pacer.turn()
        rid = req.request_id or None
        digests = submission.digests(req) if rid else None
        with self._backend(req.scheduler or self.default_scheduler, "submit"):
            name, sched, app, ctx = await self._prepare(req)
            info = await sched.submit_dryrun(app, req.cfg, ctx, build_workspace=True)
            cfg = {k: options.from_cfg_value(v) for k, v in options.as_cfg(info.opts).items()}
            early = None
            if info.app_id:
                # Recorded before it runs: a daemon killed during schedule() leaves a live
                # record, which the next one settles (recover) and a retried Run finds.
                early = self._insert(
                    name, info.app, cfg, Submitted(info.app_id, info.native), rid, digests
                )
            try:
                submitted = await sched.schedule(info)
            except Exception:
                if early is not None:  # schedule() left nothing running
                    self._forget(early)
                raise
        if early is not None:
            early.native = submitted.native
            try:
                self.store.update_native(early.handle, submitted.native)
            except sqlite3.Error as e:  # the job runs: the early record still finds it
                log.warning("could not record the native facts of %s: %s", early.handle, e)
            rec = early
        else:
            try:
                rec = self._insert(name, info.app, cfg, submitted, rid, digests)
            except Exception:
                log.exception("could not record the job %s submitted; cancelling it", submitted)
                await _undo(sched, Job(submitted.app_id, submitted.native))
                raise
        job = self.cache.follow(rec)
        # Statuses reported while schedule() ran found no followed job: look now. A polled
        # scheduler is only nudged: its next poll, batched with every other job's, tells.
        await self.schedulers.feed(name).refresh([job], wait=False)
        await self._keep_native_request(rec, info)
        return rec

    async def _keep_native_request(self, rec: JobRecord, info: DryRunInfo[Any]) -> None:
        """Keeps the job's native request, rendered once submitted: schedule() completes what
        it submits (Slurm's and LSF's checks before queueing, LSF's rank-0 host), which DryRun
        renders as it would be. After the job is recorded, so rendering widens no window in
        which a crash loses a job that runs. A big app is rendered in a thread (10,000
        local_cwd replicas take about 2 s, which the loop must not wait out), a small one at
        once, where the thread's hop costs more than the rendering."""
        if sum(num_replicas(r) for r in info.app.roles) <= RENDER_INLINE_REPLICAS:
            native_request = _rendered(info, rec.scheduler)
        else:
            native_request = await asyncio.to_thread(_rendered, info, rec.scheduler)
        if native_request is None:
            return
        try:
            self.store.put_native_request(rec.handle, native_request)
        except sqlite3.Error as e:  # the job is recorded and runs: only its request is lost
            log.warning("could not keep the native request of %s: %s", rec.handle, e)

    def _forget(self, rec: JobRecord) -> None:
        """Removes the record of a job that never ran; one the store cannot remove now (a full
        disk) is settled by recover() at the next start, as if the daemon had died."""
        try:
            self.store.delete(rec.handle)
        except sqlite3.Error as e:
            log.warning("could not remove the record of %s, which never ran: %s", rec.handle, e)

    def _insert(
        self,
        name: str,
        app: AppDef,
        cfg: dict[str, Any],
        submitted: Submitted,
        request_id: str | None,
        digests: dict[str, str] | None = None,
    ) -> JobRecord:
        """Records the job under a handle no job ever had (never overwriting a record)."""
        app_id = submitted.app_id
        for n in range(2, MAX_ID_SUFFIX + 2):
            rec = JobRecord(
                handle=str(Handle(name, self.session, app_id)),
                scheduler=name,
                app_id=app_id,
                created=time.time(),
                app=app,
                status=AppStatus(state=AppState.SUBMITTED),
                cfg=cfg,
                native=submitted.native,
                request_id=request_id,
                submission=digests,
            )
            StatusCache.fill_identity(rec, rec.status)  # as List shows it until it changes
            try:
                self.store.insert(rec)
                self.cache.flush()  # the store takes writes: those it could not take too
                self.metrics.transition(name, rec.status.state)
                return rec
            except sqlite3.IntegrityError:
                if self.store.get(rec.handle) is None:
                    raise  # not the handle: a request id recorded meanwhile
                log.warning("%s already names another job; recording as %s.%d", app_id, app_id, n)
                app_id = f"{submitted.app_id}.{n}"
        raise InvalidArgument("app_id", f"{submitted.app_id!r} was used too often")

    # -- status -----------------------------------------------------------------------------

    def resolve(self, text: str) -> str:
        """The handle of the job `text` names (daemon.handles.resolve)."""
        return handles.resolve(text, self.store)

    def lookup(self, text: str) -> JobRecord:
        """The job `text` names (see resolve): the status cache's record, else the store's."""
        handle = self.resolve(text)
        if (job := self.cache.get(handle)) is not None:
            return job.record
        if (unsaved := self.cache.unsaved(handle)) is not None:
            return unsaved
        return handles.stored(handle, self.store)

    def native_request(self, rec: JobRecord) -> str | None:
        """The job's native request as recorded at submit time, cut as DryRun cuts it; None for
        a job recorded without one."""
        text = self.store.native_request(rec.handle)
        return None if text is None else cut_text(text)

    def status(self, handle: str) -> AppStatus:
        return self.lookup(handle).status

    async def wait(self, handle: str) -> AppStatus:
        return await self.cache.wait(self.lookup(handle))

    def watch(self, handle: str) -> AsyncIterator[Shown]:
        return self.cache.watch_shown(self.lookup(handle))

    async def list(self, req: ListRequest) -> tuple[list[AppStatus], str]:
        """One page of jobs, newest first, and the next page's token ("" after the last)."""
        query = ListQuery.parse(req, self.store.page_token_key)
        scheduler = req.scheduler
        validate.check_scheduler("scheduler", scheduler)
        if scheduler:
            self.schedulers.check(scheduler)
        if not req.backend:
            statuses, token = query.from_store(self.store)
            return [self._latest(s) for s in statuses], token
        if not scheduler:
            raise InvalidArgument("scheduler", "listing from the backend needs a scheduler")
        with self._backend(scheduler, "list"):
            sched = await self.schedulers.get(scheduler)
            if not sched.capabilities.list:
                raise Unsupported(f"{scheduler} cannot list jobs")
            apps = await sched.list()
        for status in apps:
            status.scheduler = scheduler
            status.app_handle = str(Handle(scheduler, self.session, status.app_id))
        return query.from_statuses(apps)

    def _latest(self, status: AppStatus) -> AppStatus:
        """The job's latest status: the store's, unless it could not take the latest."""
        unsaved = self.cache.unsaved(status.app_handle)
        return unsaved.status if unsaved is not None else status

    # -- control ----------------------------------------------------------------------------

    async def cancel(self, handle: str) -> AppStatus:
        rec = self.lookup(handle)
        job = self.cache.get(rec.handle)
        if job is None:  # nothing can change any more
            return rec.status
        with self._backend(rec.scheduler, "cancel"):
            sched = await self.schedulers.get(rec.scheduler)
            if not sched.capabilities.cancel:
                raise Unsupported(f"{rec.scheduler} cannot cancel jobs")
            self.store.ensure_ours()  # a daemon taken over cancels nothing
            await sched.cancel(job.job)
            await self.schedulers.feed(rec.scheduler).refresh([job])
        return job.status

    async def delete(self, handle: str) -> None:
        rec = self.lookup(handle)
        self.store.ensure_ours()  # a daemon taken over deletes nothing, in its backend either
        await self._delete_in_backend(rec)
        self.store.delete(rec.handle)

    async def prune(
        self, req: PruneRequest
    ) -> tuple[builtins.list[AppStatus], dict[str, str], bool]:
        """Deletes up to PRUNE_BATCH terminal jobs created before req.created_before, oldest
        first, as delete() does; returns (the statuses of those removed, {handle: why} of those
        kept because their scheduler failed, whether more match). The job store rows go in one
        transaction, after every backend had its say."""
        if not req.HasField("created_before"):
            raise InvalidArgument("created_before", "required: prune jobs created before when?")
        validate.check_timestamp("created_before", req.created_before)
        validate.check_scheduler("scheduler", req.scheduler)
        if req.scheduler:
            self.schedulers.check(req.scheduler)
        recs = self.store.finished_before(
            req.created_before.ToNanoseconds(), PRUNE_BATCH + 1, scheduler=req.scheduler
        )
        more = len(recs) > PRUNE_BATCH
        # Terminal in the store means the cache follows it no more; checked all the same.
        recs = [r for r in recs[:PRUNE_BATCH] if self.cache.get(r.handle) is None]
        if req.dry_run:
            return [r.status for r in recs], {}, more
        removed: builtins.list[JobRecord] = []
        failed: dict[str, str] = {}
        self.store.ensure_ours()
        for rec in recs:
            try:
                await self._delete_in_backend(rec)
            except TxdError as e:
                failed[rec.handle] = str(e)
            else:
                removed.append(rec)
        self.store.delete_many(r.handle for r in removed)
        log.info("pruned %d jobs (%d kept: their scheduler failed)", len(removed), len(failed))
        return [r.status for r in removed], failed, more

    async def _delete_in_backend(self, rec: JobRecord) -> None:
        """What Delete does before forgetting the job: the scheduler cancels it if live and
        removes what it keeps (local logs included); waiters get a final status."""
        with self._backend(rec.scheduler, "delete"):
            await (await self.schedulers.get(rec.scheduler)).delete(rec.job)
        self.cache.drop(rec.handle, "deleted")

    # -- logs -------------------------------------------------------------------------------

    async def logs(self, req: LogsRequest) -> AsyncIterator[LogsResponse]:
        logs.check(req)
        rec = self.lookup(req.app_handle)
        with self._backend(rec.scheduler, "logs"):
            sched = await self.schedulers.get(rec.scheduler)

            async def ended() -> None:
                await self.cache.until_ended(rec.handle)

            async for msg in logs.read(sched, rec.job, rec.app, req, ended):
                yield msg


def _rendered(info: DryRunInfo[Any], scheduler: str) -> NativeRequest | None:
    """The native request as DryRun would show it, compressed for the store; None, logged, if
    the scheduler cannot render it: the job is submitted all the same, without it."""
    try:
        return NativeRequest.of(info.text)
    except Exception:
        log.exception("could not render the %s request of %s to keep it", scheduler, info.app.name)
        return None


def cut_text(text: str, limit: int = MAX_DRYRUN_TEXT) -> str:
    """text, or its first `limit` characters and a line saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n... ({len(text) - limit} more characters not shown)"


def _without_images(app: AppDef) -> AppDef:
    out = AppDef()
    out.CopyFrom(app)
    for role in out.roles:
        role.image = ""
    return out


@contextlib.contextmanager
def backend_calls(scheduler: str) -> Iterator[None]:
    """Names `scheduler` as the backend of a BackendUnavailable raised inside (not the
    daemon's own ShuttingDown): the client then reports the backend, not the daemon, as down."""
    try:
        yield
    except BackendUnavailable as e:
        if not isinstance(e, ShuttingDown) and not e.backend:
            e.backend = scheduler
        raise


async def _undo(sched: Scheduler[Any, Any], job: Job) -> None:
    """Cancels a submission that could not be recorded; its error must not hide the first."""
    try:
        await sched.delete(job)
    except Exception:
        log.exception("could not cancel %s either: it may still run", job.app_id)


def cfg_values(cfg: dict[str, Any]) -> dict[str, CfgValue]:
    return {k: options.to_cfg_value(v) for k, v in cfg.items()}


def _lost(old: AppStatus, msg: str) -> AppStatus:
    """`old` ended as FAILED for the reason `msg`, with every replica not yet ended."""
    status = unknown(old, msg)
    status.state = AppState.FAILED
    for role in status.roles:
        for replica in role.replicas:
            if replica.state not in TERMINAL_STATES:
                replica.state = AppState.FAILED
    return status
