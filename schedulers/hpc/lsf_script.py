"""The LSF submit script of an app (hpc.lsf runs it): per replica a `bsub ... << 'EOF'` whose job
body is a `docker run` of the role's image, and what the job record keeps to find the jobs again.

- Identity: the app id is the LSF project (`-P`) of every job of the app; a replica's job (and
  container) is named `<app_id>-<role>-<k>`.
- Placement: the first replica is pinned to a host picked from `bhosts` (`-m`); it is the rank-0
  host every replica finds in TORCHX_RANK0_HOST. The other replicas start once it has started
  (`-w 'started("<job>")'`) on other hosts. A dry run's script shows RANK0_PLACEHOLDER where the
  submit writes the host in.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from txd.schedulers.api import Job, Macros, num_replicas
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.hpc.hosts import SshOpts, SshTarget, target_to_native
from txd.schedulers.hpc.precheck import Check
from txd.schedulers.options import opt
from txd.v1.app_pb2 import AppDef, Role

RANK0_ENV = "TORCHX_RANK0_HOST"
# The cluster's hosts with their job slots and GPUs, to pick the rank-0 host from.
BHOSTS = ("bhosts", "-noheader", "-o", "hname max ng")
# Stands for the rank-0 host in a dry run's script; the submit picks the host from bhosts.
RANK0_PLACEHOLDER = "<rank0-host>"

# What bsub prints for each job it accepted.
_SUBMITTED = re.compile(r"^Job <(\d+)> is submitted to (?:default )?queue <[^>]*>", re.M)
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
    precheck: bool = opt(
        True,
        "check before queueing what can be checked from here: the queue exists and is open, "
        "jobdir is writable; False: submit as is",
    )


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
    # The prechecks' results, for a dry run's text; None: not run (precheck=False).
    checks: list[Check] | None = None


def submitted_ids(bsub_stdout: str) -> list[str]:
    """The job ids the submit script's bsubs printed, in order."""
    return _SUBMITTED.findall(bsub_stdout)


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
        cpu, gpu = rank0_needs(app.roles[0])
        header[-1:-1] = [
            f"# {RANK0_PLACEHOLDER}: when submitted, the first host bhosts lists with {cpu} job",
            f"# slot(s) and {gpu} GPU(s)",
            "#",
        ]
    if opts.jobdir:
        header.append(f"mkdir -p -- {shlex.quote(opts.jobdir)}")
    script = "\n".join(header + blocks) + "\n"
    return BsubRequest(app_id, target, opts.jobdir, jobs, script, app, opts, rank0_host)


def rank0_needs(role: Role) -> tuple[int, int]:
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


def replicas_of(job: Job) -> list[LsfJob]:
    """The app's jobs, as native_of recorded them."""
    # No replicas recorded: a job this scheduler never submitted, which bjobs will not show.
    return [LsfJob(r["role"], r["replica_id"], r["job"]) for r in job.native.get("replicas", [])]


def check_request(app: AppDef, opts: LsfOpts) -> None:
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


def native_of(req: BsubRequest) -> dict[str, Any]:
    """What the job record keeps to find the app's jobs and logs after a restart (`Job.native`)."""
    return {
        "app_id": req.app_id,
        "ssh": target_to_native(req.target),
        "jobdir": req.jobdir,
        "replicas": [{"role": j.role, "replica_id": j.replica_id, "job": j.name} for j in req.jobs],
    }
