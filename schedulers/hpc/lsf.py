"""lsf: every replica is one LSF job (`bsub`) running a docker container, as TorchX's prototype.

A Run becomes one bash script (hpc.lsf_script): per replica a `bsub ... << 'EOF'` whose job
body is a `docker run` of the role's image. The script runs on this host or on a login node over
SSH (hpc.hosts), so `txctl run --dryrun` prints exactly what is submitted, then the checks made
before queueing (hpc.lsf_precheck); a dry run works where no LSF answers (the checks then say
they were not run).

- Status: LSF cannot push, so the daemon polls (`poll_interval`). One `bjobs -a` per host
  answers for every app at once (hpc.lsf_status reads it); rows are matched to apps by project
  name. LSF forgets finished jobs after its CLEAN_PERIOD: an app bjobs no longer shows is
  reported as unknown (None).
- Fail-fast, as in TorchX: once a replica has failed, the poll bkills the app's other jobs; the
  app is FAILED once they have ended (fold: terminal only when every replica is).
- Logs: only with `jobdir` (a directory every execution host and the submission host share);
  each replica's container writes `<jobdir>/<job>.out` and `.err`, read with cat / tail -F.

Ignored, as in TorchX: retries, min_replicas, resource capabilities and named devices.
Not done: delete removes nothing (LSF ages finished jobs out itself; files in the jobdir belong
to the user), so `delete` is cancel.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from txd.schedulers.api import (
    Described,
    DryRunInfo,
    Job,
    SubmitContext,
    Submitted,
    make_unique,
)
from txd.schedulers.errors import (
    BackendUnavailable,
    FailedPrecondition,
    InvalidArgument,
    TxdError,
    Unsupported,
)
from txd.schedulers.fold import replica_states
from txd.schedulers.hpc import lsf_precheck
from txd.schedulers.hpc.base import BatchScheduler, check_replica
from txd.schedulers.hpc.hosts import Host, Hosts, Result
from txd.schedulers.hpc.lsf_script import (
    BHOSTS,
    BsubRequest,
    LsfOpts,
    build_request,
    check_request,
    clean_name,
    native_of,
    pick_rank0_host,
    rank0_needs,
    replicas_of,
    submitted_ids,
)
from txd.schedulers.hpc.lsf_status import (
    BJOBS,
    NO_JOB,
    BjobsRow,
    foreign_status,
    is_live,
    known_status,
    looks_like_app,
    parse_bjobs,
)
from txd.schedulers.hpc.precheck import Check, refuse_failed
from txd.schedulers.hpc.precheck import render as render_checks
from txd.v1 import AppState
from txd.v1.app_pb2 import AppDef, AppStatus, Role
from txd.v1.scheduler_pb2 import Capabilities

log = logging.getLogger(__name__)


class LsfScheduler(BatchScheduler[LsfOpts, BsubRequest]):
    name = "lsf"
    description = "IBM Spectrum LSF: one bsub job per replica, running a docker container"
    capabilities = Capabilities(
        logs=True,  # with jobdir
        log_follow=True,
        log_streams=True,
        cancel=True,
        list=True,
        describe=True,
        distributed=True,
        mounts=True,
    )
    Opts = LsfOpts
    PROBE = BHOSTS  # what a Run asks first too

    def __init__(
        self, session_name: str, settings: Any = None, *, hosts: Hosts | None = None
    ) -> None:
        super().__init__(session_name, settings, hosts=hosts)
        # Apps bkilled by request in this daemon run: their end is worded "cancelled by
        # request", and a replica that outlived bkill's SIGINT (exit 143 or 137) counts as
        # CANCELLED. After a restart a bkilled replica is still recognised by its exit code 130.
        # Kept here because nothing BJOBS shows says who killed a job (the fail-fast stop uses
        # bkill too) and the job record cannot carry a cancel request.
        self._cancelled: set[str] = set()
        # Jobs bkilled because another replica of their app failed, until the app has ended:
        # each is bkilled once, not at every poll, so that LSF's SIGINT, SIGTERM, SIGKILL
        # sequence runs its course. Lost in a restart, which costs one more bkill.
        self._stopping: set[str] = set()

    # -- submission -------------------------------------------------------------------------

    async def _submit_dryrun(
        self, app: AppDef, opts: LsfOpts, ctx: SubmitContext
    ) -> DryRunInfo[BsubRequest]:
        check_request(app, opts)
        app_id = clean_name(make_unique(app.name))
        req = build_request(app_id, app, opts, None)  # the rank-0 host is picked at submit
        info = DryRunInfo(app=app, request=req, opts=opts)
        info.render = self._renderer(info)
        return info

    def _renderer(self, info: DryRunInfo[BsubRequest]) -> Callable[[], str]:
        """The text of info's request as it is when called: schedule() replaces the request
        by the one it submits (the rank-0 host picked), which the job keeps (issue 21)."""
        label = self.hosts.get(info.request.target).label

        def render() -> str:
            req = info.request
            return f"{req.script}{render_checks(req.checks or [], label)}\n"

        return render

    async def _precheck(self, info: DryRunInfo[BsubRequest], *, dry: bool) -> list[Check]:
        """hpc.lsf_precheck's checks. The rank-0 host is checked here only in a dry run: a
        submit picks it anyway."""
        req = info.request
        host = self.hosts.get(req.target)
        checks = []
        if req.opts.lsf_queue:
            res = await host.run(lsf_precheck.bqueues_argv(req.opts.lsf_queue))
            checks.append(lsf_precheck.queue_check(req.opts.lsf_queue, res))
        if req.jobdir:
            res = await host.run(lsf_precheck.jobdir_argv(req.jobdir, create=not dry))
            checks.append(lsf_precheck.jobdir_check(res))
        if dry:
            checks.append(lsf_precheck.rank0_check(req.app, await host.run(BHOSTS)))
        return checks + lsf_precheck.unchecked(req.app)

    async def _rank0_host(self, role: Role, opts: LsfOpts) -> str:
        host = self.hosts.get(opts.ssh_target())
        result = await host.run(BHOSTS)
        if result.returncode != 0:
            raise BackendUnavailable(f"bhosts on {host.label} failed: {result.error()}")
        cpu, gpu = rank0_needs(role)
        found = pick_rank0_host(result.text, cpu, gpu)
        if found is None:
            raise InvalidArgument(
                "app.roles[0].resource",
                f"no LSF host has {cpu} job slot(s) and {gpu} GPU(s) for the first replica",
            )
        return found

    async def schedule(self, dryrun: DryRunInfo[BsubRequest]) -> Submitted:
        req = dryrun.request
        checks = None
        if req.opts.precheck:
            where = self.hosts.get(req.target).label
            checks = await self._precheck(dryrun, dry=False)
            refuse_failed(checks, where)
        if req.rank0_host is None:
            rank0_host = await self._rank0_host(req.app.roles[0], req.opts)
            req = build_request(req.app_id, req.app, req.opts, rank0_host)
        req.checks = checks
        dryrun.request = req  # what is submitted, for its text (see _renderer)
        host = self.hosts.get(req.target)
        result = await host.run(["/bin/bash", "-s"], input=req.script.encode())
        ids = submitted_ids(result.text)
        if result.returncode != 0 or len(ids) != len(req.jobs):
            await self._kill_quietly(host, ids)
            failed = req.jobs[min(len(ids), len(req.jobs) - 1)].name
            undone = f"; killed the {len(ids)} job(s) already submitted" if ids else ""
            raise FailedPrecondition(f"bsub of {failed} failed: {result.error()}{undone}")
        # job_ids are for people reading the job record: bjobs finds the jobs by project.
        return Submitted(req.app_id, {**native_of(req), "job_ids": ids})

    async def _kill_quietly(self, host: Host, ids: list[str]) -> None:
        """Undoes a half-done submission; a failure here must not hide bsub's error."""
        if not ids:
            return
        try:
            await host.run(["bkill", *ids])
        except TxdError as e:
            log.warning("could not kill jobs %s after a failed bsub: %s", " ".join(ids), e)

    # -- observation ------------------------------------------------------------------------

    async def _bjobs(self, host: Host) -> dict[str, list[BjobsRow]]:
        """The user's jobs on host's cluster, by project: one bjobs call."""
        result = await host.run(BJOBS)
        said = [line for line in result.stderr.decode(errors="replace").splitlines() if line]
        # With no job to show, bjobs exits 0 or 255 (LSB_BJOBS_CONSISTENT_EXIT_CODE) and says so.
        if result.returncode != 0 and not all(NO_JOB.match(line) for line in said):
            raise BackendUnavailable(f"bjobs on {host.label} failed: {result.error()}")
        try:
            rows = parse_bjobs(result.text)
        except ValueError as e:
            raise BackendUnavailable(
                f"bjobs on {host.label} printed what txd cannot read: {e}"
            ) from None
        projects: dict[str, list[BjobsRow]] = defaultdict(list)
        for row in rows:
            projects[row.project].append(row)
        return projects

    async def _query(self, host: Host, jobs: list[Job]) -> dict[str, Described]:
        """One bjobs for every app on host, matched to apps by project name.

        An app fails fast, as in TorchX: once a replica has failed, its other jobs are bkilled
        here. `fold` keeps the app live until they have ended, so an app reported terminal has
        nothing left running (and until then cancel and delete still reach it)."""
        projects = await self._bjobs(host)
        out: dict[str, Described] = {}
        for job in jobs:
            rows = projects.get(job.app_id, [])
            cancelled = job.app_id in self._cancelled
            out[job.app_id] = status = known_status(job.app_id, replicas_of(job), rows, cancelled)
            live = [r.job_id for r in rows if is_live(r)]
            if status is not None and live and AppState.FAILED in replica_states(status.roles):
                await self._stop(host, live)
                status.msg += ", stopping the other replicas"
            else:
                self._stopping.difference_update(r.job_id for r in rows)
        return out

    async def _stop(self, host: Host, ids: list[str]) -> None:
        """bkills the survivors of a failed app; a refused bkill is tried again next poll."""
        ids = [i for i in ids if i not in self._stopping]
        if not ids:
            return
        result = await host.run(["bkill", *ids])
        if _refused(result):
            log.warning("lsf: could not stop jobs %s: %s", " ".join(ids), result.error())
        else:
            self._stopping.update(ids)

    async def list(self) -> list[AppStatus]:
        """The apps among the user's jobs on this host's cluster: jobs named
        `<project>-<role>-<k>`, grouped by project, with role names as the job names have them
        (lowercased). Login nodes are not asked: the scheduler keeps no table of its jobs."""
        projects = await self._bjobs(self.hosts.get(None))
        out = []
        for project, rows in projects.items():
            mine = [r for r in rows if looks_like_app(r)]
            if mine:
                out.append(foreign_status(project, mine, project in self._cancelled))
        return out

    def _log_files(self, job: Job, role: str, k: int) -> tuple[str, str]:
        names = {(j.role, j.replica_id): j.name for j in replicas_of(job)}
        check_replica(job, list(names), role, k)
        jobdir = job.native.get("jobdir")
        if not jobdir:
            raise Unsupported(
                f"{job.app_id} was submitted without a jobdir, so LSF kept no log files for it; "
                "run with -c jobdir=<a directory the cluster's hosts share> to get logs"
            )
        base = f"{jobdir}/{names[role, k]}"
        return f"{base}.out", f"{base}.err"

    # -- control ----------------------------------------------------------------------------

    async def cancel(self, job: Job) -> None:
        """bkills the app's unfinished jobs, found by one bjobs; a no-op when none is left."""
        host = self.host_of(job)
        live = [r.job_id for r in (await self._bjobs(host)).get(job.app_id, []) if is_live(r)]
        if not live:
            return
        self._cancelled.add(job.app_id)
        result = await host.run(["bkill", *live])
        if _refused(result):
            raise FailedPrecondition(f"bkill on {host.label} failed: {result.error()}")


def _refused(bkill: Result) -> bool:
    """bkill exits non-zero when any job could not be killed; jobs that ended meanwhile
    ("already finished", "No matching job found") are no failure."""
    said = bkill.stderr.decode(errors="replace").splitlines()
    trouble = [line for line in said if line.strip() and not NO_JOB.match(line)]
    return bkill.returncode != 0 and bool(trouble or not said)


def create_scheduler(session_name: str, **kwargs: Any) -> LsfScheduler:
    # state_dir is not needed: LSF keeps the jobs, the daemon keeps `native`.
    return LsfScheduler(session_name, settings=kwargs.get("settings"))
