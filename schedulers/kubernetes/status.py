"""Kubernetes objects -> AppStatus: what the kubernetes schedulers report of one app, computed
from the objects their informers hold (no API call).

An app's objects are its controller objects (`owners`: the batch/v1 Jobs of a plain or indexed
app, its Volcano Job, or its AppWrapper) and its pods. The app's shape comes from the
`txd.dev/roles` annotation every controller object carries, so replicas with no pod yet are
reported too. Replica states come from pods (phase, exit code, waiting reasons such as
ImagePullBackOff); the app's state is folded from them by the one rule
(txd.schedulers.fold.app_status). A Volcano Job's or AppWrapper's controller has the last word on a
failed pod (a policy may restart it): its phase decides that replica's state
(_controlled_replica), so the app fails only once the controller says so.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from txd.schedulers import fold
from txd.schedulers.kubernetes.names import (
    APP_ID_LABEL,
    REPLICA_LABEL,
    ROLE_LABEL,
    ROLES_ANNOTATION,
    dns_name,
)
from txd.v1 import TERMINAL_STATES, AppState
from txd.v1.app_pb2 import AppStatus, ReplicaStatus

Obj = Mapping[str, Any]
ObjT = TypeVar("ObjT", bound=Mapping[str, Any])

CANCELLED_ANNOTATION = "txd.dev/cancelled"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# A pod waiting for these reasons will not start by itself soon: its message is reported.
_STUCK = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
}

# Volcano Job phases (status.state.phase), as TorchX maps them.
VOLCANO_PHASES = {
    "Pending": AppState.PENDING,
    "Aborting": AppState.RUNNING,
    "Running": AppState.RUNNING,
    "Restarting": AppState.RUNNING,
    "Completing": AppState.RUNNING,
    "Terminating": AppState.RUNNING,
    "Aborted": AppState.CANCELLED,
    "Completed": AppState.SUCCEEDED,
    "Terminated": AppState.FAILED,
    "Failed": AppState.FAILED,
}
# AppWrapper phases: v1beta2 (status.phase) and v1beta1 (status.state; TorchX crashes on
# Completed, which MCAD sets when every pod has succeeded).
APPWRAPPER_PHASES = {
    "Suspended": AppState.PENDING,
    "Resuming": AppState.PENDING,
    "Running": AppState.RUNNING,
    "Suspending": AppState.RUNNING,
    "Resetting": AppState.RUNNING,
    "Terminating": AppState.RUNNING,
    "Succeeded": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Pending": AppState.PENDING,
    "RunningHoldCompletion": AppState.RUNNING,  # MCAD: some items done, others still run
    "Completed": AppState.SUCCEEDED,
    "Deleted": AppState.CANCELLED,
}


def app_id_of(obj: Obj) -> str:
    """The txd app id of an object: `<namespace>:<name>` (TorchX's form)."""
    meta = obj.get("metadata") or {}
    name = (meta.get("labels") or {}).get(APP_ID_LABEL, "")
    return f"{meta.get('namespace', '')}:{name}" if name else ""


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _cancelled(obj: Obj) -> bool:
    return (_meta(obj).get("annotations") or {}).get(CANCELLED_ANNOTATION) == "true"


def _shape(owners: Sequence[Obj]) -> list[tuple[str, int]]:
    for obj in owners:
        raw = (_meta(obj).get("annotations") or {}).get(ROLES_ANNOTATION)
        with contextlib.suppress(ValueError, TypeError):
            return [(str(role), int(n)) for role, n in json.loads(raw or "")]
    return []


def pod_key(pod: Obj, roles: Mapping[str, str]) -> tuple[str, int] | None:
    """(role, replica id) of a pod from its labels (the completion index for Indexed Jobs)."""
    meta = _meta(pod)
    labels = meta.get("labels") or {}
    role = roles.get(labels.get(ROLE_LABEL, ""))
    k = labels.get(REPLICA_LABEL, (meta.get("annotations") or {}).get(INDEX_ANNOTATION))
    if role is None or k is None:
        return None
    try:
        return role, int(k)
    except ValueError:
        return None


def newest(pods: Sequence[ObjT]) -> ObjT:
    """The latest attempt: a retried replica's Job makes a new pod per attempt, after the last
    one failed; creationTimestamp has whole seconds, so within one a failed pod is the older."""

    def key(p: ObjT) -> tuple[str, bool, str]:
        failed = (p.get("status") or {}).get("phase") == "Failed"
        return (_meta(p).get("creationTimestamp", ""), not failed, _meta(p).get("name", ""))

    return max(pods, key=key)


def _container(pod: Obj) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return statuses[0] or {}


def pod_replica(role: str, k: int, pod: Obj) -> ReplicaStatus:
    """A replica's status from its pod."""
    status = pod.get("status") or {}
    rep = ReplicaStatus(id=k, role=role, hostname=_host(pod))
    c = _container(pod)
    state = c.get("state") or {}
    done = state.get("terminated") or (c.get("lastState") or {}).get("terminated")
    phase = status.get("phase", "")
    if phase in ("Succeeded", "Failed") and done:
        rep.exit_code = int(done.get("exitCode", 0))
    if phase == "Succeeded":
        rep.state = AppState.SUCCEEDED
    elif phase == "Failed":
        rep.state = AppState.FAILED
        why = (done or {}).get("reason") or status.get("reason") or ""
        msg = (done or {}).get("message") or status.get("message") or ""
        # "Error" is any non-zero exit: the exit code says more; OOMKilled, Evicted ... do not.
        rep.structured_error_msg = ": ".join(x for x in (why, msg.strip()) if x and x != "Error")
    elif phase == "Running":
        rep.state = AppState.RUNNING
    elif phase == "Pending":
        rep.state = AppState.PENDING
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in _STUCK:
            said = waiting.get("message", "")
            image = c.get("image") or _image(pod)
            if "Image" in waiting["reason"] and image and image not in said:
                said = f"image {image}: {said}"
            rep.structured_error_msg = f"{waiting['reason']}: {said}".strip()
    else:
        rep.state = AppState.UNKNOWN
    return rep


def _image(pod: Obj) -> str:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return str((containers[0] or {}).get("image", ""))


def _host(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName", ""))


def _job_replica(role: str, k: int, job: Obj | None, pods: Sequence[Obj]) -> ReplicaStatus:
    """One replica of a plain app: its Job's verdict, else its newest pod's state."""
    rep = pod_replica(role, k, newest(pods)) if pods else ReplicaStatus(id=k, role=role)
    if job is None:  # not created yet (the informer sees a submission's Jobs one by one)
        rep.state = AppState.SUBMITTED
        return rep
    conditions = {c.get("type"): c for c in (job.get("status") or {}).get("conditions") or [] if c}
    if (conditions.get("Complete") or {}).get("status") == "True":
        rep.state = AppState.SUCCEEDED
        rep.exit_code = 0
    elif (conditions.get("Failed") or {}).get("status") == "True":
        rep.state = AppState.CANCELLED if _cancelled(job) else AppState.FAILED
        if not rep.structured_error_msg:
            c = conditions["Failed"]
            rep.structured_error_msg = f"{c.get('reason', '')}: {c.get('message', '')}".strip()
    elif _cancelled(job):
        live = [p for p in pods if (p.get("status") or {}).get("phase") in ("Pending", "Running")]
        rep.state = AppState.RUNNING if live else AppState.CANCELLED
    elif not pods:
        rep.state = AppState.PENDING
    elif rep.state == AppState.FAILED:
        failed = sum((p.get("status") or {}).get("phase") == "Failed" for p in pods)
        if failed <= int((job.get("spec") or {}).get("backoffLimit", 6)):
            rep.state = AppState.PENDING  # the Job makes another attempt
    # A succeeded pod: its Job (completions 1) is complete, before the Job's status says so.
    return rep


def _controlled_replica(
    role: str, k: int, pods: Sequence[Obj] | None, phase_state: AppState
) -> ReplicaStatus:
    """One replica of a Volcano Job or AppWrapper, whose controller has the last word: with
    no pod (yet, or any more) the replica is in the state of the object's phase; a failed pod
    is PENDING while that phase lives (a policy may restart it, or the controller fail the
    app) and CANCELLED once the app is cancelled (the cancel stopped it)."""
    if not pods:
        return ReplicaStatus(id=k, role=role, state=phase_state)
    rep = pod_replica(role, k, newest(pods))
    if rep.state == AppState.FAILED:
        if phase_state not in TERMINAL_STATES:
            rep.state = AppState.PENDING
        elif phase_state == AppState.CANCELLED:
            rep.state = AppState.CANCELLED
    return rep


def _restarts(job: Obj) -> int:
    status = job.get("status") or {}
    failed = int(status.get("failed") or 0)
    conditions = status.get("conditions") or []
    ended = any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions)
    return max(0, failed - 1) if ended else failed


def app_status(app_id: str, owners: Sequence[Obj], pods: Sequence[Obj]) -> AppStatus | None:
    """The app's status from its controller objects and pods; None without controller objects
    (pods left are being collected)."""
    if not owners:
        return None
    shape = _shape(owners)
    roles = {}
    for role, _ in shape:
        roles[role] = roles[dns_name(role)] = role
    by_key: dict[tuple[str, int], list[Obj]] = {}
    for pod in pods:
        if (key := pod_key(pod, roles)) is not None:
            by_key.setdefault(key, []).append(pod)
    kind, api = owners[0].get("kind", ""), str(owners[0].get("apiVersion", ""))
    replicas: list[ReplicaStatus] = []
    restarts, said = 0, ""
    if kind == "Job" and api == "batch/v1":
        jobs: dict[tuple[str, int], Obj] = {}
        for owner in owners:
            labels = _meta(owner).get("labels") or {}
            of = roles.get(labels.get(ROLE_LABEL, ""))
            if of is None:
                continue
            if REPLICA_LABEL in labels:
                jobs[(of, int(labels[REPLICA_LABEL]))] = owner
            else:  # an Indexed Job: one for every replica of its role
                jobs.update({(of, k): owner for k in range(dict(shape).get(of, 0))})
        for role, n in shape:
            for k in range(n):
                replicas.append(
                    _job_replica(role, k, jobs.get((role, k)), by_key.get((role, k), []))
                )
        restarts = max((_restarts(j) for j in owners), default=0)
    else:
        owner = owners[0]
        status = owner.get("status") or {}
        if kind == "AppWrapper":
            phase = status.get("phase") or status.get("state") or ""
            phase_state = APPWRAPPER_PHASES.get(phase, AppState.PENDING)
            if _cancelled(owner) and phase_state not in TERMINAL_STATES:
                phase_state = AppState.CANCELLED
        else:  # a Volcano Job
            phase = (status.get("state") or {}).get("phase") or ""
            phase_state = VOLCANO_PHASES.get(phase, AppState.PENDING)
            restarts = int(status.get("retryCount") or 0)
        for role, n in shape:
            for k in range(n):
                found = by_key.get((role, k))
                replicas.append(_controlled_replica(role, k, found, phase_state))
        if phase:
            said = f"{kind} phase {phase}"
    out = fold.app_status(app_id, replicas, msg=said)
    out.num_restarts = restarts
    if out.state == AppState.CANCELLED:
        out.msg = "cancelled by request"
    elif notes := [_note(r) for r in replicas if r.state == AppState.FAILED or (
        r.state == AppState.PENDING and r.structured_error_msg
    )]:  # fmt: skip
        out.msg = "; ".join(notes)
    return out


def listed_statuses(
    namespace: str, owners: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]]
) -> list[AppStatus]:
    """The statuses of the apps whose controller objects one LIST of the namespace found
    (`owners`, kind and apiVersion set), from those and the namespace's pods (another LIST)."""
    by_app: dict[str, list[dict[str, Any]]] = {}
    for obj in owners:
        obj["metadata"]["namespace"] = namespace
        by_app.setdefault(app_id_of(obj), []).append(obj)
    by_name: dict[str | None, list[dict[str, Any]]] = {}
    for pod in pods:
        pod["metadata"]["namespace"] = namespace
        by_name.setdefault((_meta(pod).get("labels") or {}).get(APP_ID_LABEL), []).append(pod)
    out = []
    for app_id, objs in by_app.items():
        found = by_name.get(app_id.partition(":")[2], [])
        if (status := app_status(app_id, objs, found)) is not None:
            out.append(status)
    return out


def _note(rep: ReplicaStatus) -> str:
    """What went wrong with a replica: `trainer/1 exited with 137 (OOMKilled)`."""
    said = f"exited with {rep.exit_code}" if rep.HasField("exit_code") else ""
    why = rep.structured_error_msg
    if said and why:
        return f"{rep.role}/{rep.id} {said} ({why})"
    return f"{rep.role}/{rep.id} {said or why or 'failed'}"
