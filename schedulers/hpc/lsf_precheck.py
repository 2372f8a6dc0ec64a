"""What lsf checks at submit before anything is queued (hpc.precheck has the shared parts).
LSF has no dry submit (no `bsub --test-only`), so less can be checked than on Slurm:

- `lsf_queue`, when given: `bqueues -w <queue>` knows it and it is open (a closed queue
  refuses the bsub; an inactive one holds the jobs until it is activated, which is reported);
- `jobdir`, when given: a directory a file can be created in (created first, as the submit
  script would);
- in a dry run, the rank-0 host: a host `bhosts` lists has the first replica's job slots and
  GPUs (a submit picks it anyway, and refuses the Run when none has);
- not checked: the entrypoint and the image, which exist only inside the container on the
  execution host; queue limits (bqueues -l) and the other replicas' resources.
"""

from __future__ import annotations

import shlex

from txd.schedulers.hpc.hosts import Result
from txd.schedulers.hpc.lsf_script import pick_rank0_host, rank0_needs
from txd.schedulers.hpc.precheck import FAIL, OK, PROBE_FUNCTIONS, SKIP, Check
from txd.v1.app_pb2 import AppDef


def bqueues_argv(queue: str) -> list[str]:
    return ["bqueues", "-w", queue]


def queue_check(queue: str, res: Result) -> Check:
    """From `bqueues -w <queue>`: a header, then `QUEUE_NAME PRIO STATUS MAX ...` rows."""
    field = "cfg.lsf_queue"
    said = res.error()
    if "No such queue" in said:
        return Check(field, FAIL, f"LSF has no queue {queue}: {said}")
    rows = [line.split() for line in res.text.splitlines()[1:] if line.strip()]
    row = next((r for r in rows if r and r[0] == queue and len(r) > 2), None)
    if res.returncode != 0 or row is None:
        return Check(field, SKIP, f"`{shlex.join(bqueues_argv(queue))}` said: {said:.200}")
    status = row[2]
    if status.startswith("Closed"):
        return Check(field, FAIL, f"queue {queue} is {status}: LSF takes no job into it")
    if status.endswith("Inact"):
        return Check(field, OK, f"queue {queue} is {status}: its jobs wait until it is active")
    return Check(field, OK, f"queue {queue} is {status}")


def jobdir_argv(jobdir: str, create: bool) -> list[str]:
    return ["sh", "-c", PROBE_FUNCTIONS + 'logdir "$1" "$2"', "sh", jobdir, str(int(create))]


def jobdir_check(res: Result) -> Check:
    said = res.text.strip().splitlines()
    word, _, detail = (said[-1] if said else "").partition(" ")
    if word == "ok":
        return Check("cfg.jobdir", OK, detail)
    if word == "fail":
        return Check("cfg.jobdir", FAIL, detail)
    return Check("cfg.jobdir", SKIP, f"the probe said: {res.error():.200}")


def rank0_check(app: AppDef, bhosts: Result) -> Check:
    field = "app.roles[0].resource"
    if bhosts.returncode != 0:
        return Check(field, SKIP, f"bhosts failed: {bhosts.error():.200}")
    cpu, gpu = rank0_needs(app.roles[0])
    host = pick_rank0_host(bhosts.text, cpu, gpu)
    if host is None:
        return Check(field, FAIL, f"no LSF host has {cpu} job slot(s) and {gpu} GPU(s)")
    return Check(field, OK, f"rank 0 would run on {host} ({cpu} slot(s), {gpu} GPU(s))")


def unchecked(app: AppDef) -> list[Check]:
    return [
        Check(
            f"role {r.name}: entrypoint",
            SKIP,
            f"runs inside image {r.image or '?'} on the execution host: not checkable here",
        )
        for r in app.roles
    ]
