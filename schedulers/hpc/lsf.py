"""lsf: every replica is one LSF job (`bsub`) running a docker container, as TorchX's prototype.

A Run becomes one bash script: per replica a `bsub ... << 'EOF'` whose job body is a
`docker run` of the role's image. The script runs on this host or on a login node over SSH
(schedulers.hosts), so `txctl run --dryrun` prints exactly what is submitted.

- Identity: the app id is the LSF project (`-P`) of every job of the app; a replica's job (and
  container) is named `<app_id>-<role>-<k>`.
- Placement: the first replica is pinned to a host picked from `bhosts` (`-m`); it is the rank-0
  host every replica finds in TORCHX_RANK0_HOST. The other replicas start once it has started
  (`-w 'started("<job>")'`) on other hosts. LSF is asked only to submit: a dry run works where
  no LSF answers, and its script shows RANK0_PLACEHOLDER where the submit writes the host in.
- Status: LSF cannot push, so the daemon polls (`poll_interval`). One `bjobs -a` per host
  answers for every app at once; rows are matched to apps by project name. LSF forgets finished
  jobs after its CLEAN_PERIOD: an app bjobs no longer shows is reported as unknown (None).
- Fail-fast, as in TorchX: once a replica has failed, the poll bkills the app's other jobs; the
  app is FAILED once they have ended (status.fold: terminal only when every replica is).
- Logs: only with `jobdir` (a directory every execution host and the submission host share);
  each replica's container writes `<jobdir>/<job>.out` and `.err`, read with cat / tail -F.

Ignored, as in TorchX: retries, min_replicas, resource capabilities and named devices.
Not done: delete removes nothing (LSF ages finished jobs out itself; files in the jobdir belong
to the user), so `delete` is cancel.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from txd.schedulers.api import (
    Described,
    DryRunInfo,
    Job,
    Macros,
    SubmitContext,
    Submitted,
    make_unique,
    num_replicas,
)
from txd.schedulers.errors import (
    BackendUnavailable,
    FailedPrecondition,
    InvalidArgument,
    TxdError,
    Unsupported,
)
from txd.schedulers.fold import fold, group_replicas, replica_states
from txd.schedulers.hpc.base import BatchScheduler, check_replica
from txd.schedulers.hpc.hosts import Host, Hosts, Result, SshOpts, SshTarget, target_to_native
from txd.schedulers.options import opt
from txd.v1 import AppState
from txd.v1.app_pb2 import AppDef, AppStatus, ReplicaStatus, Role
from txd.v1.scheduler_pb2 import Capabilities

log = logging.getLogger(__name__)

RANK0_ENV = "TORCHX_RANK0_HOST"

# LSF job state -> AppState, as TorchX maps them; anything else is UNKNOWN.
LSF_STATES: dict[str, AppState] = {
    "DONE": AppState.SUCCEEDED,
    "EXIT": AppState.FAILED,
    "PEND": AppState.PENDING,
    "PSUSP": AppState.PENDING,
    "USUSP": AppState.PENDING,
    "SSUSP": AppState.PENDING,
    "RUN": AppState.RUNNING,
}
# bkill sends SIGINT first: a job it ended exits with 128 + 2.
SIGINT_EXIT = 130

# One query for every app: the user's jobs, finished ones included. job_name comes last so
# that a '|' in a (foreign) job name cannot shift the other fields.
BJOBS_FIELDS = ("jobid", "proj_name", "stat", "exit_code", "exec_host", "job_name")
BJOBS = ("bjobs", "-noheader", "-a", "-o", " ".join(BJOBS_FIELDS) + " delimiter='|'")
BHOSTS = ("bhosts", "-noheader", "-o", "hname max ng")
# Stands for the rank-0 host in a dry run's script; the submit picks the host from bhosts.
RANK0_PLACEHOLDER = "<rank0-host>"

_SUBMITTED = re.compile(r"^Job <(\d+)> is submitted to (?:default )?queue <[^>]*>", re.M)
_STAT = re.compile(r"^[A-Z]+$")  # PEND, RUN, DONE, EXIT, PSUSP ...
# What bjobs / bkill say about jobs that do not exist (any more): not a failure of the query.
_NO_JOB = re.compile(
    r"^(No (unfinished )?job found.*|Job <[\d\[\]]+> is not found"
    r"|Job <[\d\[\]]+>: (No matching job found|Job has already finished))$"
)
# docker's --shm-size: a number with an optional unit (b, k, m, g, t, p; "kb", "mib" ... too).
_SHM_SIZE = re.compile(r"^\d+(\.\d+)?([kmgtp]i?)?b?$", re.I)
# bsub options whose values LSF parses itself (resource, GPU and dependency expressions).
_EXPRESSIONS = frozenset({"-R", "-gpu", "-w"})
# bsub reads a line of its job script that begins with #BSUB as an option, wherever it is.
_BSUB_DIRECTIVE = re.compile(r"\n\s*#BSUB")
# Characters that keep a special meaning inside double quotes in a non-interactive shell.
_DQ_SPECIAL = re.compile(r'[$`"\\\n]')


@dataclass
class LsfOpts(SshOpts):
    lsf_queue: str | None = opt(None, "queue to submit the jobs to (default: the cluster's)")
    jobdir: str | None = opt(
        None,
        "absolute path of a directory shared by the submission and execution hosts: the jobs' "
        "working directory and where their output goes (logs need it); created if missing",
    )
    container_workdir: str | None = opt(None, "working directory inside the containers")
    host_network: bool = opt(
        False, "run the containers in the host's network and IPC namespaces (--net=host)"
    )
    shm_size: str = opt("64m", "size of /dev/shm in the containers (docker --shm-size)")


@dataclass(frozen=True)
class LsfJob:
    """One replica: one LSF job, named like its container."""

    role: str
    replica_id: int
    name: str


@dataclass
class BsubRequest:
    """The native request: the submit script and what is needed to find its jobs again. In a
    dry run `rank0_host` is None and the script has RANK0_PLACEHOLDER for it: the submit picks
    the host and builds the script again from `app` and `opts`."""

    app_id: str
    target: SshTarget | None
    jobdir: str | None
    jobs: list[LsfJob]
    script: str
    app: AppDef
    opts: LsfOpts
    rank0_host: str | None


@dataclass(frozen=True)
class BjobsRow:
    """One line of `bjobs -o`, fields as in BJOBS_FIELDS."""

    job_id: str
    project: str
    stat: str
    exit_code: str  # "-" while running, and for DONE jobs
    exec_host: str  # "-" while pending; "host", "4*host" or "hostA:hostB"
    name: str


# -- the submit script -------------------------------------------------------------------------


def clean_name(text: str) -> str:
    """Lowercase, only [a-z0-9-_], no leading '-': valid for LSF and docker names alike."""
    return re.sub(r"[^a-z0-9_-]", "", text.lower()).lstrip("-")


def _arg(value: str, expression: bool = False) -> str:
    """One shell word for the bsub line. Bare when safe, unless it is an LSF expression (the
    value of -R, -gpu, -w), which is quoted as LSF's documentation writes it; in double quotes
    when nothing in it is special there, else single-quoted. The script runs in a
    non-interactive bash, where '!' is not special."""
    quoted = shlex.quote(value)
    if (quoted == value and not expression) or _DQ_SPECIAL.search(value):
        return quoted
    return f'"{value}"'


def _heredoc_delimiter(body: str) -> str:
    """A delimiter no line of body equals (a value with newlines could hold a line "EOF")."""
    lines = set(body.split("\n"))
    delim, n = "EOF", 0
    while delim in lines:
        n += 1
        delim = f"EOF{n}"
    return delim


def docker_command(job: str, role: Role, opts: LsfOpts) -> list[str]:
    """The argv that runs one replica's container; role has its macros substituted."""
    argv = ["docker", "run", f"--name={job}"]
    for mount in role.mounts:
        kind = mount.WhichOneof("kind")
        if kind == "bind":
            mode = "ro" if mount.bind.read_only else "rw"
            argv += ["-v", f"{mount.bind.src_path}:{mount.bind.dst_path}:{mode}"]
        elif kind == "volume":
            spec = f"type=volume,src={mount.volume.src},dst={mount.volume.dst_path}"
            argv += ["--mount", spec + (",ro" if mount.volume.read_only else "")]
        elif kind == "device":
            dev = mount.device
            argv.append(
                f"--device={dev.src_path}:{dev.dst_path or dev.src_path}:{dev.permissions or 'rwm'}"
            )
    if opts.container_workdir:
        argv += ["-w", opts.container_workdir]
    if opts.host_network:
        argv += ["--net=host", "--ipc=host"]
    else:
        for _, port in sorted(role.port_map.items()):
            argv += ["-p", str(port)]
    if opts.shm_size:
        argv.append(f"--shm-size={opts.shm_size}")
    for key, value in sorted(role.env.items()):
        argv += ["-e", f"{key}={value}"]
    res = role.resource
    if res.cpu > 0:
        argv.append(f"--cpus={res.cpu}")
    if res.mem_mb > 0:
        argv.append(f"--memory={res.mem_mb * 1024 * 1024}")
    if res.gpu > 0:
        argv += ["--gpus", "all"]
    return [*argv, "--entrypoint", role.entrypoint, "--rm", role.image, *role.args]


def bsub_args(
    app_id: str, job: str, role: Role, opts: LsfOpts, head: str | None, rank0_host: str
) -> list[str]:
    """bsub's arguments for one replica; `head` is the first replica's job (None for itself)."""
    argv = ["bsub", "-P", app_id, "-J", job]
    if head is None:
        argv += ["-m", rank0_host]
    else:
        # Started after the head, away from its host (TorchX's placement). The name is quoted
        # as LSF asks for names that begin with a digit (an app named "1b", say).
        argv += ["-w", f'started("{head}")', "-R", f"select[hname!='{rank0_host}']"]
    if opts.jobdir:
        d = opts.jobdir
        argv += ["-cwd", d, "-outdir", d, "-oo", f"{d}/{job}.submit.out"]
        argv += ["-eo", f"{d}/{job}.submit.err"]
    if opts.lsf_queue:
        argv += ["-q", opts.lsf_queue]
    res = role.resource
    if res.cpu > 0:
        argv += ["-n", str(res.cpu)]
    # All of a replica's slots on one host; TorchX's "span[hosts=1]]" (stray bracket) fixed.
    span = "span[hosts=1]" + (f" rusage[mem={res.mem_mb}]" if res.mem_mb > 0 else "")
    argv += ["-R", span]
    if res.gpu > 0:
        argv += ["-gpu", f"num={res.gpu}:mode=shared:j_exclusive=yes"]
    return argv


def build_request(app_id: str, app: AppDef, opts: LsfOpts, rank0_host: str | None) -> BsubRequest:
    """The submit script for app: header, then one bsub with its docker job per replica.
    Without rank0_host (a dry run) the script has RANK0_PLACEHOLDER where the host goes."""
    host = rank0_host or RANK0_PLACEHOLDER
    jobs: list[LsfJob] = []
    blocks: list[str] = []
    head: str | None = None
    for role in app.roles:
        for k in range(num_replicas(role)):
            macros = Macros(img_root="", app_id=app_id, replica_id=str(k), rank0_env=RANK0_ENV)
            replica = macros.apply(role)
            replica.env[RANK0_ENV] = host
            job = f"{app_id}-{clean_name(f'{role.name}-{k}')}"
            jobs.append(LsfJob(role.name, k, job))
            argv = bsub_args(app_id, job, replica, opts, head, host)
            words = [_arg(a, expression=argv[n - 1] in _EXPRESSIONS) for n, a in enumerate(argv)]
            bsub = " ".join(words)
            body = shlex.join(docker_command(job, replica, opts))
            if opts.jobdir:
                out = shlex.quote(f"{opts.jobdir}/{job}.out")
                err = shlex.quote(f"{opts.jobdir}/{job}.err")
                body += f" > {out} 2> {err}"
            # A quoted delimiter: the submitting shell expands nothing in the job body, so
            # every value reaches the execution host's shell (and docker) exactly as written.
            delim = _heredoc_delimiter(body)
            blocks.append(f"{bsub} << '{delim}'\n{body}\n{delim}")
            head = head or job
    target = opts.ssh_target()
    where = f"on login node {target}" if target else "on this host"
    header = [
        "#!/bin/bash",
        "#",
        f"# Generated by txd: LSF app {app_id}",
        f"# Run with: /bin/bash -s < this script ({where})",
        "#",
        "set -e  # stop at the first bsub that fails",
    ]
    if rank0_host is None:
        cpu, gpu = _rank0_needs(app.roles[0])
        header[-1:-1] = [
            f"# {RANK0_PLACEHOLDER}: when submitted, the first host bhosts lists with {cpu} job",
            f"# slot(s) and {gpu} GPU(s)",
            "#",
        ]
    if opts.jobdir:
        header.append(f"mkdir -p -- {shlex.quote(opts.jobdir)}")
    script = "\n".join(header + blocks) + "\n"
    return BsubRequest(app_id, target, opts.jobdir, jobs, script, app, opts, rank0_host)


def _rank0_needs(role: Role) -> tuple[int, int]:
    """(job slots, GPUs) the rank-0 host must have for the first replica of role."""
    return max(role.resource.cpu, 1), role.resource.gpu


def pick_rank0_host(bhosts: str, cpu: int, gpu: int) -> str | None:
    """The first host of `bhosts -noheader -o "hname max ng"` with cpu job slots and gpu GPUs.
    "-" means no slot limit (max) or no GPUs (ng)."""
    for line in bhosts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        name, slots, gpus = fields[:3]
        try:
            fits = (slots == "-" or cpu <= int(slots)) and gpu <= (0 if gpus == "-" else int(gpus))
        except ValueError:
            continue
        if fits:
            return name
    return None


# -- status ------------------------------------------------------------------------------------


def parse_bjobs(text: str) -> list[BjobsRow]:
    """The rows of a BJOBS query (blank lines and bjobs' "no job" notes aside). Raises
    ValueError, naming the line, for one that is no row (cut short, fields missing or out of
    place, bytes that are not bjobs'): an app missing from a misread answer would be taken for
    one LSF has forgotten."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or _NO_JOB.match(line.strip()):
            continue
        fields = [f.strip() for f in line.split("|", len(BJOBS_FIELDS) - 1)]
        if len(fields) != len(BJOBS_FIELDS):
            raise ValueError(f"line {n} is not {len(BJOBS_FIELDS)} fields: {line!r:.80}")
        if not (fields[0].isdigit() and _STAT.match(fields[2])):
            raise ValueError(f"line {n} has fields out of place: {line!r:.80}")
        rows.append(BjobsRow(*fields))
    return rows


def replica_state(stat: str, exit_code: str, cancelled: bool = False) -> AppState:
    state = LSF_STATES.get(stat, AppState.UNKNOWN)
    if state == AppState.FAILED and (cancelled or exit_code == str(SIGINT_EXIT)):
        return AppState.CANCELLED
    return state


def _first_host(exec_host: str) -> str:
    """`4*hostA:hostB` -> hostA; "-" (not dispatched) -> ""."""
    first = exec_host.split(":")[0]
    first = first.split("*", 1)[-1]
    return "" if first == "-" else first


def _replica_status(role: str, k: int, row: BjobsRow, cancelled: bool) -> ReplicaStatus:
    state = replica_state(row.stat, row.exit_code, cancelled)
    out = ReplicaStatus(id=k, role=role, state=state, hostname=_first_host(row.exec_host))
    if row.stat == "DONE":
        out.exit_code = 0  # bjobs prints "-" for a zero exit code
    elif row.stat == "EXIT" and row.exit_code.isdigit():
        out.exit_code = int(row.exit_code)
    return out


def _status(
    app_id: str, replicas: Iterable[tuple[str, int, BjobsRow | None]], cancelled: bool
) -> AppStatus:
    out = AppStatus(app_id=app_id)
    reps: list[ReplicaStatus] = []
    notes: list[str] = []
    for role, k, row in replicas:
        if row is None:
            replica = ReplicaStatus(id=k, role=role, state=AppState.UNKNOWN)
            notes.append(f"{role}/{k}: LSF no longer shows its job")
        else:
            replica = _replica_status(role, k, row, cancelled)
            if replica.state == AppState.FAILED:
                code = replica.exit_code if replica.HasField("exit_code") else "?"
                notes.append(f"{role}/{k} exited with {code}")
            elif replica.state == AppState.UNKNOWN:
                notes.append(f"{role}/{k}: LSF state {row.stat}")
        reps.append(replica)
    out.roles.extend(group_replicas(reps))
    out.state = fold([r.state for r in reps])
    if out.state == AppState.CANCELLED:
        out.msg = "cancelled by request" if cancelled else "killed (exit code 130, as by bkill)"
    elif notes:
        out.msg = ", ".join(notes)
    return out


def _known_status(
    app_id: str, jobs: list[LsfJob], rows: list[BjobsRow], cancelled: bool
) -> AppStatus | None:
    """The app's status from its rows; None when bjobs shows none of its jobs."""
    if not rows:
        return None
    by_name: dict[str, BjobsRow] = {}
    for row in sorted(rows, key=lambda r: int(r.job_id)):
        by_name[row.name] = row  # a name submitted twice: the latest job counts
    return _status(app_id, ((j.role, j.replica_id, by_name.get(j.name)) for j in jobs), cancelled)


def _foreign_status(project: str, rows: list[BjobsRow], cancelled: bool) -> AppStatus:
    """An app known only from its job names `<project>-<role>-<k>` (as `list` sees every app)."""
    replicas = []
    for row in sorted(rows, key=lambda r: int(r.job_id)):
        role, _, k = row.name[len(project) + 1 :].rpartition("-")
        replicas.append((role, int(k), row))
    return _status(project, replicas, cancelled)


def _looks_like_app(row: BjobsRow) -> bool:
    """Jobs named `<project>-<role>-<k>`: submitted by txd or TorchX."""
    prefix = row.project + "-"
    if not row.name.startswith(prefix):
        return False
    _, sep, k = row.name[len(prefix) :].rpartition("-")
    return bool(sep) and k.isdigit()


# -- the scheduler -----------------------------------------------------------------------------


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

    def __init__(
        self, session_name: str, settings: Any = None, *, hosts: Hosts | None = None
    ) -> None:
        super().__init__(session_name, settings, hosts=hosts)
        # Apps bkilled by request in this daemon run, only to word their end "cancelled by
        # request". After a restart a bkilled replica is still recognised by its exit code 130.
        self._cancelled: set[str] = set()
        # Jobs bkilled because another replica of their app failed, until the app has ended:
        # each is bkilled once, not at every poll, so that LSF's SIGINT, SIGTERM, SIGKILL
        # sequence runs its course. Lost in a restart, which costs one more bkill.
        self._stopping: set[str] = set()

    # -- submission -------------------------------------------------------------------------

    async def _submit_dryrun(
        self, app: AppDef, opts: LsfOpts, ctx: SubmitContext
    ) -> DryRunInfo[BsubRequest]:
        _check(app, opts)
        app_id = clean_name(make_unique(app.name))
        req = build_request(app_id, app, opts, None)  # LSF is asked only at submit
        return DryRunInfo(app=app, request=req, opts=opts, render=lambda: req.script)

    async def _rank0_host(self, role: Role, opts: LsfOpts) -> str:
        host = self.hosts.get(opts.ssh_target())
        result = await host.run(BHOSTS)
        if result.returncode != 0:
            raise BackendUnavailable(f"bhosts on {host.label} failed: {result.error()}")
        cpu, gpu = _rank0_needs(role)
        found = pick_rank0_host(result.text, cpu, gpu)
        if found is None:
            raise InvalidArgument(
                "app.roles[0].resource",
                f"no LSF host has {cpu} job slot(s) and {gpu} GPU(s) for the first replica",
            )
        return found

    async def schedule(self, dryrun: DryRunInfo[BsubRequest]) -> Submitted:
        req = dryrun.request
        if req.rank0_host is None:
            rank0_host = await self._rank0_host(req.app.roles[0], req.opts)
            req = build_request(req.app_id, req.app, req.opts, rank0_host)
        host = self.hosts.get(req.target)
        result = await host.run(["/bin/bash", "-s"], input=req.script.encode())
        ids = _SUBMITTED.findall(result.text)
        if result.returncode != 0 or len(ids) != len(req.jobs):
            await self._kill_quietly(host, ids)
            failed = req.jobs[min(len(ids), len(req.jobs) - 1)].name
            undone = f"; killed the {len(ids)} job(s) already submitted" if ids else ""
            raise FailedPrecondition(f"bsub of {failed} failed: {result.error()}{undone}")
        # job_ids are for people reading the registry: bjobs finds the jobs by project.
        return Submitted(req.app_id, {**_native(req), "job_ids": ids})

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
        if result.returncode != 0 and not all(_NO_JOB.match(line) for line in said):
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
            out[job.app_id] = status = _known_status(job.app_id, _replicas(job), rows, cancelled)
            live = [r.job_id for r in rows if _live(r)]
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
            mine = [r for r in rows if _looks_like_app(r)]
            if mine:
                out.append(_foreign_status(project, mine, project in self._cancelled))
        return out

    def _log_files(self, job: Job, role: str, k: int) -> tuple[str, str]:
        names = {(j.role, j.replica_id): j.name for j in _replicas(job)}
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
        live = [r.job_id for r in (await self._bjobs(host)).get(job.app_id, []) if _live(r)]
        if not live:
            return
        self._cancelled.add(job.app_id)
        result = await host.run(["bkill", *live])
        if _refused(result):
            raise FailedPrecondition(f"bkill on {host.label} failed: {result.error()}")


def _live(row: BjobsRow) -> bool:
    return row.stat not in ("DONE", "EXIT")


def _refused(bkill: Result) -> bool:
    """bkill exits non-zero when any job could not be killed; jobs that ended meanwhile
    ("already finished", "No matching job found") are no failure."""
    said = bkill.stderr.decode(errors="replace").splitlines()
    trouble = [line for line in said if line.strip() and not _NO_JOB.match(line)]
    return bkill.returncode != 0 and bool(trouble or not said)


def _replicas(job: Job) -> list[LsfJob]:
    # No replicas recorded: a job this scheduler never submitted, which bjobs will not show.
    return [LsfJob(r["role"], r["replica_id"], r["job"]) for r in job.native.get("replicas", [])]


def _check(app: AppDef, opts: LsfOpts) -> None:
    """Rejects what LSF or docker would reject later, or what would be misread."""
    if opts.shm_size and not _SHM_SIZE.match(opts.shm_size):
        raise InvalidArgument(
            "cfg.shm_size", f"{opts.shm_size!r} is not a size such as 64m, 512k or 2g"
        )
    for name in ("jobdir", "container_workdir"):
        path = getattr(opts, name)
        if path is not None and (not path.startswith("/") or "\n" in path):
            raise InvalidArgument(
                f"cfg.{name}", f"must be an absolute path with no line break, got {path!r}"
            )
    if opts.lsf_queue is not None and (not opts.lsf_queue or re.search(r"\s", opts.lsf_queue)):
        raise InvalidArgument("cfg.lsf_queue", f"{opts.lsf_queue!r} is not a queue name")
    seen: dict[str, str] = {}
    for i, role in enumerate(app.roles):
        if not role.image:
            raise InvalidArgument(
                f"app.roles[{i}].image", "lsf runs every replica in a docker container: set one"
            )
        values = [(f"app.roles[{i}].args[{j}]", a) for j, a in enumerate(role.args)]
        values += [(f"app.roles[{i}].env[{k}]", v) for k, v in sorted(role.env.items())]
        for where, value in values:
            if _BSUB_DIRECTIVE.search(value):
                raise InvalidArgument(
                    where, "has a line beginning with #BSUB, which bsub would take for an option"
                )
        cleaned = clean_name(role.name)
        if cleaned in seen:
            raise InvalidArgument(
                f"app.roles[{i}].name",
                f"{role.name!r} and {seen[cleaned]!r} give the same LSF job names "
                f"({cleaned!r}: lowercase, [a-z0-9_-] only); rename one",
            )
        seen[cleaned] = role.name


def _native(req: BsubRequest) -> dict[str, Any]:
    """What the registry keeps to find the app's jobs and logs after a restart."""
    return {
        "app_id": req.app_id,
        "ssh": target_to_native(req.target),
        "jobdir": req.jobdir,
        "replicas": [{"role": j.role, "replica_id": j.replica_id, "job": j.name} for j in req.jobs],
    }


def create_scheduler(session_name: str, **kwargs: Any) -> LsfScheduler:
    # state_dir is not needed: LSF keeps the jobs, the daemon keeps `native`.
    return LsfScheduler(session_name, settings=kwargs.get("settings"))
