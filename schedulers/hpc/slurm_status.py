"""Slurm's own words for a job's state, read into an AppStatus: squeue's rows (one per hetjob
component) for a job the cluster still knows, sacct's (or the batch script's last line) for one
it has forgotten (hpc.slurm runs the commands).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from txd.schedulers.api import is_terminal
from txd.schedulers.fold import app_status
from txd.schedulers.hpc.slurm_script import EXIT_MARK, SlurmJob
from txd.v1 import AppState
from txd.v1.app_pb2 import AppStatus, ReplicaStatus

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
class SqueueRow:
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


def parse_squeue(text: str) -> dict[str, list[SqueueRow]]:
    """The rows (hetjob components) by job id, ordered by offset. Raises ValueError, naming the
    line, for output not in SQUEUE_FIELDS' format (cut short, columns missing, bytes that are no
    squeue line): a job missing from a misread answer would be taken for one Slurm has
    forgotten."""
    jobs: dict[str, list[SqueueRow]] = defaultdict(list)
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
            SqueueRow(
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


def status_of(job: SlurmJob, comps: list[SqueueRow]) -> AppStatus:
    """The app's status from its hetjob components' rows (matched to replicas by offset)."""
    replicas = []
    # A component's DerivedEC is its srun step's exit; when no step reported one (cancelled,
    # or the script failed before srun) every replica gets the batch script's exit instead.
    steps_reported = any(_steps_status(c) for c in comps)
    for i, (role, k) in enumerate(job.replicas):
        comp = comps[i] if i < len(comps) else comps[0]
        state = slurm_state(comp.state)
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
    status = app_status("", replicas)
    leader = comps[0]
    status.num_restarts = leader.restarts
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


def _started(comp: SqueueRow) -> bool:
    """Whether the component's latest attempt got nodes (Slurm clears them on a requeue)."""
    return bool(comp.nodes) and comp.nodes not in ("(null)", "N/A")


def _steps_status(comp: SqueueRow) -> int:
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


def exit_mark(last_line: str) -> int | None:
    """The exit code in the batch script's last line of output (EXIT_MARK), if it is there."""
    last = last_line.strip()
    if last.startswith(EXIT_MARK):
        code = last.removeprefix(EXIT_MARK)
        return int(code) if code.isdigit() else None
    return None


def settled(job: SlurmJob, state: AppState, code: int, source: str) -> AppStatus:
    """The final status of a job Slurm forgot while txd was away, as `source` tells it (sacct,
    or the batch script's last line): every replica in the job's `state`."""
    msg = f"Slurm job {job.job_id} ended while txd was away (from {source})"
    if state == AppState.UNKNOWN:
        return AppStatus(state=state, msg=msg)
    replicas = [ReplicaStatus(id=k, role=r, state=state) for r, k in job.replicas]
    return app_status("", replicas, state=state, msg=msg + (f", exit code {code}" if code else ""))
