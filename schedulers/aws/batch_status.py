"""A describe_jobs answer as an AppStatus (pure).

Batch's states map as TorchX maps them, with SUBMITTED kept: SUBMITTED -> SUBMITTED; PENDING,
RUNNABLE, STARTING -> PENDING (the Batch state is in the message); RUNNING; SUCCEEDED; FAILED,
or CANCELLED when txd terminated the job (Batch reports a terminated job FAILED, with the
reason txd gave, which marks it). A container job is one replica. A multi-node parallel job's
replicas are its nodes, by role from the job's `txd.dev/roles` tag (else its node ranges): each
node's own state and exit code when its `<id>#<node>` description is at hand (txd asks for them
once the job has ended), else the job's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from txd.schedulers import fold
from txd.schedulers.aws.batch_request import ROLE_NAME_ENV, TAG_ROLES
from txd.v1 import TERMINAL_STATES, AppState
from txd.v1.app_pb2 import AppStatus, ReplicaStatus

STATES: Mapping[str, AppState] = {
    "SUBMITTED": AppState.SUBMITTED,
    "PENDING": AppState.PENDING,
    "RUNNABLE": AppState.PENDING,
    "STARTING": AppState.PENDING,
    "RUNNING": AppState.RUNNING,
    "SUCCEEDED": AppState.SUCCEEDED,
    "FAILED": AppState.FAILED,
}
# The reason txd gives terminate_job: a FAILED job with it was cancelled through txd.
CANCEL_REASON = "cancelled through txd"
DEFAULT_ROLE = "node"


def queue_name(arn_or_name: str) -> str:
    """A job queue's name from its ARN (arn:aws:batch:REGION:ACCOUNT:job-queue/NAME)."""
    return arn_or_name.rsplit("/", 1)[-1]


def app_id_of(job: Mapping[str, Any]) -> str:
    return f"{queue_name(str(job.get('jobQueue', '')))}:{job.get('jobName', '')}"


def roles_of(job: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The app's roles and replica counts: the roles tag txd sets, else the node ranges."""
    with_tag = str((job.get("tags") or {}).get(TAG_ROLES) or "")
    try:
        roles = [(r, int(n)) for r, _, n in (p.rpartition("=") for p in with_tag.split())]
        if roles and all(r for r, _ in roles):
            return roles
    except ValueError:
        pass
    nodes = job.get("nodeProperties")
    if not nodes:
        return [(_role_name((job.get("container") or {}).get("environment")), 1)]
    total = int(nodes.get("numNodes", 1))
    out = []
    for group in nodes.get("nodeRangeProperties") or []:
        start, sep, end = str(group.get("targetNodes", "0")).partition(":")
        first = int(start or 0)
        last = int(end or total - 1) if sep else first
        env = (group.get("container") or {}).get("environment")
        out.append((_role_name(env), last - first + 1))
    return out or [(DEFAULT_ROLE, total)]


def _role_name(env: Sequence[Mapping[str, str]] | None) -> str:
    for item in env or []:
        if item.get("name") == ROLE_NAME_ENV:
            return str(item.get("value"))
    return DEFAULT_ROLE


def exit_code(job: Mapping[str, Any]) -> int | None:
    """The container's exit code: the job's, else its last attempt's."""
    code = (job.get("container") or {}).get("exitCode")
    if code is None:
        attempts = job.get("attempts") or []
        if attempts:
            code = (attempts[-1].get("container") or {}).get("exitCode")
    return int(code) if code is not None else None


def ui_url(job: Mapping[str, Any]) -> str:
    parts = str(job.get("jobArn", "")).split(":")
    if len(parts) < 6 or not job.get("jobId"):
        return ""
    region = parts[3]
    kind = "mnp-job" if job.get("nodeProperties") else "detail"
    return (
        f"https://{region}.console.aws.amazon.com/batch/home?region={region}"
        f"#jobs/{kind}/{job['jobId']}"
    )


def _replica(role: str, k: int, job: Mapping[str, Any], cancelled: bool) -> ReplicaStatus:
    rep = ReplicaStatus(id=k, role=role)
    rep.state = STATES.get(str(job.get("status")), AppState.UNKNOWN)
    code = exit_code(job)
    if code is not None and rep.state in TERMINAL_STATES:
        rep.exit_code = code
    if cancelled and rep.state in (AppState.FAILED, *_LIVE):
        rep.state = AppState.CANCELLED
    for eni in (job.get("container") or {}).get("networkInterfaces") or []:
        if addr := eni.get("privateIpv4Address"):
            rep.hostname = str(addr)
    return rep


_LIVE = (AppState.SUBMITTED, AppState.PENDING, AppState.RUNNING, AppState.UNKNOWN)


def app_status(
    job: Mapping[str, Any], nodes: Mapping[int, Mapping[str, Any]] | None = None
) -> AppStatus:
    """The status of a described job; `nodes`: descriptions of its nodes (`<id>#<i>`) by
    index, where known."""
    nodes = nodes or {}
    status = str(job.get("status", ""))
    state = STATES.get(status, AppState.UNKNOWN)
    reason = str(job.get("statusReason") or "")
    cancelled = state == AppState.FAILED and reason.startswith(CANCEL_REASON)
    replicas = []
    index = 0
    for role, n in roles_of(job):
        for k in range(n):
            node = nodes.get(index)
            own = node if node is not None else job
            if node is not None and state in TERMINAL_STATES and not _ended(node):
                own = {**node, "status": status}  # Batch stops the other nodes with the main
            replicas.append(_replica(role, k, own, cancelled))
            index += 1
    failed = any(r.state == AppState.FAILED for r in replicas)
    if state == AppState.FAILED and not cancelled and replicas and not failed:
        replicas[0].state = AppState.FAILED  # the main node decides the job's state
    out = fold.app_status(
        app_id_of(job), replicas, msg=_message(status, reason, replicas, cancelled)
    )
    attempts = len(job.get("attempts") or [])
    out.num_restarts = max(attempts - 1, 0) if out.state in TERMINAL_STATES else attempts
    out.ui_url = ui_url(job)
    return out


def _ended(job: Mapping[str, Any]) -> bool:
    return STATES.get(str(job.get("status")), AppState.UNKNOWN) in TERMINAL_STATES


def _message(status: str, reason: str, replicas: Sequence[ReplicaStatus], cancelled: bool) -> str:
    if cancelled:
        return reason
    parts = []
    if status in ("RUNNABLE", "STARTING"):
        parts.append(status)  # where a PENDING job is in Batch's queue
    if reason:
        parts.append(reason)
    exits = [
        f"{r.role}/{r.id} exited with {r.exit_code}"
        for r in replicas
        if r.state == AppState.FAILED and r.HasField("exit_code")
    ]
    return ": ".join(parts) + (f" ({', '.join(exits)})" if exits else "")
