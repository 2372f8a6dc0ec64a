"""sagemaker_status: DescribeTrainingJob answers -> AppStatus (no AWS).

The answers in tests/schedulers/aws/fixtures/sagemaker-describe.json are HTTP bodies shaped as the
SageMaker API Reference documents DescribeTrainingJob's response (its Response Syntax; the
JSON protocol sends timestamps as epoch seconds), one per status a job passes through. moto
answers Completed at once, so these are the only source of the other states. Each body is read
by botocore's own response parser against SageMaker's service model, exactly as aioboto3 hands
it to the scheduler (datetimes and all), and its members are checked against that model."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from txd.schedulers.aws import sagemaker_status as ss
from txd.v1 import AppState

RECORDED = Path(__file__).with_name("fixtures") / "sagemaker-describe.json"


def _model_output() -> Any:
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return model.operation_model("DescribeTrainingJob").output_shape


def answer(case: str) -> dict[str, Any]:
    """The recorded body of `case`, as botocore parses it for aioboto3."""
    from botocore.parsers import create_parser

    body = json.dumps(json.loads(RECORDED.read_text())[case]).encode()
    response = {"body": body, "headers": {}, "status_code": 200}
    parsed: dict[str, Any] = create_parser("json").parse(response, _model_output())
    return parsed


def test_recorded_answers_have_the_models_shape() -> None:
    shape = _model_output()
    for case, body in json.loads(RECORDED.read_text()).items():
        unknown = set(body) - set(shape.members)
        assert not unknown, f"{case}: {unknown}"
        for key in ("TrainingJobStatus", "SecondaryStatus"):
            assert body[key] in shape.members[key].enum, f"{case}: {key}"
        for t in body["SecondaryStatusTransitions"]:
            assert t["Status"] in shape.members["SecondaryStatus"].enum, case


@pytest.mark.parametrize(
    ("case", "state", "msg"),
    [
        ("starting", AppState.PENDING, "Starting: Preparing the instances for training"),
        ("downloading", AppState.PENDING, "Downloading: Downloading the training image"),
        ("training", AppState.RUNNING,
         "Training: Training image download completed. Training in progress."),
        ("spot-interrupted", AppState.PENDING,
         "Interrupted: The job was interrupted: insufficient spot capacity"),
        ("stopping", AppState.RUNNING, "Stopping: Stopping the training job"),
        ("stopped", AppState.CANCELLED, "Stopped: Training job stopped"),
        ("max-runtime-exceeded", AppState.FAILED,
         "MaxRuntimeExceeded: Job stopped because it exceeded the maximum runtime "
         "(MaxRuntimeInSeconds)"),
        ("completed", AppState.SUCCEEDED, "Completed: Training job completed"),
        ("failed", AppState.FAILED, "Failed: Training job failed; AlgorithmError: , exit code: 3"),
    ],
)  # fmt: skip
def test_states_and_messages(case: str, state: AppState, msg: str) -> None:
    status = ss.app_status(answer(case), role="trainer")
    assert status.state == state
    assert status.msg == msg
    assert status.app_id == "train-bcdfghjklmnp"
    # Every instance is a replica of the one role, in the job's state.
    (role,) = status.roles
    assert role.role == "trainer"
    assert [(r.id, r.hostname, r.state) for r in role.replicas] == [
        (0, "algo-1", state),
        (1, "algo-2", state),
    ]
    assert status.ui_url == (
        "https://us-east-1.console.aws.amazon.com/sagemaker/home?region=us-east-1"
        "#/jobs/train-bcdfghjklmnp"
    )
    assert status.created.ToDatetime(dt.UTC) == dt.datetime(
        2025, 11, 24, 16, 0, 0, 123000, tzinfo=dt.UTC
    )


def test_failure_reason_is_the_structured_error() -> None:
    assert ss.app_status(answer("failed"), role="t").structured_error_msg == (
        "AlgorithmError: , exit code: 3"
    )
    assert ss.app_status(answer("stopped"), role="t").structured_error_msg == ""


def test_state_table_against_torchx() -> None:
    """TorchX maps TrainingJobStatus alone: InProgress RUNNING, Stopping and Stopped CANCELLED.
    txd agrees where SageMaker says the same thing and refines it where it does not."""
    assert ss.app_state("InProgress", "Training") == AppState.RUNNING
    assert ss.app_state("InProgress", "Uploading") == AppState.RUNNING
    assert ss.app_state("InProgress", "LaunchingMLInstances") == AppState.PENDING
    assert ss.app_state("Stopping", "Stopping") == AppState.RUNNING  # still running
    assert ss.app_state("Stopped", "Stopped") == AppState.CANCELLED
    assert ss.app_state("Stopped", "MaxWaitTimeExceeded") == AppState.FAILED
    assert ss.app_state("Completed", "Completed") == AppState.SUCCEEDED
    assert ss.app_state("Failed", "Failed") == AppState.FAILED
    assert ss.app_state("Deleting", "") == AppState.UNKNOWN
    assert ss.app_state("SomethingNew", "") == AppState.UNKNOWN


def test_a_list_summary_has_no_resources() -> None:
    """ListTrainingJobs' summaries lack ResourceConfig: the caller gives the count."""
    summary = {
        "TrainingJobName": "x",
        "TrainingJobArn": "arn:aws:sagemaker:eu-west-1:123456789012:training-job/x",
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Training",
    }
    status = ss.app_status(summary, role="r", instances=3)
    assert [r.hostname for r in status.roles[0].replicas] == ["algo-1", "algo-2", "algo-3"]
    assert "region=eu-west-1" in status.ui_url
    assert ss.app_status(summary, role="r").roles[0].replicas[0].hostname == "algo-1"
    assert ss.ui_url("not an arn") == ""
