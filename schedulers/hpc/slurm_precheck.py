"""What slurm checks at submit before anything is queued (hpc.precheck has the shared parts):

- the job's directory, where its logs go, is a directory a file can be created in (made first
  when txd creates it);
- each role's entrypoint resolves as srun will resolve it: a path from the job's directory, a
  bare name on the PATH the job will have (then in the job's directory, as srun does; through
  env(1), when the role sets environment variables, on the PATH only);
- the partition (named, or the cluster's default) exists; the time limit is within its
  MaxTime; it has a node for each replica (each is a hetjob component on a node of its own);
  each role's CPUs and memory fit one of its nodes (and its MaxCPUsPerNode, MaxMemPerNode):
  limits Slurm accepts a job over, unless EnforcePartLimits is set, and then holds it pending
  for good;
- `sbatch --test-only` of the very script: Slurm's own checks of partition, account, QoS,
  node configuration and limits. It queues nothing (it may use up a job id).

All of it is one `bash -s` on the host sbatch runs on, with sbatch's environment.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field

from txd.schedulers.api import num_replicas
from txd.schedulers.hpc.precheck import FAIL, OK, SKIP, Check, ProbeScript, probe_result
from txd.schedulers.hpc.slurm_script import SlurmOpts, time_minutes
from txd.v1.app_pb2 import AppDef

PARTITIONS = "scontrol show partition -o"
NODES = "sinfo -h -o '%R|%c|%m|%D|%T'"
# Node states in which Slurm judges a request against the node's real configuration (flags
# such as `~` powered down or `+` several states stripped); in others, before a node has
# registered (`unknown`), or while it does not respond (`*`), sbatch --test-only refuses what
# would run once the node is back.
_SETTLED = {"idle", "mixed", "allocated", "completing", "planned", "reserved"}
# Slurm's refusals (22.05 to 24.x wording), mapped to the option they are about.
_REFUSALS = [
    (re.compile(r"invalid partition|partition.*not (available|valid)", re.I), "cfg.partition"),
    (re.compile(r"invalid account", re.I), "cfg.account"),
    (re.compile(r"invalid qos", re.I), "cfg.qos"),
    (re.compile(r"time limit", re.I), "cfg.time"),
    (re.compile(r"invalid feature|constraint", re.I), "cfg.constraint"),
    (re.compile(r"access/permission denied|not allowed to use", re.I), "cfg.partition"),
]


@dataclass(frozen=True)
class Target:
    """What the checks are about."""

    app: AppDef
    opts: SlurmOpts
    workdir: str  # "" is the login node's home directory
    workdir_field: str  # how a refusal names it: cfg.job_dir, or cwd
    script: str  # the batch script, for sbatch --test-only
    create: bool  # make the job's directory if missing (a real submit of an explicit job_dir)
    pending_copy: bool  # a dry run with a workspace: the job's directory is copied at submit


# How long the partitions' and nodes' descriptions are reused for a host's later checks: they
# change rarely, and asking costs two Slurm commands per Run. A partition they do not name is
# asked for at once.
PARTITIONS_TTL = 60.0


def knows(partitions: tuple[int, str], opts: SlurmOpts) -> bool:
    """Whether a `partitions` section describes the partition the job asks for."""
    found = parse_partitions(partitions[1]) if partitions[0] == 0 else {}
    if not opts.partition:
        return any(p.fields.get("Default") == "YES" for p in found.values())
    return all(name in found for name in opts.partition.split(","))


def probe(t: Target, partitions: bool = True) -> ProbeScript:
    """The probe; without `partitions`, it leaves out the partitions and nodes (known)."""
    p = ProbeScript()
    jobdir = shlex.quote(t.workdir) if t.workdir else '"$HOME"'
    p.lines.append(f"jobdir={jobdir}")
    p.step("logdir", f'logdir "$jobdir" {int(t.create)}')
    for i, (ep, path, cwd_last) in enumerate(_entrypoints(t.app)):
        path_text = shlex.quote(path) if path is not None else '"$PATH"'
        p.step(f"entry{i}", f'entry {shlex.quote(ep)} "$jobdir" {path_text} {int(cwd_last)}')
    if partitions:
        p.step("partitions", PARTITIONS)
        p.step("nodes", NODES)
    p.step("testonly", "sbatch --test-only " + p.heredoc(t.script))
    return p


def _entrypoints(app: AppDef) -> list[tuple[str, str | None, bool]]:
    """(entrypoint, the PATH it is looked up on (None: the job's), whether srun looks in the
    job's directory last) of each role, once each."""
    out: list[tuple[str, str | None, bool]] = []
    for role in app.roles:
        # Roles with env run `env K=V ... entrypoint`: env(1) searches the PATH given, if any.
        key = (role.entrypoint, role.env.get("PATH") if role.env else None, not role.env)
        if key not in out:
            out.append(key)
    return out


def evaluate(t: Target, sections: dict[str, tuple[int, str]]) -> list[Check]:
    checks = [probe_result(t.workdir_field, sections.get("logdir"))]
    entrypoints = _entrypoints(t.app)
    for role in t.app.roles:
        key = (role.entrypoint, role.env.get("PATH") if role.env else None, not role.env)
        field = f"role {role.name}: entrypoint"
        # A path from the job's directory (and srun's own search, without env(1), which ends
        # there) cannot be checked before the workspace is copied there.
        in_copy = "/" in role.entrypoint or not role.env
        if t.pending_copy and not role.entrypoint.startswith("/") and in_copy:
            checks.append(Check(field, SKIP, "resolves in the workspace copy, made at submit"))
            continue
        checks.append(probe_result(field, sections.get(f"entry{entrypoints.index(key)}")))
    part_checks, part = _partition_checks(t, sections)
    checks += part_checks
    checks.append(_test_only(t, sections.get("testonly"), part))
    return checks


@dataclass
class Partition:
    name: str
    fields: dict[str, str]
    cpus: int = 0  # the largest node's
    mem_mb: int = 0
    unsettled: set[str] = field(default_factory=set)  # node states outside _SETTLED

    def limit(self, key: str) -> int | None:
        value = self.fields.get(key, "UNLIMITED")
        return int(value) if value.isdigit() else None


def parse_partitions(text: str) -> dict[str, Partition]:
    out = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "PartitionName" in fields:
            out[fields["PartitionName"]] = Partition(fields["PartitionName"], fields)
    return out


def _partition_checks(
    t: Target, sections: dict[str, tuple[int, str]]
) -> tuple[list[Check], Partition | None]:
    """The checks against the job's partition, and the partition (None: not found)."""
    rc, text = sections.get("partitions", (-1, ""))
    parts = parse_partitions(text) if rc == 0 else {}
    if not parts:
        why = f"`{PARTITIONS}` failed: {text.strip():.200}"
        return [Check("cfg.partition", SKIP, why)], None
    if t.opts.partition:
        names = t.opts.partition.split(",")  # Slurm takes a list; the job runs in one
        found = [parts[n] for n in names if n in parts]
        if not found:
            known = ", ".join(sorted(parts))
            why = f"no partition {t.opts.partition} (there are: {known})"
            return [Check("cfg.partition", FAIL, why)], None
        part, how = found[0], f"partition {found[0].name}"
    else:
        default = [p for p in parts.values() if p.fields.get("Default") == "YES"]
        if not default:
            return [Check("cfg.partition", SKIP, "the cluster has no default partition")], None
        part, how = default[0], f"partition {default[0].name} (the default)"
    _node_sizes(parts, sections.get("nodes"))
    out = [Check("cfg.partition", OK, f"{how} exists, State={part.fields.get('State', '?')}")]
    out.append(_time_check(t.opts.time, part))
    replicas = sum(num_replicas(r) for r in t.app.roles)
    nodes = part.limit("TotalNodes")
    if nodes is not None and replicas > nodes:
        out.append(
            Check(
                "app: replicas",
                FAIL,
                f"{replicas} replicas need {replicas} nodes (each is a hetjob component on a "
                f"node of its own), but partition {part.name} has {nodes}: the job would "
                "wait for good",
            )
        )
    else:
        out.append(Check("app: replicas", OK, f"{replicas} of {part.name}'s {nodes} nodes"))
    out += _resource_checks(t, part)
    return out, part


def _node_sizes(parts: dict[str, Partition], section: tuple[int, str] | None) -> None:
    if section is None or section[0] != 0:
        return
    for line in section[1].splitlines():
        fields = line.split("|")
        if len(fields) < 4 or fields[0] not in parts:
            continue
        part = parts[fields[0]]
        cpus, mem = fields[1].rstrip("+"), fields[2].rstrip("+")
        if cpus.isdigit():
            part.cpus = max(part.cpus, int(cpus))
        if mem.isdigit():
            part.mem_mb = max(part.mem_mb, int(mem))
        state = fields[4].strip() if len(fields) > 4 else "?"
        if state.rstrip("~#%@!^-$") not in _SETTLED:
            part.unsettled.add(state)


def _cap(*values: int | None) -> int | None:
    known = [v for v in values if v]
    return min(known) if known else None


def _resource_checks(t: Target, part: Partition) -> list[Check]:
    cpu_cap = _cap(part.cpus, part.limit("MaxCPUsPerNode"))
    mem_cap = _cap(part.mem_mb, part.limit("MaxMemPerNode"))
    out = []
    for role in t.app.roles:
        res, field = role.resource, f"role {role.name}: resource"
        if cpu_cap is not None and res.cpu > cpu_cap:
            why = f"cpu={res.cpu} per replica, but {part.name}'s nodes have at most {cpu_cap} CPUs"
            out.append(Check(field, FAIL, why))
        elif mem_cap is not None and res.mem_mb > mem_cap and not t.opts.nomem:
            why = (
                f"memMB={res.mem_mb} per replica, but {part.name}'s nodes have at most {mem_cap} MB"
            )
            out.append(Check(field, FAIL, why))
        elif cpu_cap is None and mem_cap is None:
            out.append(Check(field, SKIP, f"the sizes of {part.name}'s nodes are unknown"))
        else:
            sizes = f"{cpu_cap or '?'} CPUs, {mem_cap or '?'} MB"
            out.append(Check(field, OK, f"cpu={res.cpu}, memMB={res.mem_mb} fit ({sizes})"))
    return out


def _time_check(time: str | None, part: Partition) -> Check:
    limit_text = part.fields.get("MaxTime", "UNLIMITED")
    limit = time_minutes(limit_text)
    if time is None:
        return Check("cfg.time", OK, f"not set: the partition's default (MaxTime={limit_text})")
    asked = time_minutes(time)
    if asked is None:
        return Check("cfg.time", SKIP, f"cannot read {time!r}")
    if limit is not None and asked > limit:
        return Check(
            "cfg.time",
            FAIL,
            f"{time} ({_in_minutes(asked)}) is over partition {part.name}'s "
            f"MaxTime={limit_text} ({_in_minutes(limit)}): the job would wait for good "
            "(PartitionTimeLimit)",
        )
    return Check("cfg.time", OK, f"{time} is within MaxTime={limit_text}")


def _in_minutes(value: float) -> str:
    return "no limit" if math.isinf(value) else f"{value:g} min"


def _test_only(t: Target, section: tuple[int, str] | None, part: Partition | None) -> Check:
    what = "sbatch --test-only"
    if section is None:
        return Check(what, SKIP, "the probe printed nothing for it")
    rc, said = section
    words = "; ".join(line.removeprefix("sbatch: ").strip() for line in said.splitlines())
    if rc == 0:
        return Check(what, OK, words or "accepted")
    if rc == 127:
        return Check(what, SKIP, f"sbatch not found: {words}")
    field = next((f for pattern, f in _REFUSALS if pattern.search(words)), None)
    if field is None and "node configuration" in words:
        if part is not None and part.unsettled:
            states = ", ".join(sorted(part.unsettled))
            why = f"Slurm cannot judge the nodes now: some of {part.name}'s are {states}"
            return Check(what, SKIP, f"{why} ({words})")
        field = "cfg.constraint" if t.opts.constraint else "app: resources"
    return Check(field or "app", FAIL, f"sbatch --test-only refused it: {words}")
