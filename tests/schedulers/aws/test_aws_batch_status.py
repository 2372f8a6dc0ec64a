"""aws_batch's status mapping (schedulers/aws/batch_status.py) on describe_jobs answers moto
cannot give (tests/schedulers/aws/fixtures/describe_jobs.json; its `_source` says where the shapes
come from): a multi-node job's per-node states and exit codes, RUNNABLE and STARTING with their
reasons, exit codes, retries, a job txd terminated; and the scheduler asking for an ended multi-node
job's nodes once, 100 ids a call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from txd.schedulers.api import Job, NoAnswer
from txd.schedulers.aws import aws_batch
from txd.schedulers.aws.batch_status import app_status
from txd.schedulers.errors import BackendUnavailable
from txd.v1 import AppState, AppStatus

RECORDED = json.loads((Path(__file__).with_name("fixtures") / "describe_jobs.json").read_text())


def replicas(status: AppStatus) -> list[tuple[str, int, int, int | None]]:
    return [
        (role.role, r.id, r.state, r.exit_code if r.HasField("exit_code") else None)
        for role in status.roles
        for r in role.replicas
    ]


def test_a_failed_multi_node_job_has_each_nodes_state_and_exit_code() -> None:
    rec = RECORDED["multinode_failed"]
    nodes = {n["nodeDetails"]["nodeIndex"]: n for n in rec["nodes"]}
    status = app_status(rec["job"], nodes)
    assert status.app_id == "gpu-q:dist-bcdfghjklmnp"
    assert status.state == AppState.FAILED
    assert replicas(status) == [
        ("trainer", 0, AppState.FAILED, 1),
        ("trainer", 1, AppState.FAILED, 137),
        ("ps", 0, AppState.SUCCEEDED, 0),
    ]
    assert status.msg == (
        "Essential container in task exited (trainer/0 exited with 1, trainer/1 exited with 137)"
    )
    assert status.roles[0].replicas[0].hostname == "10.0.1.10"
    assert status.ui_url.endswith("#jobs/mnp-job/" + rec["job"]["jobId"])
    # Without node descriptions (moto's case) every node shows the job's state.
    alone = app_status(rec["job"])
    assert [r[2] for r in replicas(alone)] == [AppState.FAILED] * 3


@pytest.mark.parametrize(
    ("name", "state", "msg"),
    [
        ("runnable", AppState.PENDING, "RUNNABLE: MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT - "),
        ("starting", AppState.PENDING, "STARTING"),
        ("failed_exit_3", AppState.FAILED, "Essential container in task exited (main/0 exited"),
        ("succeeded_after_retries", AppState.SUCCEEDED, ""),
        ("cancelled", AppState.CANCELLED, "cancelled through txd"),
        ("cancelled_before_running", AppState.CANCELLED, "cancelled through txd"),
    ],
)
def test_states_and_messages(name: str, state: int, msg: str) -> None:
    status = app_status(RECORDED[name]["job"])
    assert status.state == state
    assert status.msg.startswith(msg), status.msg
    assert [r[2] for r in replicas(status)] == [state]


def test_exit_codes_and_restarts() -> None:
    assert replicas(app_status(RECORDED["failed_exit_3"]["job"]))[0][3] == 3
    retried = app_status(RECORDED["succeeded_after_retries"]["job"])
    assert retried.num_restarts == 2
    assert replicas(retried)[0][3] == 0


class _Recorded:
    """Answers describe_jobs from the recording, counting the ids of each call."""

    def __init__(self, fail: bool = False) -> None:
        rec = RECORDED["multinode_failed"]
        self.known = {rec["job"]["jobId"]: rec["job"], **{n["jobId"]: n for n in rec["nodes"]}}
        self.asked: list[list[str]] = []
        self.fail = fail

    async def client(self, service: str) -> object:
        return object()

    async def call(self, client: object, op: str, **kw: Any) -> Any:
        assert op == "describe_jobs"
        self.asked.append(list(kw["jobs"]))
        if self.fail:
            raise BackendUnavailable("aws_batch: AWS is throttling txd")
        return {"jobs": [self.known[j] for j in kw["jobs"] if j in self.known]}


async def test_describe_many_asks_for_an_ended_multi_node_jobs_nodes_once() -> None:
    sched = aws_batch.create_scheduler("t", settings={"region": "us-east-1"})
    rec = _Recorded()
    sched.aws = rec  # type: ignore[assignment]
    jid = RECORDED["multinode_failed"]["job"]["jobId"]
    others = [Job(f"q:gone{i}", {"job_id": f"gone-{i}"}) for i in range(150)]
    job = Job("gpu-q:dist-bcdfghjklmnp", {"job_id": jid})
    found = await sched.describe_many([job, *others])
    assert [len(ids) for ids in rec.asked] == [100, 51, 3]
    assert rec.asked[2] == [f"{jid}#0", f"{jid}#1", f"{jid}#2"]
    status = found[job.app_id]
    assert isinstance(status, AppStatus)
    assert [r[3] for r in replicas(status)] == [1, 137, 0]
    assert all(found[o.app_id] is None for o in others)  # submitted long ago: Batch forgot


async def test_a_batch_that_cannot_be_asked_is_no_answer_never_a_state() -> None:
    sched = aws_batch.create_scheduler("t", settings={"region": "us-east-1"})
    sched.aws = _Recorded(fail=True)  # type: ignore[assignment]
    with pytest.raises(BackendUnavailable):
        await sched.describe_many([Job("q:a", {"job_id": "a"})])
    partial = _Recorded()
    calls = 0

    async def first_fails(client: object, op: str, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise BackendUnavailable("aws_batch: AWS is throttling txd")
        return await _Recorded.call(partial, client, op, **kw)

    partial.call = first_fails  # type: ignore[method-assign]
    sched.aws = partial  # type: ignore[assignment]
    jobs = [Job(f"q:j{i}", {"job_id": f"j{i}", "submitted_at": 0}) for i in range(101)]
    found = await sched.describe_many(jobs)
    assert sum(isinstance(v, NoAnswer) for v in found.values()) == 100
    assert found["q:j100"] is None
