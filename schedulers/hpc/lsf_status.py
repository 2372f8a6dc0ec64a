"""LSF's own words for an app's jobs, read into an AppStatus: the rows of one `bjobs -a -o`
(BJOBS), matched to apps by project and to replicas by job name (hpc.lsf runs the query).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from txd.schedulers.fold import app_status
from txd.schedulers.hpc.lsf_script import LsfJob
from txd.v1 import AppState
from txd.v1.app_pb2 import AppStatus, ReplicaStatus

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
_STAT = re.compile(r"^[A-Z]+$")  # PEND, RUN, DONE, EXIT, PSUSP ...
# What bjobs / bkill say about jobs that do not exist (any more): not a failure of the query.
NO_JOB = re.compile(
    r"^(No (unfinished )?job found.*|Job <[\d\[\]]+> is not found"
    r"|Job <[\d\[\]]+>: (No matching job found|Job has already finished))$"
)


@dataclass(frozen=True)
class BjobsRow:
    """One line of `bjobs -o`, fields as in BJOBS_FIELDS."""

    job_id: str
    project: str
    stat: str
    exit_code: str  # "-" while running, and for DONE jobs
    exec_host: str  # "-" while pending; "host", "4*host" or "hostA:hostB"
    name: str


def parse_bjobs(text: str) -> list[BjobsRow]:
    """The rows of a BJOBS query (blank lines and bjobs' "no job" notes aside). Raises
    ValueError, naming the line, for one that is no row (cut short, fields missing or out of
    place, bytes that are not bjobs'): an app missing from a misread answer would be taken for
    one LSF has forgotten."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or NO_JOB.match(line.strip()):
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
    out = app_status(app_id, reps)
    if out.state == AppState.CANCELLED:
        out.msg = "cancelled by request" if cancelled else "killed (exit code 130, as by bkill)"
    elif notes:
        out.msg = ", ".join(notes)
    return out


def known_status(
    app_id: str, jobs: list[LsfJob], rows: list[BjobsRow], cancelled: bool
) -> AppStatus | None:
    """The app's status from its rows; None when bjobs shows none of its jobs."""
    if not rows:
        return None
    by_name: dict[str, BjobsRow] = {}
    for row in sorted(rows, key=lambda r: int(r.job_id)):
        by_name[row.name] = row  # a name submitted twice: the latest job counts
    return _status(app_id, ((j.role, j.replica_id, by_name.get(j.name)) for j in jobs), cancelled)


def foreign_status(project: str, rows: list[BjobsRow], cancelled: bool) -> AppStatus:
    """An app known only from its job names `<project>-<role>-<k>` (as `list` sees every app)."""
    replicas = []
    for row in sorted(rows, key=lambda r: int(r.job_id)):
        role, _, k = row.name[len(project) + 1 :].rpartition("-")
        replicas.append((role, int(k), row))
    return _status(project, replicas, cancelled)


def looks_like_app(row: BjobsRow) -> bool:
    """Jobs named `<project>-<role>-<k>`: submitted by txd or TorchX."""
    prefix = row.project + "-"
    if not row.name.startswith(prefix):
        return False
    _, sep, k = row.name[len(prefix) :].rpartition("-")
    return bool(sep) and k.isdigit()


def is_live(row: BjobsRow) -> bool:
    """Whether the row's job has not ended yet (bkill can still reach it)."""
    return row.stat not in ("DONE", "EXIT")
