"""slurm: an AppDef becomes one heterogeneous sbatch job, on this host or on a login node over
SSH (schedulers.hosts).

Every replica of every role is one hetjob component named `<role>-<k>`, and one `srun` starts
them all, each with its own output files `slurm-<jobid>-<role>-<k>.out|.err` in the job's
working directory. The batch script is complete in itself (every option is an #SBATCH line), so
what DryRun prints is exactly what sbatch gets on stdin.

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
import shlex
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from txd.schedulers.api import (
    Described,
    DryRunInfo,
    Job,
    Macros,
    NoAnswer,
    SubmitContext,
    Submitted,
    is_terminal,
    make_unique,
    num_replicas,
)
from txd.schedulers.errors import BackendUnavailable, FailedPrecondition, InvalidArgument
from txd.schedulers.fold import fold, group_replicas
from txd.schedulers.hpc.base import BatchScheduler, check_replica
from txd.schedulers.hpc.hosts import (
    Host,
    Hosts,
    SshOpts,
    SshTarget,
    target_from_native,
    target_to_native,
)
from txd.schedulers.options import opt
from txd.schedulers.workspace import files as ws
from txd.v1 import AppState
from txd.v1.app_pb2 import AppDef, AppStatus, ReplicaStatus, Role
from txd.v1.scheduler_pb2 import Capabilities

log = logging.getLogger(__name__)

RANK0_ENV = "SLURM_JOB_NODELIST_HET_GROUP_0"
# Slurm 24.11 replaced per-task GPU requests in hetjobs with per-node ones.
GPUS_PER_NODE_SINCE = (24, 11)
# What the batch script prints last; read back when Slurm has forgotten a job.
EXIT_MARK = "txd: exit code "
# Where workspace copies go, in the job_dir.
WORKSPACES_DIR = "txd-workspaces"

_TIME = re.compile(r"^(\d+|\d+:\d+|\d+:\d+:\d+|\d+-\d+|\d+-\d+:\d+|\d+-\d+:\d+:\d+)$")
_JOB_ID = re.compile(r"^(\d+)(?:;\S+)?$")  # sbatch --parsable: "<id>" or "<id>;<cluster>"
# Stands for the job id while the script is built; becomes "$SLURM_JOB_ID" in the script.
# NUL-delimited, as no value can be (validate.py refuses NUL): a user's string never forges it.
_JOB_ID_MARK = "\0txd-job-id\0"
# What scancel says of a job that has ended, or that Slurm has forgotten: cancel is a no-op.
_SCANCEL_DONE = (b"already completing or completed", b"Invalid job id specified")

_STATES = {
    **dict.fromkeys(
        [
            "BOOT_FAIL",
            "DEADLINE",
            "FAILED",
            "NODE_FAIL",
            "OUT_OF_MEMORY",
            "PREEMPTED",
            "REVOKED",
            "TIMEOUT",
        ],
        AppState.FAILED,
    ),
    "CANCELLED": AppState.CANCELLED,
    "COMPLETED": AppState.SUCCEEDED,
    **dict.fromkeys(
        ["PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED"],
        AppState.PENDING,
    ),
    **dict.fromkeys(
        ["RUNNING", "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING"], AppState.RUNNING
    ),
}


def slurm_state(text: str) -> AppState:
    """TorchX's mapping of a Slurm job state ("CANCELLED by 0" counts as CANCELLED)."""
    word = text.split()[0].rstrip("+") if text.strip() else ""
    return _STATES.get(word, AppState.UNKNOWN)


def exit_code(wait_status: int) -> int:
    """Slurm reports exit codes as raw wait statuses: 768 is exit 3, 15 is SIGTERM (143)."""
    signal = wait_status & 0x7F
    return 128 + signal if signal else (wait_status >> 8) & 0xFF


@dataclass
class SlurmOpts(SshOpts):
    partition: str | None = opt(None, "partition of every replica (default: the cluster's)")
    time: str | None = opt(
        None, "time limit: minutes, m:s, h:m:s, d-h, d-h:m or d-h:m:s (default: the partition's)"
    )
    account: str | None = opt(None, "account to charge")
    qos: str | None = opt(None, "quality of service")
    constraint: str | None = opt(None, "node features required, e.g. 'a100&ib'")
    exclusive: bool = opt(False, "do not share nodes with other jobs")
    nomem: bool = opt(False, "do not request memory (--mem), for clusters that forbid it")
    comment: str | None = opt(None, "comment stored with the job")
    mail_user: str | None = opt(None, "who gets mail about the job")
    mail_type: str | None = opt(None, "which events are mailed: BEGIN, END, FAIL, ALL ...")
    job_dir: str | None = opt(
        None,
        "working directory of the job, where its log files go; created if missing (default: "
        "the caller's directory, or the home directory on a login node)",
    )


@dataclass
class SlurmJob:
    """What txd keeps of a submitted job: persisted as the job's `native` facts."""

    replicas: list[tuple[str, int]]  # (role, k) of each hetjob component, in order
    workdir: str  # "" means the login node's home directory
    ssh: dict[str, Any] | None = None  # hosts.target_to_native
    job_id: str = ""
    # In the log files' names: Slurm may hand out a job id again (after slurmctld lost its
    # state, or at MaxJobId), and a new job must not write over an old one's logs.
    tag: str = ""

    @property
    def target(self) -> SshTarget | None:
        return target_from_native(self.ssh)

    def path(self, name: str) -> str:
        return f"{self.workdir.rstrip('/')}/{name}" if self.workdir else name

    def log_file(self, what: str) -> str:
        """`slurm-<jobid>-<tag><what>` in the job's directory: `.out` is the batch script's
        output, `-<role>-<k>.out|.err` a replica's."""
        return self.path(f"slurm-{self.job_id}{_tagged(self.tag)}{what}")

    @classmethod
    def of(cls, job: Job) -> SlurmJob | None:
        """The Slurm job `job` stands for; None when its facts name none (a job this scheduler
        never submitted), which the contract treats as a job the backend does not know."""
        return cls.from_native(job.native) if job.native.get("job_id") else None

    @classmethod
    def from_native(cls, native: Mapping[str, Any]) -> SlurmJob:
        return cls(
            replicas=[(r, int(k)) for r, k in native["replicas"]],
            workdir=native["workdir"],
            ssh=native.get("ssh"),
            job_id=native["job_id"],
            tag=native.get("tag", ""),  # jobs recorded before tags were
        )


@dataclass
class SbatchRequest:
    script: str
    job: SlurmJob
    env: dict[str, str] = field(default_factory=dict)  # sbatch's environment on this host
    make_dir: bool = False  # create job.workdir first (an explicit job_dir)
    workspace_copy: str = ""  # removed when sbatch refuses the job


def app_id_of(target: SshTarget | None, job_id: str) -> str:
    """Slurm job ids are unique per cluster only: a login node's jobs carry its name."""
    return f"{target.host}:{job_id}" if target else job_id


def _quote(token: str) -> str:
    """shell-quotes a token; the job id mark becomes "$SLURM_JOB_ID", expanded by the shell."""
    if _JOB_ID_MARK not in token:
        return shlex.quote(token)
    quoted = "'" + token.replace("'", "'\"'\"'") + "'"
    return quoted.replace(_JOB_ID_MARK, "'\"$SLURM_JOB_ID\"'")


_DIRECTIVE_OPTS = ("partition", "account", "qos", "constraint", "comment", "mail_user", "mail_type")


def _check_directives(opts: SlurmOpts, workdir: str, workdir_field: str) -> None:
    """An #SBATCH line ends at a line break, quoted or not: the rest of a value would be a line
    of the script, run by bash (`-c comment=$'x\\ncurl ... | sh #'`, or a directory named so)."""
    values = {workdir_field: workdir}
    values.update({f"cfg.{name}": getattr(opts, name) or "" for name in _DIRECTIVE_OPTS})
    for where, value in values.items():
        if "\n" in value or "\r" in value:
            raise InvalidArgument(
                where, f"{value!r} has a line break, which an #SBATCH line cannot hold"
            )


def _component_opts(role: Role, opts: SlurmOpts, version: tuple[int, int]) -> list[str]:
    out = ["--requeue"] if role.max_retries else []
    for name in ("partition", "time", "account", "qos", "constraint"):
        if (value := getattr(opts, name)) is not None:
            out.append(f"--{name}={value}")
    if opts.exclusive:
        out.append("--exclusive")
    out.append("--ntasks-per-node=1")
    res = role.resource
    if res.cpu > 0:
        out.append(f"--cpus-per-task={res.cpu}")
    if res.mem_mb > 0 and not opts.nomem:
        out.append(f"--mem={res.mem_mb}")
    if res.gpu > 0:
        if version >= GPUS_PER_NODE_SINCE:
            out.append(f"--gpus-per-node={res.gpu}")
        else:
            out += [f"--gpus-per-task={res.gpu}", "--ntasks=1"]
    return out


def _tagged(tag: str) -> str:
    return f"-{tag}" if tag else ""


def _srun_group(role: Role, k: int, app_id: str, tag: str) -> list[str]:
    """One component's part of the srun line: its output files, env and command."""
    macros = Macros(img_root=role.image, app_id=app_id, replica_id=str(k), rank0_env=RANK0_ENV)
    role = macros.apply(role)
    base = f"slurm-{_JOB_ID_MARK}{_tagged(tag)}-{role.name}-{k}"
    tokens = [f"--output={base}.out", f"--error={base}.err", "--wait=60", "--kill-on-bad-exit=1"]
    # env(1) rather than --export=ALL,K=V: Slurm splits --export at commas.
    if role.env:
        tokens += ["env", *(f"{key}={value}" for key, value in sorted(role.env.items()))]
    tokens += [role.entrypoint, *role.args]
    return [_quote(t) for t in tokens]


def build_script(
    app: AppDef,
    opts: SlurmOpts,
    workdir: str,
    version: tuple[int, int],
    app_id_prefix: str = "",
    tag: str = "",
) -> str:
    """The sbatch script of an app. `app_id_prefix` + the job id is what ${app_id} expands to;
    `tag` goes into the log files' names (SlurmJob.tag)."""
    app_id = app_id_prefix + _JOB_ID_MARK
    lines = [
        "#!/bin/bash",
        f"# txd: app {app.name!r}, {sum(num_replicas(r) for r in app.roles)} replica(s). "
        "Submit with: sbatch --parsable < this-file",
    ]
    job_opts = [f"--chdir={workdir}"] if workdir else []
    job_opts.append(f"--output=slurm-%j{_tagged(tag)}.out")
    for name in ("comment", "mail_user", "mail_type"):
        if (value := getattr(opts, name)) is not None:
            job_opts.append(f"--{name.replace('_', '-')}={value}")
    lines += [f"#SBATCH {shlex.quote(o)}" for o in job_opts]
    groups = []
    first = True
    for role in app.roles:
        comp = _component_opts(role, opts, version)
        for k in range(num_replicas(role)):
            if not first:
                lines.append("#SBATCH hetjob")
            first = False
            lines.append(f"#SBATCH --job-name={shlex.quote(f'{role.name}-{k}')}")
            lines += [f"#SBATCH {o}" for o in comp]
            groups.append(" ".join(_srun_group(role, k, app_id, tag)))
    retries = min(r.max_retries for r in app.roles)
    lines += [
        "",
        "export PYTHONUNBUFFERED=1 SLURM_UNBUFFEREDIO=1",
        f"export TORCHX_MAX_RETRIES={retries}",
        "",
        "srun " + " \\\n  : ".join(groups),
        "exitcode=$?",
        'restarts="${SLURM_RESTART_COUNT:-0}"',
        'if [ "$exitcode" -ne 0 ] && [ "$TORCHX_MAX_RETRIES" -gt "$restarts" ]; then',
        '  echo "txd: exit code $exitcode, requeued (retry $((restarts + 1)))"',
        # Slurm ends this attempt itself; an exit racing it could fail the requeued job.
        '  scontrol requeue "$SLURM_JOB_ID" && exec sleep 300',
        "fi",
        f'echo "{EXIT_MARK}$exitcode"',
        'exit "$exitcode"',
        "",
    ]
    return "\n".join(lines)


@dataclass
class Component:
    """One line of squeue: a hetjob component (or a whole job that has one component)."""

    job_id: str  # the job's id: the hetjob leader's id for every component
    offset: int
    state: str
    exit_status: int
    derived_status: int
    nodes: str
    restarts: int
    reason: str
    name: str


# Name last: it is free text and may hold the delimiter.
SQUEUE_FIELDS = (
    "JobID,HetJobID,HetJobOffset,State,exit_code,DerivedEC,NodeList,RestartCnt,Reason,Name"
)


def squeue_argv() -> list[str]:
    # Formatted output, not --json: 22.05's --json ignores filters and returns every user's jobs.
    fmt = ",".join(f"{f}:|" for f in SQUEUE_FIELDS.split(","))
    return ["squeue", "--me", "--states=all", "--noheader", f"--Format={fmt}"]


_SQUEUE_COLUMNS = len(SQUEUE_FIELDS.split(","))
_SQUEUE_STATE = re.compile(r"^[A-Z_]+$")
_SQUEUE_ID = re.compile(r"^(\d*|N/A)$")


def parse_squeue(text: str) -> dict[str, list[Component]]:
    """Components by job id, ordered by hetjob offset. Raises ValueError, naming the line, for
    output not in SQUEUE_FIELDS' format (cut short, columns missing, bytes that are no squeue
    line): a job missing from a misread answer would be taken for one Slurm has forgotten."""
    jobs: dict[str, list[Component]] = defaultdict(list)
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", 9)
        if len(parts) < 10 or not line.endswith("|"):  # every field ends with the delimiter
            raise ValueError(f"line {n} is not {_SQUEUE_COLUMNS} fields: {line!r:.80}")
        jid, het, offset, state, ec, dec, nodes, restarts, reason, name = parts
        numbers = (ec, dec, restarts)
        if not (
            jid[:1].isdigit()
            and _SQUEUE_ID.match(het)
            and _SQUEUE_ID.match(offset)
            and _SQUEUE_STATE.match(state)
            and all(x.isdigit() for x in numbers)
        ):
            raise ValueError(f"line {n} has fields out of place: {line!r:.80}")
        job_id = het if het not in ("", "0", "N/A") else jid
        jobs[job_id].append(
            Component(
                job_id=job_id,
                offset=int(offset) if offset.isdigit() else 0,
                state=state,
                exit_status=int(ec),
                derived_status=int(dec),
                nodes=nodes.strip(),
                restarts=int(restarts),
                reason=reason.strip(),
                name=name.removesuffix("|").strip(),
            )
        )
    for comps in jobs.values():
        comps.sort(key=lambda c: c.offset)
    return dict(jobs)


def status_of(job: SlurmJob, comps: list[Component]) -> AppStatus:
    """The app's status from its components (matched to replicas by hetjob offset)."""
    status = AppStatus()
    replicas = []
    states = []
    # A component's DerivedEC is its srun step's exit; when no step reported one (cancelled,
    # or the script failed before srun) every replica gets the batch script's exit instead.
    steps_reported = any(_steps_status(c) for c in comps)
    for i, (role, k) in enumerate(job.replicas):
        comp = comps[i] if i < len(comps) else comps[0]
        state = slurm_state(comp.state)
        states.append(state)
        rep = ReplicaStatus(id=k, role=role, state=state)
        if _started(comp):
            rep.hostname = comp.nodes
        if state == AppState.SUCCEEDED:
            # COMPLETED: the latest attempt's batch script exited 0, which it does only when
            # srun did, that is when every replica did (whatever DerivedEC kept from a failed
            # earlier attempt).
            rep.exit_code = 0
        elif is_terminal(state):
            raw = _steps_status(comp) if steps_reported else comp.exit_status
            rep.exit_code = exit_code(raw)
        replicas.append(rep)
    status.roles.extend(group_replicas(replicas))
    leader = comps[0]
    status.num_restarts = leader.restarts
    status.state = fold(states)
    if status.state in (AppState.FAILED, AppState.CANCELLED):
        code = exit_code(leader.exit_status)
        status.msg = f"Slurm job {job.job_id} {leader.state}" + (
            f", exit code {code}" if code else ""
        )
        if leader.reason and leader.reason not in ("None", "NonZeroExitCode"):
            status.msg += f" ({leader.reason})"
    elif status.state == AppState.PENDING and leader.reason not in ("", "None"):
        status.msg = f"pending: {leader.reason}"
    return status


def _started(comp: Component) -> bool:
    """Whether the component's latest attempt got nodes (Slurm clears them on a requeue)."""
    return bool(comp.nodes) and comp.nodes not in ("(null)", "N/A")


def _steps_status(comp: Component) -> int:
    """The component's DerivedEC where it can be the latest attempt's. Slurm keeps the highest
    step exit of every attempt of a requeued job, and clears the nodes when it requeues: one
    without nodes has not started its latest attempt, so its DerivedEC is an earlier one's.
    One that has started may still show an earlier attempt's higher code: squeue has nothing
    per attempt (sacct has, with accounting on)."""
    return comp.derived_status if _started(comp) else 0


SACCT_ARGV = ["sacct", "-P", "-n", "-X", "-o", "JobID,State,ExitCode"]


def parse_sacct(text: str) -> dict[str, tuple[str, int]]:
    """(state, exit code) of whole jobs from SACCT_ARGV's output. A hetjob's components are
    `<id>+<offset>` rows: the leader's speaks for the job. ExitCode is `<code>:<signal>`."""
    out: dict[str, tuple[str, int]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3:
            continue
        jid, state, code = parts[:3]
        job_id, _, offset = jid.partition("+")
        if not job_id.isdigit() or offset not in ("", "0") or job_id in out:
            continue
        status, _, signal = code.partition(":")
        if signal.isdigit() and int(signal):
            out[job_id] = (state, 128 + int(signal))
        else:
            out[job_id] = (state, int(status) if status.isdigit() else 0)
    return out


_VERSION = re.compile(rb"(\d+)\.(\d+)")


def _sbatch_env(caller: dict[str, str]) -> dict[str, str]:
    """sbatch hands its environment to the job, so it gets the caller's (as if the caller ran
    it), except for the cluster's address: that is the daemon's, the cluster it polls."""
    env = dict(caller)
    env.pop("SLURM_CONF", None)
    if "SLURM_CONF" in os.environ:
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    return env


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

    def __init__(
        self, session_name: str, settings: Any = None, *, hosts: Hosts | None = None
    ) -> None:
        super().__init__(session_name, settings, hosts=hosts)
        # Per cluster, not per job: keyed by the Host (one per login node, and this host).
        self._versions: dict[Host, tuple[int, int]] = {}
        self._no_accounting: set[Host] = set()

    # -- submission -------------------------------------------------------------------------

    async def _submit_dryrun(
        self, app: AppDef, opts: SlurmOpts, ctx: SubmitContext
    ) -> DryRunInfo[SbatchRequest]:
        if opts.time is not None and not _TIME.match(opts.time):
            raise InvalidArgument(
                "cfg.time",
                f"{opts.time!r} is not a Slurm time: minutes, m:s, h:m:s, d-h, d-h:m or d-h:m:s",
            )
        target = opts.ssh_target()
        workdir = opts.job_dir or ("" if target else ctx.cwd)
        _check_directives(opts, workdir, "cfg.job_dir" if opts.job_dir else "cwd")
        version = (0, 0)
        if any(r.resource.gpu > 0 for r in app.roles):
            version = await self._version(self.hosts.get(target))
        prefix = f"{target.host}:" if target else ""
        tag = make_unique("", 6)
        script = build_script(app, opts, workdir, version, prefix, tag)
        replicas = [(r.name, k) for r in app.roles for k in range(num_replicas(r))]
        job = SlurmJob(replicas, workdir, target_to_native(target), tag=tag)
        req = SbatchRequest(script, job, {} if target else _sbatch_env(ctx.env), bool(opts.job_dir))
        if ctx.workspace:  # prepare_workspace made the copy the job's directory
            req.workspace_copy = workdir
        where = f" (on {target})" if target else ""
        return DryRunInfo(
            app=app,
            request=req,
            opts=opts,
            render=lambda: f"# sbatch --parsable{where} < script\n{script}",
        )

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

    async def _version(self, host: Host) -> tuple[int, int]:
        if host not in self._versions:
            res = await host.run(["sinfo", "--version"])
            m = _VERSION.search(res.stdout)
            if res.returncode != 0 or not m:
                raise BackendUnavailable(f"cannot tell the Slurm version: {res.error()}")
            self._versions[host] = (int(m[1]), int(m[2]))
        return self._versions[host]

    async def schedule(self, dryrun: DryRunInfo[SbatchRequest]) -> Submitted:
        req = dryrun.request
        job = req.job
        host = self.hosts.get(job.target)
        env = req.env or None
        if req.make_dir:
            made = await host.run(["mkdir", "-p", "--", job.workdir])
            if made.returncode != 0:
                raise FailedPrecondition(f"cannot create job_dir {job.workdir}: {made.error()}")
        res = await host.run(["sbatch", "--parsable"], input=req.script.encode(), env=env)
        m = _JOB_ID.match(res.text.strip())
        if res.returncode != 0 or not m:
            if req.workspace_copy:  # nothing left behind
                await host.run(["rm", "-rf", "--", req.workspace_copy])
            raise FailedPrecondition(f"sbatch on {host.label} refused the job: {res.error()}")
        job = replace(job, job_id=m[1])
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
            else:
                forgotten[job.app_id] = slurm_job
        if forgotten:
            out.update(await self._settle_forgotten(host, forgotten))
        return out

    async def _squeue(self, host: Host) -> dict[str, list[Component]]:
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
        """Statuses of jobs squeue no longer shows: they ended more than MinJobAge ago. A job
        nothing can settle is None: the daemon records it UNKNOWN and stops asking. While
        sacct fails for another reason than accounting being off (slurmdbd unreachable), such
        a job is NoAnswer: kept stale, asked again next poll."""
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
        out: dict[str, Described] = {}
        for app_id, job in jobs.items():
            if job.job_id in final:
                state_text, code = final[job.job_id]
                out[app_id] = _settled(job, slurm_state(state_text), code, "sacct")
            elif (mark := await _exit_mark(host, job)) is not None:
                state = AppState.SUCCEEDED if mark == 0 else AppState.FAILED
                out[app_id] = _settled(job, state, mark, "its batch output")
            elif sacct_failed:
                out[app_id] = NoAnswer(
                    f"squeue no longer shows job {job.job_id} and {sacct_failed}"
                )
            else:
                log.warning(
                    "slurm: on %s, job %s ended more than MinJobAge ago, accounting is off and "
                    "its batch output has no exit code: its end is unknown",
                    host.label,
                    job.job_id,
                )
                out[app_id] = None
        return out

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


def _settled(job: SlurmJob, state: AppState, code: int, source: str) -> AppStatus:
    status = AppStatus(state=state)
    status.msg = f"Slurm job {job.job_id} ended while txd was away (from {source})"
    if state == AppState.UNKNOWN:
        return status
    replicas = [ReplicaStatus(id=k, role=r, state=state) for r, k in job.replicas]
    status.roles.extend(group_replicas(replicas))
    if code:
        status.msg += f", exit code {code}"
    return status


async def _exit_mark(host: Host, job: SlurmJob) -> int | None:
    res = await host.run(["tail", "-n", "1", "--", job.log_file(".out")])
    last = res.text.strip()
    if res.returncode == 0 and last.startswith(EXIT_MARK):
        code = last.removeprefix(EXIT_MARK)
        return int(code) if code.isdigit() else None
    return None


def _in_dir(directory: str, name: str) -> str:
    """`directory/name`; "" is the login node's home directory, where relative paths start."""
    return f"{directory.rstrip('/')}/{name}" if directory else name


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:40].strip("._") or "app"


def create_scheduler(session_name: str, **kwargs: Any) -> SlurmScheduler:
    return SlurmScheduler(session_name, settings=kwargs.get("settings"))
