"""The CreateTrainingJob requests txd builds (schedulers/aws/sagemaker_request.py), without AWS:
golden JSON (tests/schedulers/aws/fixtures), every request checked against SageMaker's service model
as botocore ships it (sagemaker_apps.validate: members, types, enums, lengths, ranges, patterns),
TorchX's option names, and a clear error for each bad input.

The golden files are rewritten only by hand, never by a test run:
    cd tests/schedulers/aws
    PYTHONPATH=. ../../../.venv/bin/python test_aws_sagemaker_request.py --update-golden
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from sagemaker_apps import JOB_NAME, SESSION, every_option, opts, trainer_app, validate
from txd.schedulers.aws import sagemaker_request as sr
from txd.schedulers.errors import InvalidArgument
from txd.v1.app_pb2 import AppDef, BindMount, Mount, Role

GOLDEN = Path(__file__).with_name("fixtures")
CASES = {
    "sagemaker-minimal": lambda: sr.training_job(
        trainer_app(replicas=1), opts(), session=SESSION, name=JOB_NAME
    ),
    "sagemaker-every-option": lambda: sr.training_job(
        trainer_app(), every_option(), session=SESSION, name=JOB_NAME
    ),
}


def _build(app: AppDef | None = None, **kw: Any) -> dict[str, Any]:
    return sr.training_job(app or trainer_app(), opts(**kw), session=SESSION, name=JOB_NAME).request


@pytest.mark.parametrize("case", sorted(CASES))
def test_requests_match_the_golden_json(case: str) -> None:
    job = CASES[case]()
    expected = (GOLDEN / f"{case}.json").read_text()
    assert job.render() + "\n" == expected
    assert json.loads(expected) == job.request  # what DryRun prints is what is sent


@pytest.mark.parametrize("case", sorted(CASES))
def test_requests_are_valid_for_sagemakers_model(case: str) -> None:
    validate(CASES[case]().request)


def test_the_model_check_can_fail() -> None:
    """validate() catches an unknown member, a bad enum, a range and a pattern."""
    good = _build()
    bad: list[dict[str, Any]] = [json.loads(json.dumps(good)) for _ in range(4)]
    bad[0]["ResourceConfig"]["VolumeSize"] = 30
    bad[1]["AlgorithmSpecification"]["TrainingInputMode"] = "Stream"
    bad[2]["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 3601
    bad[3]["TrainingJobName"] = "under_score"
    for request in bad:
        with pytest.raises(AssertionError):
            validate(request)


def test_one_role_is_one_training_job() -> None:
    req = _build()
    algo = req["AlgorithmSpecification"]
    assert algo["TrainingImage"] == trainer_app().roles[0].image
    # The command runs as given, macros substituted: ${app_id} is the job's name, ${rank0_env}
    # the variable naming rank 0's host, which SageMaker calls algo-1.
    assert algo["ContainerEntrypoint"] == ["python"]
    assert algo["ContainerArguments"] == [
        "-m", "train", "--run", JOB_NAME, "--master", "TORCHX_RANK0_HOST"
    ]  # fmt: skip
    assert req["Environment"] == {"LOG_LEVEL": "info", "TORCHX_RANK0_HOST": "algo-1"}
    assert req["ResourceConfig"] == {
        "InstanceType": "ml.p3.2xlarge",  # from the named resource aws_p3.2xlarge
        "InstanceCount": 2,  # num_replicas
        "VolumeSizeInGB": 30,
    }
    assert req["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400}  # the SDK's defaults
    assert req["RetryStrategy"] == {"MaximumRetryAttempts": 2}  # the role's max_retries
    assert sr.tag_map(req["Tags"]) == {
        "team": "vision",  # the app's metadata
        "txd.dev/scheduler": "aws_sagemaker",
        "txd.dev/session": SESSION,
        "txd.dev/role": "trainer",
        "txd.dev/app-name": "train",
    }


def test_option_wins_over_named_resource_and_env_over_option() -> None:
    req = _build(instance_type="ml.g5.xlarge", environment={"LOG_LEVEL": "x", "A": "1"})
    assert req["ResourceConfig"]["InstanceType"] == "ml.g5.xlarge"
    assert req["Environment"]["LOG_LEVEL"] == "info" and req["Environment"]["A"] == "1"
    one = _build(trainer_app(replicas=1))
    assert "TORCHX_RANK0_HOST" not in one["Environment"]  # one instance: nothing to find


def test_every_option_maps_to_its_field() -> None:
    req = sr.training_job(trainer_app(), every_option(), session=SESSION, name=JOB_NAME).request
    assert req["StoppingCondition"] == {"MaxRuntimeInSeconds": 7200, "MaxWaitTimeInSeconds": 10800}
    assert req["EnableManagedSpotTraining"] is True
    assert req["RetryStrategy"] == {"MaximumRetryAttempts": 3}  # the option over max_retries
    assert req["VpcConfig"] == {"SecurityGroupIds": ["sg-0d1e2f"], "Subnets": ["subnet-0a1b2c"]}
    assert [c["ChannelName"] for c in req["InputDataConfig"]] == ["eval", "train", "model"]
    assert req["OutputDataConfig"]["CompressionType"] == "NONE"
    assert req["DebugHookConfig"] == {"S3OutputPath": "s3://bucket/out"}
    assert req["AlgorithmSpecification"]["MetricDefinitions"] == [
        {"Name": "loss", "Regex": "loss=([0-9.]+)"}
    ]


def test_torchx_option_names() -> None:
    """TorchX aws_sagemaker's options that have an API field keep their names; its SDK-only
    ones (code upload for AWS's framework images) are not options."""
    torchx = {
        "role", "instance_type", "keep_alive_period_in_seconds", "volume_size", "volume_kms_key",
        "max_run", "input_mode", "output_path", "output_kms_key", "base_job_name", "tags",
        "subnets", "security_group_ids", "model_uri", "model_channel_name", "metric_definitions",
        "encrypt_inter_container_traffic", "use_spot_instances", "max_wait", "checkpoint_s3_uri",
        "checkpoint_local_path", "debugger_hook_config", "enable_sagemaker_metrics",
        "enable_network_isolation", "disable_profiler", "environment", "max_retry_attempts",
        "hyperparameters", "training_repository_access_mode",
        "training_repository_credentials_provider_arn", "disable_output_compression",
        "enable_infra_check", "instance_count",
    }  # fmt: skip
    ours = set(sr.SageMakerOpts.__dataclass_fields__)
    assert torchx <= ours
    assert ours - torchx == {"image_repo", "inputs"}


def test_job_names_follow_sagemakers_rule() -> None:
    rule = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
    for base in ["train", "my_app.v2", "-x-", "", "a" * 80, "ünï/cødé", "a--b"]:
        name = sr.job_name_for(base)
        assert rule.fullmatch(name) and len(name) <= 63, name
    assert sr.job_name_for("my_app.v2").startswith("my-app-v2-")
    assert sr.job_name_for("").count("-") == 0
    job = sr.training_job(trainer_app(), opts(base_job_name="exp_1"), session=SESSION)
    assert job.name.startswith("exp-1-") and job.request["TrainingJobName"] == job.name


def _error(app: AppDef | None = None, **kw: Any) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as e:
        _build(app, **kw)
    return e.value


def _app(**role: Any) -> AppDef:
    app = trainer_app()
    for key, value in role.items():
        if key == "mounts":
            app.roles[0].mounts.extend(value)
        elif key == "args":
            del app.roles[0].args[:]
            app.roles[0].args.extend(value)
        else:
            setattr(app.roles[0], key, value)
    return app


@pytest.mark.parametrize(
    ("app", "kw", "field", "says"),
    [
        (AppDef(name="x", roles=[Role(name="a"), Role(name="b")]), {}, "app.roles", "one role"),
        (_app(image=""), {}, "app.roles[0].image", "required"),
        (_app(mounts=[Mount(bind=BindMount(src_path="/a", dst_path="/b"))]), {},
         "app.roles[0].mounts", "input channels"),
        (_app(args=["--rank", "${replica_id}"]), {}, "app.roles[0].args[1]", "no replica id"),
        (_app(args=["x" * 257]), {}, "app.roles[0].args[0]", "256 characters"),
        (_app(max_retries=31), {}, "app.roles[0].max_retries", "1 to 30"),
        (None, {"role": "SageMakerRole"}, "cfg.role", "IAM role ARN"),
        (None, {"output_path": "bucket/out"}, "cfg.output_path", "S3 URI"),
        (None, {"instance_type": "p3.2xlarge"}, "cfg.instance_type", "'ml.'"),
        (None, {"input_mode": "Stream"}, "cfg.input_mode", "File, Pipe, FastFile"),
        (None, {"keep_alive_period_in_seconds": 4000}, "cfg.keep_alive_period_in_seconds",
         "0 to 3600"),
        (None, {"use_spot_instances": True}, "cfg.max_wait", "required with use_spot"),
        (None, {"use_spot_instances": True, "max_wait": 10}, "cfg.max_wait", "less than max_run"),
        (None, {"max_wait": 100}, "cfg.max_wait", "use_spot_instances"),
        (None, {"checkpoint_local_path": "/c"}, "cfg.checkpoint_local_path", "checkpoint_s3_uri"),
        (None, {"subnets": ["subnet-1"]}, "cfg.security_group_ids", "needs both"),
        (None, {"inputs": {"a b": "s3://b/x"}}, "cfg.inputs", "channel name"),
        (None, {"inputs": {"train": "/data"}}, "cfg.inputs", "S3 URI"),
        (None, {"model_uri": "s3://b/m", "inputs": {"model": "s3://b/x"}},
         "cfg.model_channel_name", "already"),
        (None, {"metric_definitions": {"loss": "("}}, "cfg.metric_definitions", "bad regex"),
        (None, {"tags": {"aws:x": "1"}}, "cfg.tags", "not a tag key"),
        (None, {"environment": {"1BAD": "x"}}, "cfg.environment", "environment variable name"),
        (None, {"training_repository_access_mode": "Public"},
         "cfg.training_repository_access_mode", "Platform, Vpc"),
        (None, {"max_retry_attempts": 0}, "cfg.max_retry_attempts", "1 to 30"),
        (None, {"volume_size": 0}, "cfg.volume_size", "at least 1"),
    ],
)  # fmt: skip
def test_bad_input_names_the_field(
    app: AppDef | None, kw: dict[str, Any], field: str, says: str
) -> None:
    e = _error(app, **kw)
    assert e.field == field, str(e)
    assert says in e.reason, str(e)


def test_one_instance_may_use_replica_id() -> None:
    req = _build(_app(num_replicas=1, args=["--rank", "${replica_id}"]))
    assert req["AlgorithmSpecification"]["ContainerArguments"] == ["--rank", "0"]


@pytest.mark.parametrize(("replicas", "count"), [(2, 4), (2, 1), (1, 3)])
def test_instance_count_wins_over_num_replicas(replicas: int, count: int) -> None:
    """TorchX's instance_count is the instance count whatever num_replicas says (TorchX never
    reads num_replicas); rank 0's host is named only for more than one instance."""
    job = sr.training_job(
        trainer_app(replicas=replicas), opts(instance_count=count), session=SESSION, name=JOB_NAME
    )
    assert job.request["ResourceConfig"]["InstanceCount"] == job.instances == count
    assert ("TORCHX_RANK0_HOST" in job.request["Environment"]) is (count > 1)
    validate(job.request)


def test_instance_count_decides_whether_replica_id_is_allowed() -> None:
    app = _app(args=["--rank", "${replica_id}"])  # two replicas
    req = _build(app, instance_count=1)
    assert req["AlgorithmSpecification"]["ContainerArguments"] == ["--rank", "0"]
    one = _app(num_replicas=1, args=["--rank", "${replica_id}"])
    assert _error(one, instance_count=2).field == "app.roles[0].args[1]"


def test_instance_count_below_1_is_refused() -> None:
    e = _error(instance_count=0)
    assert (e.field, e.reason) == ("cfg.instance_count", "must be >= 1, got 0")


def test_required_options_are_named() -> None:
    from txd.schedulers.options import resolve

    with pytest.raises(InvalidArgument) as e:
        resolve(sr.SageMakerOpts, {})
    assert e.value.field == "cfg.role"


if __name__ == "__main__" and sys.argv[1:] == ["--update-golden"]:
    for name, make in CASES.items():
        (GOLDEN / f"{name}.json").write_text(make().render() + "\n")
