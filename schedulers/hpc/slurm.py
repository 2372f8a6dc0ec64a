"""slurm: an AppDef becomes one heterogeneous sbatch job, on this host or on a login node over
SSH (hpc.hosts).

The batch script and what txd keeps of its job are hpc.slurm_script's; reading squeue's and
sacct's answers into statuses is hpc.slurm_status's; this module runs the commands.

Slurm cannot push state changes: the daemon polls `describe_many`, which asks each cluster for
all tracked jobs with one `squeue` call. Slurm forgets a finished job MinJobAge seconds after it
ends; the daemon has recorded its final state by then. A job that ended and was forgotten while
the daemon was down is settled from `sacct` where accounting is on, else from the last line the
batch script wrote (`txd: exit code N`); a job nothing can settle is reported unknown (None).

A workspace (TorchX's DirWorkspaceMixin) is copied before sbatch into a directory of its own,
`<job_dir>/txd-workspaces/<name>-<random>` (on the login node over SSH), which becomes the
job's directory: the replicas start there (`--chdir`) and write their logs there, and role 0's
`${img_root}` names it. The job so runs the code as it was when submitted, whatever the caller
changes afterwards. `.torchxignore` (TorchX's, in .dockerignore's format) leaves files out;
when the copies' directory lies inside the workspace (job_dir is the workspace, the default),
it is never copied itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
import typing
from dataclasses import asdict, dataclass, replace
from typing import Any

from txd.schedulers.api import (
    Described,
    DryRunInfo,
    Job,
    NoAnswer,
    SubmitContext,
    Submitted,
    make_unique,
    num_replicas,
)
from txd.schedulers.errors import BackendUnavailable, FailedPrecondition, InvalidArgument
from txd.schedulers.hpc import slurm_precheck
from txd.schedulers.hpc.base import BatchScheduler, BatchSettings, check_replica
from txd.schedulers.hpc.hosts import (
    NOT_FOUND,
    Host,
    Hosts,
    SshTarget,
    missing_command,
    target_to_native,
)
from txd.schedulers.hpc.precheck import FAIL, Check, refuse_failed
from txd.schedulers.hpc.precheck import render as render_checks
from txd.schedulers.hpc.slurm_script import (
    DEFAULT_VERSION,
    GPUS_PER_NODE_SINCE,
    NOMEM_AT_MOST_MB,
    SBATCH_ARGV,
    SINFO_MEMORY_ARGV,
    SbatchRequest,
    SlurmJob,
    SlurmOpts,
    build_script,
    check_directives,
    check_time,
    partition_memory,
    sbatch_env,
    small_partitions,
    submitted_job_id,
)
from txd.schedulers.hpc.slurm_status import (
    SACCT_ARGV,
    SqueueRow,
    exit_mark,
    parse_sacct,
    parse_squeue,
    settled,
    slurm_state,
    squeue_argv,
    status_of,
)
from txd.schedulers.options import opt
from txd.schedulers.workspace import files as ws
from txd.v1 import AppState
from txd.v1.app_pb2 import AppDef, AppStatus
from txd.v1.scheduler_pb2 import Capabilities

log = logging.getLogger(__name__)

# Where workspace copies go, in the job_dir.
WORKSPACES_DIR = "txd-workspaces"
# What scancel says of a job that has ended, or that Slurm has forgotten: cancel is a no-op.
_SCANCEL_DONE = (b"already completing or completed", b"Invalid job id specified")
_VERSION = re.compile(rb"(\d+)\.(\d+)")
# Batch outputs read by one command when settling forgotten jobs (bounds its argv).
LAST_LINES_AT_ONCE = 200
# Prints, for each file given, "+" and its last line, or "-" when it cannot be read: one line
# per file ($(...) drops the line's own newline).
_LAST_LINES = (
    'for f; do if l=$(tail -n 1 -- "$f" 2>/dev/null); then printf "+%s\\n" "$l"; '
    "else echo -; fi; done"
)


@dataclass
class SlurmSettings(BatchSettings):
    forgotten_grace: float = opt(
        60.0,
        "seconds a job Slurm forgot before its batch output showed an exit code (slurmctld "
        "restarted without its state) is kept stale, its output read again at every poll, "
        "before it is recorded UNKNOWN",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.forgotten_grace >= 0:
            raise ValueError(f"forgotten_grace must be >= 0, got {self.forgotten_grace!r}")


def app_id_of(target: SshTarget | None, job_id: str) -> str:
    """Slurm job ids are unique per cluster only: a login node's jobs carry its name."""
    return f"{target.host}:{job_id}" if target else job_id


class SlurmScheduler(BatchScheduler[SlurmOpts, SbatchRequest]):
    name = "slurm"
    description = "Slurm: one heterogeneous sbatch job per app, here or on a login node over SSH"
    capabilities = Capabilities(
        logs=True,
        log_follow=True,
        log_streams=True,
        cancel=True,
        delete=True,
        list=True,
        describe=True,
        distributed=True,
        retries=True,
        workspace=True,
    )
    Opts = SlurmOpts
    Settings = SlurmSettings
    PROBE = ("scontrol", "ping")  # slurmctld answers

    def __init__(
        self, session_name: str, settings: Any = None, *, hosts: Hosts | None = None
    ) -> None:
        super().__init__(session_name, settings, hosts=hosts)
        # Per cluster, not per job: keyed by the Host (one per login node, and this host).
        self._versions: dict[Host, tuple[int, int]] = {}
        # The partitions' and nodes' descriptions the last checks read (slurm_precheck), when.
        self._partitions: dict[Host, tuple[float, dict[str, tuple[int, str]]]] = {}
        # The partitions' memory per node and the default partition (SINFO_MEMORY_ARGV), when.
        self._memory: dict[Host, tuple[float, dict[str, int], str | None]] = {}
        self._no_accounting: set[Host] = set()
        # When each forgotten job with no exit code yet was first found so (monotonic), by its
        # batch output (host, path): unique, though Slurm may hand a job id out again.
        self._forgotten_since: dict[tuple[Host, str], float] = {}

    # -- submission -------------------------------------------------------------------------

    async def _submit_dryrun(
        self, app: AppDef, opts: SlurmOpts, ctx: SubmitContext
    ) -> DryRunInfo[SbatchRequest]:
        check_time(opts)
        target = opts.ssh_target()
        workdir = opts.job_dir or ("" if target else ctx.cwd)
        workdir_field = "cfg.job_dir" if opts.job_dir or target else "cwd"
        check_directives(opts, workdir, workdir_field)
        host = self.hosts.get(target)
        notes = []
        version = (0, 0)
        if any(r.resource.gpu > 0 for r in app.roles):
            version, note = await self._version(host)
            notes += [note] if note else []
        if not opts.nomem and any(r.resource.mem_mb > 0 for r in app.roles):
            nomem, note = await self._nomem(host, opts.partition)
            opts = replace(opts, nomem=nomem)
            notes += [note] if note else []
        prefix = f"{target.host}:" if target else ""
        tag = make_unique("", 6)
        script = build_script(app, opts, workdir, version, prefix, tag, notes)
        replicas = [(r.name, k) for r in app.roles for k in range(num_replicas(r))]
        job = SlurmJob(replicas, workdir, target_to_native(target), tag=tag)
        req = SbatchRequest(script, job, {} if target else sbatch_env(ctx.env), bool(opts.job_dir))
        req.workdir_field = workdir_field
        if ctx.workspace:  # prepare_workspace made the copy the job's directory
            req.workspace_copy = workdir
        where = f" (on {target})" if target else ""
        label = host.label

        def render() -> str:
            checks = render_checks(req.checks or [], label)
            return f"# sbatch --parsable{where} < script\n{script}\n{checks}\n"

        return DryRunInfo(app=app, request=req, opts=opts, render=render)

    async def _precheck(self, info: DryRunInfo[SbatchRequest], *, dry: bool) -> list[Check]:
        """hpc.slurm_precheck's checks, by one command where sbatch runs (with its env)."""
        req = info.request
        target = slurm_precheck.Target(
            app=info.app,
            opts=info.opts,
            workdir=req.job.workdir,
            workdir_field=req.workdir_field,
            script=req.script,
            create=req.make_dir and not dry,
            pending_copy=dry and bool(req.workspace_copy),
        )
        host = self.hosts.get(req.job.target)
        known = self._partitions.get(host)
        reuse = (
            known is not None
            and time.monotonic() - known[0] < slurm_precheck.PARTITIONS_TTL
            and slurm_precheck.knows(known[1]["partitions"], info.opts)
        )
        checks = await self._probe(host, target, req.env, known[1] if reuse and known else None)
        if reuse and any(c.outcome == FAIL for c in checks):
            # Refused on what was read earlier: ask afresh (limits or node states changed).
            checks = await self._probe(host, target, req.env, None)
        return checks

    async def _probe(
        self,
        host: Host,
        target: slurm_precheck.Target,
        env: dict[str, str],
        partitions: dict[str, tuple[int, str]] | None,
    ) -> list[Check]:
        """One probe; `partitions`: the partitions' and nodes' sections read earlier (None:
        read them too, and keep them)."""
        now = time.monotonic()
        probe = slurm_precheck.probe(target, partitions=partitions is None)
        res = await host.run(["/bin/bash", "-s"], input=probe.text.encode(), env=env or None)
        sections = probe.sections(res.text)
        if sections.get("testonly", (0, ""))[0] == NOT_FOUND:  # the backend is not there
            raise missing_command(SBATCH_ARGV[0], host.label)
        if partitions is not None:
            sections.update(partitions)
        elif sections.get("partitions", (1, ""))[0] == 0 and sections.get("nodes", (1, ""))[0] == 0:
            kept = ("partitions", "nodes")
            self._partitions[host] = (now, {k: sections[k] for k in kept})
        return slurm_precheck.evaluate(target, sections)

    async def prepare_workspace(
        self, app: AppDef, opts: SlurmOpts, ctx: SubmitContext, *, dryrun: bool
    ) -> tuple[AppDef, str]:
        """Copies the workspace into a directory of its own that becomes the job's directory
        (opts.job_dir, and role 0's image: its ${img_root}), as TorchX's DirWorkspaceMixin
        does; see the module docstring."""
        target = opts.ssh_target()
        host = self.hosts.get(target)
        workdir = opts.job_dir or ("" if target else ctx.cwd)
        parent = _in_dir(workdir, WORKSPACES_DIR)
        copy = _in_dir(parent, make_unique(_safe_name(app.name)))
        # Only on this host can the copies' directory be inside the workspace.
        skip = None if target else os.path.join(ctx.cwd, parent)
        found = await asyncio.to_thread(ws.scan, ctx.workspace, ws.TORCHXIGNORE, skip=skip)
        what = f"workspace {ctx.workspace} ({found.summary()})"
        where = f" on {host.label}" if target else ""
        opts.job_dir = copy
        out = AppDef()
        out.CopyFrom(app)
        if out.roles:
            out.roles[0].image = copy
        if dryrun:
            return out, f"{what}: would copy it to {copy}{where}, the job's directory"
        made = await host.run(["mkdir", "-p", "--", copy])
        if made.returncode != 0:
            raise FailedPrecondition(f"cannot create {copy}{where}: {made.error()}")
        res = await host.feed(["tar", "-x", "-f", "-", "-C", copy], ws.tar_stream(found.entries))
        if res.returncode != 0:
            await host.run(["rm", "-rf", "--", copy])
            raise FailedPrecondition(f"copying {what} to {copy}{where} failed: {res.error()}")
        return out, f"{what}: copied to {copy}{where}, the job's directory"

    async def _version(self, host: Host) -> tuple[tuple[int, int], str]:
        """The cluster's Slurm version, and "", or, when `sinfo --version` cannot tell (no Slurm
        client or configuration there: a dry run off the cluster), DEFAULT_VERSION and a note
        saying so. A version read is kept for good; a failure is asked again next time."""
        if host in self._versions:
            return self._versions[host], ""
        try:
            res = await host.run(["sinfo", "--version"])
        except BackendUnavailable as e:
            why = str(e)
        else:
            if res.returncode == 0 and (m := _VERSION.search(res.stdout)):
                self._versions[host] = (int(m[1]), int(m[2]))
                return self._versions[host], ""
            why = f"`sinfo --version` on {host.label} failed: {_last_line(res.error())}"
        since = ".".join(map(str, GPUS_PER_NODE_SINCE))
        assumed = ".".join(f"{n:02d}" if i else str(n) for i, n in enumerate(DEFAULT_VERSION))
        note = (
            f"Slurm version unknown ({why}); assumed {assumed}, as TorchX does: GPUs are asked "
            f"per task (--gpus-per-task), where Slurm {since} and later take --gpus-per-node"
        )
        return DEFAULT_VERSION, note

    async def _nomem(self, host: Host, partition: str | None) -> tuple[bool, str]:
        """TorchX's rule: whether to leave --mem out, the job's partition reporting at most
        NOMEM_AT_MOST_MB per node, and a note saying why (or that the memory is unknown: then
        --mem stays, as in TorchX). The partitions' sizes are reused for PARTITIONS_TTL s."""
        known = self._memory.get(host)
        if known is None or time.monotonic() - known[0] >= slurm_precheck.PARTITIONS_TTL:
            try:
                res = await host.run(SINFO_MEMORY_ARGV)
            except BackendUnavailable as e:
                return False, f"partition memory unknown ({e}); --mem kept, as TorchX does"
            memory, default = partition_memory(res.text)
            if res.returncode != 0 or not memory:
                said = _last_line(res.error())
                why = f"`{' '.join(SINFO_MEMORY_ARGV)}` on {host.label} failed: {said}"
                return False, f"partition memory unknown ({why}); --mem kept, as TorchX does"
            known = (time.monotonic(), memory, default)
            self._memory[host] = known
        small = small_partitions(known[1], known[2], partition)
        if not small:
            return False, ""
        sizes = ", ".join(f"{name} {mb} MB" for name, mb in small)
        return True, (
            f"--mem left out: the partition's nodes report at most {NOMEM_AT_MOST_MB} MB "
            f"({sizes}), where TorchX requests no memory (clusters so configured refuse it)"
        )

    async def schedule(self, dryrun: DryRunInfo[SbatchRequest]) -> Submitted:
        req = dryrun.request
        job = req.job
        host = self.hosts.get(job.target)
        env = req.env or None
        if dryrun.opts.precheck:  # which makes an explicit job_dir too
            checks = await self._precheck(dryrun, dry=False)
            req.checks = checks  # the request's text shows them, as a dry run's does
            try:
                refuse_failed(checks, host.label)
            except InvalidArgument:
                if req.workspace_copy:  # nothing left behind
                    await host.run(["rm", "-rf", "--", req.workspace_copy])
                raise
        elif req.make_dir:
            made = await host.run(["mkdir", "-p", "--", job.workdir])
            if made.returncode != 0:
                raise FailedPrecondition(f"cannot create job_dir {job.workdir}: {made.error()}")
        res = await host.run(SBATCH_ARGV, input=req.script.encode(), env=env)
        job_id = submitted_job_id(res.text)
        if res.returncode != 0 or job_id is None:
            if req.workspace_copy:  # nothing left behind
                await host.run(["rm", "-rf", "--", req.workspace_copy])
            raise FailedPrecondition(f"sbatch on {host.label} refused the job: {res.error()}")
        job = replace(job, job_id=job_id)
        return Submitted(app_id_of(job.target, job.job_id), asdict(job))

    # -- observation ------------------------------------------------------------------------

    async def _query(self, host: Host, jobs: list[Job]) -> dict[str, Described]:
        """One squeue for all of `jobs`, and one sacct for those Slurm has forgotten."""
        found = await self._squeue(host)
        out: dict[str, Described] = {}
        forgotten: dict[str, SlurmJob] = {}
        for job in jobs:
            slurm_job = SlurmJob.of(job)
            if slurm_job is None:
                out[job.app_id] = None
            elif slurm_job.job_id in found:
                out[job.app_id] = status_of(slurm_job, found[slurm_job.job_id])
                self._forgotten_since.pop((host, slurm_job.log_file(".out")), None)
            else:
                forgotten[job.app_id] = slurm_job
        if forgotten:
            out.update(await self._settle_forgotten(host, forgotten))
        return out

    async def _squeue(self, host: Host) -> dict[str, list[SqueueRow]]:
        """Every job of the user that the cluster still knows, by job id: one squeue call."""
        res = await host.run(squeue_argv())
        if res.returncode != 0:
            raise BackendUnavailable(f"squeue on {host.label} failed: {res.error()}")
        try:
            return parse_squeue(res.text)
        except ValueError as e:
            raise BackendUnavailable(
                f"squeue on {host.label} printed what txd cannot read: {e}"
            ) from None

    async def _settle_forgotten(
        self, host: Host, jobs: dict[str, SlurmJob]
    ) -> dict[str, Described]:
        """Statuses of jobs squeue no longer shows: they ended more than MinJobAge ago, or
        slurmctld lost them (restarted without its state) and they may be ending yet. From
        sacct where accounting is on, else from the exit code the batch output ends with.
        While sacct fails for another reason than accounting being off (slurmdbd
        unreachable), or for `forgotten_grace` seconds while the output has no exit code yet,
        such a job is NoAnswer: kept stale, asked again next poll. A job nothing settled by
        then is None: the daemon records it UNKNOWN and stops asking."""
        final: dict[str, tuple[str, int]] = {}
        sacct_failed = ""
        if host not in self._no_accounting:
            ids = ",".join(j.job_id for j in jobs.values())
            res = await host.run([*SACCT_ARGV, "-j", ids])
            if b"accounting storage is disabled" in res.stdout + res.stderr:
                self._no_accounting.add(host)
            elif res.returncode != 0:
                sacct_failed = f"sacct on {host.label} failed: {res.error()}"
            else:
                final = parse_sacct(res.text)
        unsettled = [job for job in jobs.values() if job.job_id not in final]
        marks = await _exit_marks(host, [job.log_file(".out") for job in unsettled])
        grace = typing.cast(SlurmSettings, self.settings).forgotten_grace
        now = time.monotonic()
        self._forget_old_sightings(now, grace)
        out: dict[str, Described] = {}
        for app_id, job in jobs.items():
            output = job.log_file(".out")
            if job.job_id in final:
                state_text, code = final[job.job_id]
                out[app_id] = settled(job, slurm_state(state_text), code, "sacct")
            elif (mark := marks.get(output)) is not None:
                state = AppState.SUCCEEDED if mark == 0 else AppState.FAILED
                out[app_id] = settled(job, state, mark, "its batch output")
            elif sacct_failed:
                out[app_id] = NoAnswer(
                    f"squeue no longer shows job {job.job_id} and {sacct_failed}"
                )
            elif now - self._forgotten_since.setdefault((host, output), now) < grace:
                out[app_id] = NoAnswer(
                    f"Slurm forgot job {job.job_id} (squeue no longer shows it) before its "
                    f"batch output {output} showed an exit code; waiting up to {grace:g} s "
                    "for one"
                )
                continue  # keeps its sighting
            else:
                log.warning(
                    "slurm: on %s, Slurm forgot job %s, accounting is off and its batch "
                    "output has no exit code: its end is unknown",
                    host.label,
                    job.job_id,
                )
                out[app_id] = None
            self._forgotten_since.pop((host, output), None)
        return out

    def _forget_old_sightings(self, now: float, grace: float) -> None:
        """Drops the sightings of jobs no longer asked about (deleted meanwhile), so the table
        stays as small as the jobs still waiting for an exit code."""
        old = [key for key, t in self._forgotten_since.items() if now - t > 2 * grace + 60]
        for key in old:
            del self._forgotten_since[key]

    async def list(self) -> list[AppStatus]:
        """Every job of yours on this host's cluster. Login nodes are not asked: the scheduler
        keeps no table of the jobs (and so of the login nodes) it has seen."""
        out = []
        for job_id, comps in (await self._squeue(self.hosts.get(None))).items():
            names = [c.name.rpartition("-") for c in comps]
            replicas = [
                (r, int(k)) if k.isdigit() else (c.name, 0)
                for (r, _, k), c in zip(names, comps, strict=True)
            ]
            status = status_of(SlurmJob(replicas, "", None, job_id), comps)
            status.app_id = job_id
            status.name = comps[0].name
            out.append(status)
        return out

    def _log_files(self, job: Job, role: str, k: int) -> tuple[str, str]:
        slurm_job = SlurmJob.of(job)
        check_replica(job, slurm_job.replicas if slurm_job else [], role, k)
        assert slurm_job is not None
        return slurm_job.log_file(f"-{role}-{k}.out"), slurm_job.log_file(f"-{role}-{k}.err")

    # -- control ----------------------------------------------------------------------------

    async def cancel(self, job: Job) -> None:
        # No state check first: scancel of a job that has ended or was forgotten is harmless.
        if (slurm_job := SlurmJob.of(job)) is None:
            return
        host = self.host_of(job)
        res = await host.run(["scancel", slurm_job.job_id])
        if res.returncode != 0 and not any(said in res.stderr for said in _SCANCEL_DONE):
            raise FailedPrecondition(f"scancel {slurm_job.job_id} on {host.label}: {res.error()}")


async def _exit_marks(host: Host, outputs: list[str]) -> dict[str, int | None]:
    """The exit code each batch output ends with (None: none, or the file is unreadable), read
    by one command per LAST_LINES_AT_ONCE files."""
    marks: dict[str, int | None] = {}
    for i in range(0, len(outputs), LAST_LINES_AT_ONCE):
        chunk = outputs[i : i + LAST_LINES_AT_ONCE]
        res = await host.run(["sh", "-c", _LAST_LINES, "sh", *chunk])
        lines = res.text.split("\n")
        if res.returncode != 0 or len(lines) != len(chunk) + 1:
            log.warning("slurm: reading batch outputs on %s failed: %s", host.label, res.error())
            continue
        for path, line in zip(chunk, lines, strict=False):
            marks[path] = exit_mark(line[1:]) if line.startswith("+") else None
    return marks


def _last_line(text: str) -> str:
    """What a command said last (Slurm's `fatal: ...` follows its lesser errors)."""
    lines = text.strip().splitlines()
    return lines[-1].strip() if lines else ""


def _in_dir(directory: str, name: str) -> str:
    """`directory/name`; "" is the login node's home directory, where relative paths start."""
    return f"{directory.rstrip('/')}/{name}" if directory else name


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:40].strip("._") or "app"


def create_scheduler(session_name: str, **kwargs: Any) -> SlurmScheduler:
    return SlurmScheduler(session_name, settings=kwargs.get("settings"))
