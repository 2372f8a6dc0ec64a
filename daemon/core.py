"""The daemon core: runs jobs on schedulers, records them, and pushes their state to waiters.

Plain asyncio, no gRPC: the servicer adapts requests to these methods and maps TxdError to
status codes. Every job has one authoritative status here:
- a live (non-terminal) job lives in `_live`, with a Pulse that wakes Wait/Watch callers the
  moment its status changes;
- a terminal job lives only in the registry, so 10,000 finished jobs cost no memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from txd.daemon import validate
from txd.daemon.jobstore import JobRecord, JobStore
from txd.daemon.listing import ListQuery
from txd.schedulers import options
from txd.schedulers import registry as sched_registry
from txd.schedulers.aiters import merge
from txd.schedulers.api import LogQuery, Scheduler, SubmitContext, is_terminal, num_replicas
from txd.schedulers.errors import (
    BackendUnavailable,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    TxdError,
)
from txd.schedulers.pulse import Pulse
from txd.v1.app_pb2 import AppDef, AppState, AppStatus
from txd.v1.runner_pb2 import ListRequest, LogsRequest, LogsResponse, RunRequest
from txd.v1.scheduler_pb2 import CfgValue, RunOpt, SchedulerInfo

log = logging.getLogger(__name__)

# Bounds the bytes buffered per merged log stream (chunks are at most 64 KiB).
MERGE_QUEUE_CHUNKS = 16


@dataclass
class LiveJob:
    record: JobRecord
    pulse: Pulse = field(default_factory=Pulse)
    dirty: bool = False
    refresher: asyncio.Task[None] | None = None

    @property
    def status(self) -> AppStatus:
        return self.record.status


@dataclass
class Poller:
    """The status cache of one polling scheduler: a task that asks it about every live job."""

    task: asyncio.Task[None]
    kick: asyncio.Event = field(default_factory=asyncio.Event)  # set: poll soon
    polled: Pulse = field(default_factory=Pulse)  # fired after each poll: gen counts them
    started: int = 0  # polls started
    stopped: bool = False  # no poll will come: the task has no live job left


def _now() -> Timestamp:
    ts = Timestamp()
    ts.GetCurrentTime()
    return ts


def _same(a: AppStatus, b: AppStatus) -> bool:
    """Equal apart from the `updated` time the daemon stamps on."""
    a2, b2 = AppStatus(), AppStatus()
    a2.CopyFrom(a)
    b2.CopyFrom(b)
    a2.ClearField("updated")
    b2.ClearField("updated")
    return a2 == b2


class Core:
    def __init__(
        self, state_dir: Path, session: str, poll_intervals: dict[str, float] | None = None
    ) -> None:
        self.state_dir = state_dir
        self.session = session
        self.poll_intervals = poll_intervals or {}
        self.registry = JobStore(state_dir / "registry.db")
        self.closing = False
        self._entries = sched_registry.discover()
        self._schedulers: dict[str, Scheduler[Any, Any]] = {}
        self._load_errors: dict[str, str] = {}
        self._live: dict[str, LiveJob] = {}
        self._attached: set[str] = set()
        self._pending_runs: dict[str, asyncio.Future[tuple[str, str]]] = {}
        self._pollers: dict[str, Poller] = {}

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Re-attaches every job the registry holds as live (after a restart or a crash)."""
        for rec in self.registry.live():
            try:
                sched = self.scheduler(rec.scheduler)
                status = await sched.reattach(rec.app_id, rec.native, rec.status)
            except TxdError as e:
                status = AppStatus()
                status.CopyFrom(rec.status)
                status.state = AppState.UNKNOWN
                status.msg = f"cannot re-attach after restart: {e}"
            self._attached.add(rec.handle)
            job = LiveJob(rec)
            self._record(job, status)
            if not is_terminal(status.state):
                self._track(job)
            log.info("re-attached %s: %s", rec.handle, AppState.Name(status.state))

    async def stop_jobs(self, grace: float) -> None:
        """Stops accepting runs and ends local jobs (SIGKILL after `grace` seconds), recording
        them as cancelled, which wakes their waiters with the final status."""
        self.closing = True
        for sched in list(self._schedulers.values()):
            try:
                await sched.shutdown(grace)
            except Exception:
                log.exception("%s: shutdown failed", sched.name)
        for job in list(self._live.values()):
            await self._refresh(job)

    async def close(self) -> None:
        """Closes schedulers (in reverse order of creation) and the registry."""
        for poller in self._pollers.values():
            poller.task.cancel()
        for sched in reversed(list(self._schedulers.values())):
            try:
                await sched.close()
            except Exception:
                log.exception("%s: close failed", sched.name)
        self.registry.close()

    # -- schedulers -------------------------------------------------------------------------

    def scheduler(self, name: str) -> Scheduler[Any, Any]:
        """The scheduler called `name`, built on first use."""
        if name in self._schedulers:
            return self._schedulers[name]
        entry = self._entries.get(name)
        if entry is None:
            known = ", ".join(sorted(self._entries))
            raise NotFound(f"unknown scheduler {name!r} (known: {known})")
        if name in self._load_errors:
            raise FailedPrecondition(f"scheduler {name} is unusable: {self._load_errors[name]}")
        try:
            sched_dir = self.state_dir / "schedulers" / name
            sched = entry.load()(self.session, state_dir=sched_dir)
        except Exception as e:
            self._load_errors[name] = f"{type(e).__name__}: {e}"
            log.exception("scheduler %s failed to load", name)
            raise FailedPrecondition(
                f"scheduler {name} is unusable: {self._load_errors[name]}"
            ) from None
        if name in self.poll_intervals:
            if sched.poll_interval is None:
                log.warning("--poll-interval %s: %s pushes its state; not polled", name, name)
            else:
                sched.poll_interval = self.poll_intervals[name]
        sched.subscribe(functools.partial(self._on_notify, name))
        self._schedulers[name] = sched
        return sched

    def scheduler_infos(self) -> list[SchedulerInfo]:
        out = []
        for name in self._entries:
            try:
                sched = self.scheduler(name)
                out.append(
                    SchedulerInfo(
                        name=name,
                        description=sched.description,
                        capabilities=sched.capabilities,
                        backend_calls=sched.backend_calls(),
                    )
                )
            except TxdError:
                out.append(SchedulerInfo(name=name, load_error=self._load_errors.get(name, "")))
        return out

    def run_opts(self, name: str) -> list[RunOpt]:
        return self.scheduler(name or sched_registry.DEFAULT_SCHEDULER).run_opts()

    # -- submission -------------------------------------------------------------------------

    async def dryrun(self, req: RunRequest) -> tuple[AppDef, str, str]:
        name, sched, app, ctx = self._prepare(req)
        info = await sched.submit_dryrun(app, req.cfg, ctx)
        return info.app, name, info.text

    async def run(self, req: RunRequest) -> tuple[str, str]:
        """Submits and records a job; returns (handle, app_id). Idempotent per request_id."""
        if self.closing:
            raise BackendUnavailable("txd is shutting down; no new jobs are accepted")
        rid = req.request_id
        if not rid:
            return await self._submit(req)
        validate.check_request_id(rid)
        if (rec := self.registry.by_request_id(rid)) is not None:
            return rec.handle, rec.app_id
        if rid in self._pending_runs:  # the same id is being submitted right now
            return await asyncio.shield(self._pending_runs[rid])
        fut: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()
        self._pending_runs[rid] = fut
        try:
            result = await self._submit(req)
            fut.set_result(result)
            return result
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # marks it retrieved when nobody else was waiting
            raise
        finally:
            del self._pending_runs[rid]

    def _prepare(self, req: RunRequest) -> tuple[str, Scheduler[Any, Any], AppDef, SubmitContext]:
        name = req.scheduler or sched_registry.DEFAULT_SCHEDULER
        sched = self.scheduler(name)
        app = validate.normalize_app(req.app)
        cwd = req.cwd or os.getcwd()
        if not os.path.isdir(cwd):
            raise InvalidArgument("cwd", f"{cwd!r} is not an existing directory")
        env = dict(req.env) if req.env else dict(os.environ)
        handle_template = f"{name}://{self.session}/${{app_id}}"
        for role in app.roles:
            role.env.setdefault("TORCHX_JOB_ID", handle_template)
        return name, sched, app, SubmitContext(cwd=cwd, env=env)

    async def _submit(self, req: RunRequest) -> tuple[str, str]:
        name, sched, app, ctx = self._prepare(req)
        info = await sched.submit_dryrun(app, req.cfg, ctx)
        app_id = await sched.schedule(info)
        handle = f"{name}://{self.session}/{app_id}"
        if sched.poll_interval is None:
            status = await sched.describe(app_id) or AppStatus(state=AppState.SUBMITTED)
        else:  # the next poll tells, batched with every other job's
            status = AppStatus(state=AppState.SUBMITTED)
        cfg = {k: options.from_cfg_value(v) for k, v in options.as_cfg(info.opts).items()}
        rec = JobRecord(
            handle=handle,
            scheduler=name,
            app_id=app_id,
            created=time.time(),
            app=info.app,
            status=status,
            cfg=cfg,
            native=info.native,
            request_id=req.request_id or None,
        )
        job = LiveJob(rec)
        self._fill_identity(job, status)
        status.updated.CopyFrom(status.created)
        try:
            self.registry.insert(rec)
        except Exception:
            log.exception("could not record %s; cancelling it", handle)
            await sched.delete(app_id)
            raise
        self._attached.add(handle)
        if not is_terminal(status.state):
            self._track(job)
            if sched.poll_interval is None:
                # Exits reported while schedule() ran found no job to update: look again now.
                await self._refresh(job)
            else:
                self._pollers[name].kick.set()  # a new job's first states matter most
        return handle, app_id

    # -- status -----------------------------------------------------------------------------

    def _fill_identity(self, job: LiveJob, status: AppStatus) -> None:
        rec = job.record
        status.app_handle = rec.handle
        status.scheduler = rec.scheduler
        status.app_id = rec.app_id
        status.name = rec.app.name
        status.created.FromNanoseconds(int(rec.created * 1e9))

    def _record(self, job: LiveJob, status: AppStatus) -> None:
        """Stores a new status if it differs, and wakes everyone waiting on the job."""
        self._fill_identity(job, status)
        old = job.record.status
        if is_terminal(old.state) or _same(old, status):
            return
        if old.state != status.state or not old.HasField("updated"):
            status.updated.CopyFrom(_now())
        else:
            status.updated.CopyFrom(old.updated)
        job.record.status = status
        self.registry.update_status(job.record.handle, status)
        if is_terminal(status.state):
            self._live.pop(job.record.handle, None)
        job.pulse.fire()

    def _track(self, job: LiveJob) -> None:
        """Makes a live job's status current from now on: pushed by its scheduler, or polled."""
        self._live[job.record.handle] = job
        name = job.record.scheduler
        if self.scheduler(name).poll_interval is not None and name not in self._pollers:
            self._pollers[name] = Poller(asyncio.get_running_loop().create_task(self._poll(name)))

    async def _poll(self, name: str) -> None:
        """One batched status query per interval for every live job of a polling scheduler,
        however many clients wait on or watch them; ends when none is left."""
        sched = self.scheduler(name)
        poller = self._pollers[name]  # recorded by _track before this task's first step
        kick, polled = poller.kick, poller.polled
        try:
            while live := [j for j in self._live.values() if j.record.scheduler == name]:
                kick.clear()
                poller.started += 1
                try:
                    found = await sched.describe_many([j.record.app_id for j in live])
                except TxdError as e:
                    log.warning("%s: status poll failed, keeping the last statuses: %s", name, e)
                    found = {}
                for job in live:
                    if (status := found.get(job.record.app_id)) is not None:
                        self._record(job, status)
                polled.fire()
                # The backend cannot push: waiting out the interval is the contract here. A
                # kick (a submit, a cancel) cuts the wait short, but never below a fifth of
                # the interval, so a burst of submissions costs at most 5 polls per interval.
                interval = sched.poll_interval or 1.0
                await asyncio.sleep(interval / 5)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(kick.wait(), interval * 4 / 5)
        finally:
            del self._pollers[name]
            poller.stopped = True
            polled.fire()  # wakes _poll_now callers: no poll will come

    async def _poll_now(self, name: str) -> None:
        """Has the poller of `name` start a poll now, and returns once it is done."""
        poller = self._pollers.get(name)
        if poller is None:
            return
        # A poll under way may have queried the backend before the caller's change: the one
        # that counts is the next to start. Polls start and finish in turn, so it is done when
        # the finished count (polled.gen) passes the started count of now.
        target = poller.started + 1
        poller.kick.set()
        while poller.polled.gen < target and not poller.stopped:
            await poller.polled.wait_past(poller.polled.gen)

    def _on_notify(self, scheduler: str, app_id: str) -> None:
        job = self._live.get(f"{scheduler}://{self.session}/{app_id}")
        if job is None:
            return
        job.dirty = True
        if job.refresher is None:
            job.refresher = asyncio.get_running_loop().create_task(self._refresh(job))

    async def _refresh(self, job: LiveJob) -> None:
        """Describes the job until no change was notified meanwhile. Runs as the job's
        refresher task (from _on_notify) or is awaited directly."""
        job.dirty = True
        try:
            while job.dirty:
                job.dirty = False
                status = await self.scheduler(job.record.scheduler).describe(job.record.app_id)
                if status is not None:
                    self._record(job, status)
        finally:
            if job.refresher is asyncio.current_task():
                job.refresher = None

    def lookup(self, handle: str) -> JobRecord:
        validate.parse_handle(handle)
        job = self._live.get(handle)
        if job is not None:
            return job.record
        rec = self.registry.get(handle)
        if rec is None:
            raise NotFound(f"no job {handle} (list known jobs with `txctl list`)")
        return rec

    async def _attached_scheduler(self, rec: JobRecord) -> Scheduler[Any, Any]:
        """The job's scheduler, after handing it the job's native facts once per daemon run."""
        sched = self.scheduler(rec.scheduler)
        if rec.handle not in self._attached:
            await sched.reattach(rec.app_id, rec.native, rec.status)
            self._attached.add(rec.handle)
        return sched

    def status(self, handle: str) -> AppStatus:
        return self.lookup(handle).status

    async def wait(self, handle: str) -> AppStatus:
        rec = self.lookup(handle)
        job = self._live.get(handle)
        while job is not None and not is_terminal(job.status.state):
            await job.pulse.wait_past(job.pulse.gen)
        return job.status if job is not None else rec.status

    async def watch(self, handle: str) -> AsyncIterator[AppStatus]:
        rec = self.lookup(handle)
        job = self._live.get(handle)
        if job is None:
            yield rec.status
            return
        while True:
            gen = job.pulse.gen
            status = job.status
            yield status
            # Test what was sent, not job.status: the job may have ended during the yield.
            if is_terminal(status.state):
                return
            await job.pulse.wait_past(gen)

    async def list(self, req: ListRequest) -> tuple[list[AppStatus], str]:
        """One page of jobs, newest first, and the next page's token ("" after the last)."""
        query = ListQuery.parse(req, self.registry.page_token_key)
        scheduler = req.scheduler
        if scheduler and scheduler not in self._entries:
            raise NotFound(f"unknown scheduler {scheduler!r} (known: {', '.join(self._entries)})")
        if not req.backend:
            return query.from_store(self.registry)
        if not scheduler:
            raise InvalidArgument("scheduler", "listing from the backend needs a scheduler")
        apps = await self.scheduler(scheduler).list()
        for status in apps:
            status.scheduler = scheduler
            status.app_handle = f"{scheduler}://{self.session}/{status.app_id}"
        return query.from_statuses(apps)

    # -- control ----------------------------------------------------------------------------

    async def cancel(self, handle: str) -> AppStatus:
        rec = self.lookup(handle)
        job = self._live.get(handle)
        if job is not None:
            sched = self.scheduler(rec.scheduler)
            await sched.cancel(rec.app_id)
            if sched.poll_interval is None:
                await self._refresh(job)
            else:
                await self._poll_now(rec.scheduler)
            return job.status
        return rec.status

    async def delete(self, handle: str) -> None:
        rec = self.lookup(handle)
        sched = await self._attached_scheduler(rec)
        await sched.delete(rec.app_id)
        job = self._live.pop(handle, None)
        if job is not None:
            # Wake anyone still waiting: the job is gone for good.
            final = AppStatus()
            final.CopyFrom(job.status)
            if not is_terminal(final.state):
                final.state = AppState.CANCELLED
            final.msg = "deleted"
            job.record.status = final
            job.pulse.fire()
        self.registry.delete(handle)

    # -- logs -------------------------------------------------------------------------------

    async def logs(self, req: LogsRequest) -> AsyncIterator[LogsResponse]:
        rec = self.lookup(req.app_handle)
        sched = await self._attached_scheduler(rec)
        targets = _log_targets(rec, req)
        if req.regex:
            try:
                re.compile(req.regex.encode())
            except re.error as e:
                raise InvalidArgument("regex", f"invalid regular expression: {e}") from None
        query = LogQuery(
            regex=req.regex,
            since=req.since.ToDatetime(dt.UTC) if req.HasField("since") else None,
            until=req.until.ToDatetime(dt.UTC) if req.HasField("until") else None,
            follow=req.follow,
            stream=req.streams,
        )
        iters = [(role, k, sched.log_iter(rec.app_id, role, k, query)) for role, k in targets]
        if not req.follow or len(iters) == 1:
            # Replica after replica: finished output reads best grouped.
            for i in iters:
                async for msg in _tagged(*i):
                    yield msg
            return
        async for msg in merge([_tagged(*i) for i in iters], MERGE_QUEUE_CHUNKS):
            yield msg


def _log_targets(rec: JobRecord, req: LogsRequest) -> list[tuple[str, int]]:
    roles = [r for r in rec.app.roles if not req.role or r.name == req.role]
    if not roles:
        names = ", ".join(r.name for r in rec.app.roles)
        raise NotFound(f"{rec.handle} has no role {req.role!r} (roles: {names})")
    targets = []
    for role in roles:
        n = num_replicas(role)
        if req.HasField("replica"):
            if not 0 <= req.replica < n:
                raise NotFound(f"role {role.name!r} has replicas 0..{n - 1}, not {req.replica}")
            targets.append((role.name, req.replica))
        else:
            targets.extend((role.name, k) for k in range(n))
    return targets


async def _tagged(role: str, k: int, it: AsyncIterator[bytes]) -> AsyncIterator[LogsResponse]:
    async for chunk in it:
        yield LogsResponse(data=chunk, role=role, replica=k)


def cfg_values(cfg: dict[str, Any]) -> dict[str, CfgValue]:
    return {k: options.to_cfg_value(v) for k, v in cfg.items()}
