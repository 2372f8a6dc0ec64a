"""The sbatch script of a Slurm app, and what txd keeps of the job it becomes (hpc.slurm submits
it).

Every replica of every role is one hetjob component named `<role>-<k>`, and one `srun` starts
them all, each with its own output files `slurm-<jobid>-<tag>-<role>-<k>.out|.err` in the job's
working directory; the batch script's own output is `slurm-<jobid>-<tag>.out`. The tag is the
submission's own: Slurm hands a job id out again (slurmctld restarted without its state, ids
wrapping at MaxJobId), and a new job must not write into an earlier one's logs, which txd reads
(and settles a forgotten job from). TorchX's names for the same files (`slurm-<jobid>.out`,
`slurm-<jobid>-<role>-<k>.out|.err`) are hard links the script makes (LINK_LOGS); a job given
an id again re-points them, leaving the earlier job's files whole under their tagged names.

The batch script is complete in itself (every option is an #SBATCH line), so what DryRun prints
is exactly what `sbatch --parsable` gets on stdin. Its last line of output is
`txd: exit code N` (EXIT_MARK), read back when Slurm has forgotten the job.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from txd.schedulers.api import Job, Macros, num_replicas
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.hpc.hosts import SshOpts, SshTarget, target_from_native
from txd.schedulers.hpc.precheck import Check
from txd.schedulers.options import opt
from txd.v1.app_pb2 import AppDef, Role

RANK0_ENV = "SLURM_JOB_NODELIST_HET_GROUP_0"
# Slurm 24.11 replaced per-task GPU requests in hetjobs with per-node ones.
GPUS_PER_NODE_SINCE = (24, 11)
# The version assumed when `sinfo --version` cannot tell (no Slurm client or configuration on
# the host, as in a dry run off the cluster): TorchX's (0.7 always asks --gpus-per-task; later
# releases assume 24.05 when sinfo fails), so GPUs are asked per task.
DEFAULT_VERSION = (24, 5)
# TorchX's rule: a partition whose nodes report at most this much memory (MB) gets no --mem
# (such clusters, AWS ParallelCluster's among them, refuse every memory request: its #2198).
NOMEM_AT_MOST_MB = 1000
# The partitions' memory per node, in MB (`debug*|4000`; `*`: the default partition).
SINFO_MEMORY_ARGV = ("sinfo", "--noconvert", "--noheader", "--format=%P|%m")
# What the batch script prints last; read back when Slurm has forgotten a job.
EXIT_MARK = "txd: exit code "
# The script goes to sbatch's stdin; it answers the job id alone.
SBATCH_ARGV = ("sbatch", "--parsable")

# sbatch --time's forms (man sbatch): minutes, m:s, h:m:s, d-h, d-h:m, d-h:m:s; and, in any
# case, the words Slurm reads as no limit (as it reads a limit of 0).
_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", re.ASCII)
NO_LIMIT = ("unlimited", "infinite", "-1")
TIME_FORMS = "minutes, m:s, h:m:s, d-h, d-h:m, d-h:m:s, or UNLIMITED (also INFINITE, -1, 0)"
_JOB_ID = re.compile(r"^(\d+)(?:;\S+)?$")  # sbatch --parsable: "<id>" or "<id>;<cluster>"
# Stands for the job id while the script is built; becomes "$SLURM_JOB_ID" in the script.
# NUL-delimited, as no value can be (validate.py refuses NUL): a user's string never forges it.
_JOB_ID_MARK = "\0txd-job-id\0"


@dataclass
class SlurmOpts(SshOpts):
    partition: str | None = opt(None, "partition of every replica (default: the cluster's)")
    time: str | None = opt(None, f"time limit: {TIME_FORMS} (default: the partition's)")
    account: str | None = opt(None, "account to charge")
    qos: str | None = opt(None, "quality of service")
    constraint: str | None = opt(None, "node features required, e.g. 'a100&ib'")
    exclusive: bool = opt(False, "do not share nodes with other jobs")
    nomem: bool = opt(
        False,
        "do not request memory (--mem), for clusters that forbid it (left out anyway on a "
        f"partition whose nodes report at most {NOMEM_AT_MOST_MB} MB, as TorchX does)",
    )
    comment: str | None = opt(None, "comment stored with the job")
    mail_user: str | None = opt(None, "who gets mail about the job")
    mail_type: str | None = opt(None, "which events are mailed: BEGIN, END, FAIL, ALL ...")
    job_dir: str | None = opt(
        None,
        "working directory of the job, where its log files go; created if missing (default: "
        "the caller's directory, or the home directory on a login node)",
    )
    precheck: bool = opt(
        True,
        "check before queueing what would fail the job at once (partition, time limit, "
        "resources, sbatch --test-only, entrypoints, a writable job_dir); False: submit as is",
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
    workdir_field: str = "cfg.job_dir"  # how a refusal names job.workdir
    # The prechecks' results, for a dry run's text; None: not run (precheck=False).
    checks: list[Check] | None = None


def time_minutes(text: str) -> float | None:
    """A Slurm time limit in minutes, math.inf for none (UNLIMITED, INFINITE, -1 or 0); None
    for what sbatch --time does not take. The form decides what the numbers mean: `m`, `m:s`,
    `h:m:s`, `d-h`, `d-h:m`, `d-h:m:s`."""
    if text.lower() in NO_LIMIT:
        return math.inf
    m = _TIME.fullmatch(text)
    if not m:
        return None
    days, a, b, c = m.groups()
    if days is not None:  # d-h[:m[:s]]
        value = int(days) * 1440 + int(a) * 60 + int(b or 0) + int(c or 0) / 60
    elif c is not None:  # h:m:s
        value = int(a) * 60 + int(b) + int(c) / 60
    elif b is not None:  # m:s
        value = int(a) + int(b) / 60
    else:
        value = float(a)
    return value or math.inf  # "A time limit of zero requests that no time limit be imposed"


def check_time(opts: SlurmOpts) -> None:
    if opts.time is not None and time_minutes(opts.time) is None:
        raise InvalidArgument("cfg.time", f"{opts.time!r} is not a Slurm time: {TIME_FORMS}")


def partition_memory(sinfo_out: str) -> tuple[dict[str, int], str | None]:
    """Each partition's memory per node (MB) from SINFO_MEMORY_ARGV's output, and the default
    partition's name. As TorchX reads it: a partition's first line counts, and a `+` (nodes of
    several sizes: the smallest, then `+`) is dropped."""
    out: dict[str, int] = {}
    default = None
    for line in sinfo_out.splitlines():
        name, sep, mem = line.strip().partition("|")
        mem = mem.strip().rstrip("M+")
        if not sep or not mem.isdigit():
            continue
        if name.endswith("*"):
            name = name.rstrip("*")
            default = default or name
        out.setdefault(name, int(mem))
    return out, default


def small_partitions(
    memory: Mapping[str, int], default: str | None, partition: str | None
) -> list[tuple[str, int]]:
    """The job's partitions (the named ones, or the default) with their memory, when every one
    reports at most NOMEM_AT_MOST_MB (TorchX's rule: then --mem is left out); else []."""
    names = partition.split(",") if partition else [default] if default else []
    found = [(n, memory[n]) for n in names if n in memory]
    if not names or len(found) != len(names):
        return []  # unknown: memory is requested, as TorchX does
    return found if all(mb <= NOMEM_AT_MOST_MB for _, mb in found) else []


def submitted_job_id(sbatch_stdout: str) -> str | None:
    """The job id in what `sbatch --parsable` printed; None if it printed none."""
    m = _JOB_ID.match(sbatch_stdout.strip())
    return m[1] if m else None


def _quote(token: str) -> str:
    """shell-quotes a token; the job id mark becomes "$SLURM_JOB_ID", expanded by the shell."""
    if _JOB_ID_MARK not in token:
        return shlex.quote(token)
    quoted = "'" + token.replace("'", "'\"'\"'") + "'"
    return quoted.replace(_JOB_ID_MARK, "'\"$SLURM_JOB_ID\"'")


_DIRECTIVE_OPTS = ("partition", "account", "qos", "constraint", "comment", "mail_user", "mail_type")


def check_directives(opts: SlurmOpts, workdir: str, workdir_field: str) -> None:
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


def _link_logs(app: AppDef, tag: str) -> list[str]:
    """Script lines giving the log files TorchX's names as well: hard links, made before srun
    opens the files (truncating, or appending in a hetjob: the same file either way), so both
    names show the same bytes from the start.
    A job id handed out again re-points TorchX's names (ln -f replaces the entry, never the
    earlier file); on a requeue they already are the same file and ln changes nothing."""
    suffixes = [".out"]
    for role in app.roles:
        for k in range(num_replicas(role)):
            suffixes += [f"-{role.name}-{k}.out", f"-{role.name}-{k}.err"]
    ours = f'"slurm-$SLURM_JOB_ID"{shlex.quote("-" + tag)}"$f"'
    return [
        "# TorchX's names for the log files: links to txd's, whose tag keeps a reused job id apart",
        "for f in " + " ".join(shlex.quote(s) for s in suffixes) + "; do",
        f'  : >> {ours} && ln -f -- {ours} "slurm-$SLURM_JOB_ID$f" 2>/dev/null',
        "done",
        "",
    ]


def build_script(
    app: AppDef,
    opts: SlurmOpts,
    workdir: str,
    version: tuple[int, int],
    app_id_prefix: str = "",
    tag: str = "",
    notes: Sequence[str] = (),
) -> str:
    """The sbatch script of an app. `app_id_prefix` + the job id is what ${app_id} expands to;
    `tag` goes into the log files' names (SlurmJob.tag), which then get TorchX's names too;
    `notes` become comment lines (`# txd: ...`) saying what was assumed or left out."""
    app_id = app_id_prefix + _JOB_ID_MARK
    lines = [
        "#!/bin/bash",
        f"# txd: app {app.name!r}, {sum(num_replicas(r) for r in app.roles)} replica(s). "
        "Submit with: sbatch --parsable < this-file",
    ]
    # One line each, whatever a note quotes: a line break would end the comment.
    lines += [f"# txd: {' '.join(note.split())}" for note in notes]
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
        *(_link_logs(app, tag) if tag else []),
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


def sbatch_env(caller: dict[str, str]) -> dict[str, str]:
    """sbatch hands its environment to the job, so it gets the caller's (as if the caller ran
    it), except for the cluster's address: that is the daemon's, the cluster it polls."""
    env = dict(caller)
    env.pop("SLURM_CONF", None)
    if "SLURM_CONF" in os.environ:
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    return env
