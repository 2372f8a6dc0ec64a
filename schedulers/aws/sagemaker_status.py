"""A DescribeTrainingJob answer -> AppStatus: pure, no I/O.

SageMaker reports a job by TrainingJobStatus (InProgress, Completed, Failed, Stopping, Stopped,
Deleting) and, within it, SecondaryStatus (Starting, LaunchingMLInstances, Downloading,
Training, Uploading, MaxRuntimeExceeded, Interrupted ...). txd's state comes from both:

- InProgress is PENDING until the instances run the program (Starting, Pending,
  LaunchingMLInstances, PreparingTrainingStack, Downloading, DownloadingTrainingImage, and
  Interrupted: a spot job waiting for capacity again), RUNNING from Training on (Training,
  Uploading, Restarting, Updating). TorchX says RUNNING for all of InProgress.
- Stopping is RUNNING: the instances are still up (TorchX says CANCELLED, before it is true).
- Stopped is CANCELLED (StopTrainingJob: what txd's cancel calls), but FAILED when SageMaker
  stopped it for running out of time (MaxRuntimeExceeded, MaxWaitTimeExceeded).
- Completed is SUCCEEDED, Failed is FAILED; Deleting (the job is going away) is UNKNOWN.

The message is the secondary status and its last transition's message, and the failure
reason when there is one. Every instance (algo-1 ... algo-N) is one replica of the job's only
role, in the app's state: SageMaker reports no state or exit code per instance.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from txd.schedulers import fold
from txd.v1 import AppState
from txd.v1.app_pb2 import AppStatus, ReplicaStatus

JOB_STATES: Mapping[str, AppState] = {
    "InProgress": AppState.RUNNING,
    "Completed": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Stopping": AppState.RUNNING,
    "Stopped": AppState.CANCELLED,
    "Deleting": AppState.UNKNOWN,
}
# Secondary statuses of an InProgress job whose program does not run yet.
NOT_STARTED = frozenset(
    {
        "Starting",
        "Pending",
        "LaunchingMLInstances",
        "PreparingTrainingStack",
        "Downloading",
        "DownloadingTrainingImage",
        "Interrupted",
    }
)
# Secondary statuses of a Stopped job that SageMaker stopped itself, for want of time.
TIMED_OUT = frozenset({"MaxRuntimeExceeded", "MaxWaitTimeExceeded"})
_ARN = re.compile(r"arn:aws[a-z-]*:sagemaker:(?P<region>[a-z0-9-]+):\d{12}:training-job/.+")


def app_state(status: str, secondary: str) -> AppState:
    """The txd state of a TrainingJobStatus and SecondaryStatus (module docstring)."""
    state = JOB_STATES.get(status, AppState.UNKNOWN)
    if status == "InProgress" and secondary in NOT_STARTED:
        return AppState.PENDING
    if status == "Stopped" and secondary in TIMED_OUT:
        return AppState.FAILED
    return state


def message(job: Mapping[str, Any]) -> str:
    """`<secondary status>: <its last transition's message>`, then the failure reason."""
    secondary = str(job.get("SecondaryStatus") or job.get("TrainingJobStatus") or "")
    parts = [secondary] if secondary else []
    transitions = job.get("SecondaryStatusTransitions") or []
    if transitions and (said := str(transitions[-1].get("StatusMessage") or "").strip()):
        parts = [f"{secondary}: {said}" if secondary else said]
    if reason := str(job.get("FailureReason") or "").strip():
        parts.append(reason)
    return "; ".join(parts)


def ui_url(arn: str) -> str:
    """The job's page in the AWS console, or "" for an ARN of another shape."""
    m = _ARN.fullmatch(arn)
    if m is None:
        return ""
    region, name = m["region"], arn.rsplit("/", 1)[1]
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/jobs/{name}"


def app_status(job: Mapping[str, Any], *, role: str, instances: int | None = None) -> AppStatus:
    """The AppStatus of a DescribeTrainingJob answer (or a ListTrainingJobs summary, which
    lacks the resources: then `instances`, default 1). `role` names the replicas' role."""
    state = app_state(str(job.get("TrainingJobStatus", "")), str(job.get("SecondaryStatus", "")))
    count = (job.get("ResourceConfig") or {}).get("InstanceCount") or instances or 1
    replicas = [
        ReplicaStatus(id=k, role=role, state=state, hostname=f"algo-{k + 1}")
        for k in range(int(count))
    ]
    app_id = str(job.get("TrainingJobName", ""))
    out = fold.app_status(app_id, replicas, state=state, msg=message(job))
    out.ui_url = ui_url(str(job.get("TrainingJobArn", "")))
    if state == AppState.FAILED and job.get("FailureReason"):
        out.structured_error_msg = str(job["FailureReason"])
    if isinstance(created := job.get("CreationTime"), dt.datetime):
        out.created.FromDatetime(created.astimezone(dt.UTC))
    return out
