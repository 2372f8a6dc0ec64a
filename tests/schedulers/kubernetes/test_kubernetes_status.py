"""k8s_status: Kubernetes objects as the informers hold them -> AppStatus (no cluster).

The objects are written as the apiserver returns them (the live shapes are exercised by
tests/schedulers/kubernetes); these pin every mapping rule, TorchX's phase tables included."""

from __future__ import annotations

import json
from typing import Any

import pytest
from txd.schedulers.kubernetes.status import app_id_of, app_status, newest
from txd.v1 import AppState

SHAPE = json.dumps([["trainer", 2], ["ps", 1]])
APP = "default:hello-abc"


def meta(name: str, role: str | None = None, k: int | None = None, **annotations: str) -> Any:
    labels = {"txd.dev/app-id": "hello-abc", "txd.dev/scheduler": "kubernetes"}
    if role is not None:
        labels["txd.dev/role"] = role
    if k is not None:
        labels["txd.dev/replica-id"] = str(k)
    return {
        "name": name,
        "namespace": "default",
        "labels": labels,
        "annotations": {"txd.dev/roles": SHAPE, **annotations},
        "creationTimestamp": "2026-11-23T10:00:00Z",
    }


def job(
    role: str, k: int, *, condition: str = "", failed: int = 0, backoff: int = 0, **ann: str
) -> Any:
    status: dict[str, Any] = {"failed": failed} if failed else {}
    if condition:
        status["conditions"] = [
            {
                "type": condition,
                "status": "True",
                "reason": "BackoffLimitExceeded" if condition == "Failed" else "",
                "message": "Job has reached the specified backoff limit"
                if condition == "Failed"
                else "",
            }
        ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(f"hello-abc-{role}-{k}", role, k, **ann),
        "spec": {"backoffLimit": backoff},
        "status": status,
    }


def pod(
    role: str,
    k: int,
    phase: str,
    *,
    code: int | None = None,
    reason: str = "",
    waiting: str = "",
    created: str = "2026-11-23T10:00:01Z",
    index_only: bool = False,
) -> Any:
    m = meta(f"hello-abc-{role}-{k}-{created[-3:-1]}", role, None if index_only else k)
    m["creationTimestamp"] = created
    if index_only:
        m["annotations"]["batch.kubernetes.io/job-completion-index"] = str(k)
    state: dict[str, Any] = {}
    if code is not None:
        state = {"terminated": {"exitCode": code, "reason": reason}}
    elif waiting:
        state = {"waiting": {"reason": waiting, "message": f"Back-off pulling image {waiting}"}}
    elif phase == "Running":
        state = {"running": {}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": m,
        "spec": {"nodeName": "node1"},
        "status": {"phase": phase, "containerStatuses": [{"state": state}]},
    }


def replicas(status: Any) -> list[tuple[str, int, str, int | None]]:
    return [
        (r.role, r.id, AppState.Name(r.state), r.exit_code if r.HasField("exit_code") else None)
        for rs in status.roles
        for r in rs.replicas
    ]


def plain(*pods: Any, conditions: dict[tuple[str, int], str] | None = None, **kw: Any) -> Any:
    conditions = conditions or {}
    jobs = [
        job(r, k, condition=conditions.get((r, k), ""), **kw)
        for r, k in (("trainer", 0), ("trainer", 1), ("ps", 0))
    ]
    return app_status(APP, jobs, list(pods))


def test_no_controller_object_is_nothing() -> None:
    assert app_status(APP, [], [pod("trainer", 0, "Running")]) is None


def test_app_id_is_namespace_and_name() -> None:
    assert app_id_of(job("trainer", 0)) == APP
    assert app_id_of({"metadata": {"name": "x", "labels": {}}}) == ""


def test_plain_replicas_without_pods_are_pending_and_missing_jobs_submitted() -> None:
    status = app_status(APP, [job("trainer", 0)], [])
    assert status is not None
    assert replicas(status) == [
        ("trainer", 0, "PENDING", None),
        ("trainer", 1, "SUBMITTED", None),
        ("ps", 0, "SUBMITTED", None),
    ]
    assert status.state == AppState.PENDING


def test_plain_running_then_succeeded_from_pods_before_the_job_condition() -> None:
    running = plain(
        pod("trainer", 0, "Running"), pod("trainer", 1, "Pending"), pod("ps", 0, "Running")
    )
    assert running.state == AppState.RUNNING
    done = plain(
        pod("trainer", 0, "Succeeded", code=0),
        pod("trainer", 1, "Succeeded", code=0),
        pod("ps", 0, "Succeeded", code=0),
    )
    assert done.state == AppState.SUCCEEDED
    assert [r[2:] for r in replicas(done)] == [("SUCCEEDED", 0)] * 3
    assert all(r.hostname == "node1" for rs in done.roles for r in rs.replicas)


def test_a_failed_pod_within_the_backoff_limit_is_a_retry_not_a_failure() -> None:
    pods = [
        pod("trainer", 0, "Failed", code=3, created="2026-11-23T10:00:01Z"),
        pod("trainer", 0, "Running", created="2026-11-23T10:00:05Z"),
        pod("trainer", 1, "Running"),
        pod("ps", 0, "Running"),
    ]
    first = app_status(
        APP,
        [job("trainer", 0, backoff=1, failed=1), job("trainer", 1), job("ps", 0)],
        pods[:1] + pods[2:],
    )
    assert first is not None and replicas(first)[0] == ("trainer", 0, "PENDING", 3)
    again = app_status(
        APP, [job("trainer", 0, backoff=1, failed=1), job("trainer", 1), job("ps", 0)], pods
    )
    assert again is not None and replicas(again)[0] == ("trainer", 0, "RUNNING", None)
    assert again.num_restarts == 1


def test_failed_replica_names_its_exit_code_and_reason() -> None:
    status = plain(
        pod("trainer", 0, "Succeeded", code=0),
        pod("trainer", 1, "Failed", code=137, reason="OOMKilled"),
        pod("ps", 0, "Failed", code=1, reason="Error"),
    )
    assert status.state == AppState.FAILED
    assert status.msg == "trainer/1 exited with 137 (OOMKilled); ps/0 exited with 1"


def test_a_failed_replica_does_not_end_the_app_while_others_run() -> None:
    status = plain(
        pod("trainer", 0, "Running"), pod("trainer", 1, "Failed", code=2), pod("ps", 0, "Running")
    )
    assert status.state == AppState.RUNNING
    assert replicas(status)[1] == ("trainer", 1, "FAILED", 2)


def test_an_image_that_cannot_be_pulled_is_pending_with_the_reason() -> None:
    status = plain(
        pod("trainer", 0, "Pending", waiting="ImagePullBackOff"),
        pod("trainer", 1, "Running"),
        pod("ps", 0, "Running"),
    )
    assert status.state == AppState.RUNNING
    assert "trainer/0 ImagePullBackOff: Back-off pulling image" in status.msg


def test_cancelled_jobs_are_cancelled_once_their_pods_are_gone() -> None:
    stopping = plain(pod("trainer", 0, "Running"), **{"txd.dev/cancelled": "true"})
    assert stopping.state == AppState.RUNNING
    gone = plain(**{"txd.dev/cancelled": "true"})
    assert gone.state == AppState.CANCELLED
    assert gone.msg == "cancelled by request"


def test_job_conditions_decide() -> None:
    status = plain(
        pod("trainer", 0, "Failed", code=4),
        conditions={("trainer", 0): "Failed", ("trainer", 1): "Complete", ("ps", 0): "Complete"},
    )
    assert replicas(status) == [
        ("trainer", 0, "FAILED", 4),
        ("trainer", 1, "SUCCEEDED", 0),
        ("ps", 0, "SUCCEEDED", 0),
    ]
    assert status.state == AppState.FAILED


def test_indexed_job_pods_are_found_by_completion_index() -> None:
    indexed = []
    for role in ("trainer", "ps"):
        j = job(role, 0)
        del j["metadata"]["labels"]["txd.dev/replica-id"]
        indexed.append(j)
    status = app_status(
        APP,
        indexed,
        [
            pod("trainer", 0, "Succeeded", code=0, index_only=True),
            pod("trainer", 1, "Running", index_only=True),
            pod("ps", 0, "Pending", index_only=True),
        ],
    )
    assert status is not None
    assert replicas(status) == [
        ("trainer", 0, "SUCCEEDED", 0),
        ("trainer", 1, "RUNNING", None),
        ("ps", 0, "PENDING", None),
    ]


def controller(api: str, kind: str, status: dict[str, Any], **ann: str) -> Any:
    return {"apiVersion": api, "kind": kind, "metadata": meta("hello-abc", **ann), "status": status}


VOLCANO = [
    ("Pending", "PENDING"),
    ("Running", "RUNNING"),
    ("Restarting", "RUNNING"),
    ("Aborting", "RUNNING"),
    ("Completed", "SUCCEEDED"),
    ("Failed", "FAILED"),
    ("Terminated", "FAILED"),
    ("Aborted", "CANCELLED"),
]


@pytest.mark.parametrize(("phase", "state"), VOLCANO)
def test_volcano_phases_without_pods(phase: str, state: str) -> None:
    vcjob = controller("batch.volcano.sh/v1alpha1", "Job", {"state": {"phase": phase}})
    status = app_status(APP, [vcjob], [])
    assert status is not None and AppState.Name(status.state) == state


def test_volcano_fails_only_when_its_phase_says_so() -> None:
    pods = [
        pod("trainer", 0, "Succeeded", code=0),
        pod("trainer", 1, "Succeeded", code=0),
        pod("ps", 0, "Failed", code=1),
    ]
    running = controller(
        "batch.volcano.sh/v1alpha1", "Job", {"state": {"phase": "Running"}, "retryCount": 1}
    )
    status = app_status(APP, [running], pods)
    assert status is not None and status.num_restarts == 1
    # A policy may restart the failed pod: it waits for the controller's word.
    assert status.state == AppState.PENDING
    assert replicas(status)[2] == ("ps", 0, "PENDING", 1)
    failed = controller("batch.volcano.sh/v1alpha1", "Job", {"state": {"phase": "Failed"}})
    status = app_status(APP, [failed], pods)
    assert status is not None and status.state == AppState.FAILED
    assert replicas(status)[2] == ("ps", 0, "FAILED", 1)


def test_volcano_succeeds_once_every_pod_has() -> None:
    pods = [pod("trainer", 0, "Succeeded", code=0), pod("trainer", 1, "Succeeded", code=0)]
    pods.append(pod("ps", 0, "Succeeded", code=0))
    running = controller("batch.volcano.sh/v1alpha1", "Job", {"state": {"phase": "Running"}})
    status = app_status(APP, [running], pods)
    assert status is not None and status.state == AppState.SUCCEEDED
    assert status.msg == "Job phase Running"


def test_an_aborted_volcano_job_is_cancelled_once_its_pods_ended() -> None:
    aborted = controller("batch.volcano.sh/v1alpha1", "Job", {"state": {"phase": "Aborted"}})
    stopping = app_status(APP, [aborted], [pod("trainer", 0, "Running")])
    assert stopping is not None and stopping.state == AppState.RUNNING
    done = app_status(APP, [aborted], [pod("trainer", 0, "Failed", code=143)])
    assert done is not None and done.state == AppState.CANCELLED
    assert replicas(done)[0] == ("trainer", 0, "CANCELLED", 143)


APPWRAPPER = [
    ("workload.codeflare.dev/v1beta2", "phase", "Suspended", "PENDING"),
    ("workload.codeflare.dev/v1beta2", "phase", "Resuming", "PENDING"),
    ("workload.codeflare.dev/v1beta2", "phase", "Running", "RUNNING"),
    ("workload.codeflare.dev/v1beta2", "phase", "Resetting", "RUNNING"),
    ("workload.codeflare.dev/v1beta2", "phase", "Succeeded", "SUCCEEDED"),
    ("workload.codeflare.dev/v1beta2", "phase", "Failed", "FAILED"),
    ("mcad.ibm.com/v1beta1", "state", "Pending", "PENDING"),
    ("mcad.ibm.com/v1beta1", "state", "Running", "RUNNING"),
    ("mcad.ibm.com/v1beta1", "state", "Completed", "SUCCEEDED"),
    ("mcad.ibm.com/v1beta1", "state", "Failed", "FAILED"),
    ("mcad.ibm.com/v1beta1", "state", "Deleted", "CANCELLED"),
    ("workload.codeflare.dev/v1beta1", "state", "Pending", "PENDING"),
    ("workload.codeflare.dev/v1beta1", "state", "Running", "RUNNING"),
    ("workload.codeflare.dev/v1beta1", "state", "RunningHoldCompletion", "RUNNING"),
    ("workload.codeflare.dev/v1beta1", "state", "Completed", "SUCCEEDED"),
    ("workload.codeflare.dev/v1beta1", "state", "Failed", "FAILED"),
    ("workload.codeflare.dev/v1beta1", "state", "Deleted", "CANCELLED"),
]


@pytest.mark.parametrize(("api", "key", "phase", "state"), APPWRAPPER)
def test_appwrapper_phases(api: str, key: str, phase: str, state: str) -> None:
    status = app_status(APP, [controller(api, "AppWrapper", {key: phase})], [])
    assert status is not None and AppState.Name(status.state) == state


def test_a_cancelled_appwrapper_is_cancelled_once_its_pods_are_gone() -> None:
    aw = controller(
        "workload.codeflare.dev/v1beta2",
        "AppWrapper",
        {"phase": "Running"},
        **{"txd.dev/cancelled": "true"},
    )
    assert app_status(APP, [aw], [pod("ps", 0, "Running")]).state == AppState.RUNNING  # type: ignore[union-attr]
    assert app_status(APP, [aw], []).state == AppState.CANCELLED  # type: ignore[union-attr]


def _attempt(name: str, created: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": {"phase": phase}}


def test_newest_attempt_within_one_second_is_the_one_not_failed() -> None:
    """A Job's retry pod comes after the failed one, maybe in the same (whole) second: whatever
    the random names, the failed one is the older."""
    first = _attempt("retry-main-0-zzzzz", "2026-01-01T00:00:05Z", "Failed")
    second = _attempt("retry-main-0-aaaaa", "2026-01-01T00:00:05Z", "Succeeded")
    assert newest([first, second]) is second and newest([second, first]) is second
    later = _attempt("retry-main-0-bbbbb", "2026-01-01T00:00:06Z", "Failed")
    assert newest([first, second, later]) is later
