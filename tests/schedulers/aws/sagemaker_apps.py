"""The fixed app and options the SageMaker request tests build from (tests/schedulers/aws/
test_aws_sagemaker_request.py), and the checks every request goes through: botocore's own
validator against SageMaker's service model (the shapes, required members, types, lengths and
ranges AWS publishes), which is what the AWS API reference is generated from."""

from __future__ import annotations

from typing import Any

from txd.schedulers.aws.sagemaker_request import SageMakerOpts
from txd.schedulers.options import resolve, to_cfg_value
from txd.v1.app_pb2 import AppDef, Resource, Role

JOB_NAME = "train-bcdfghjklmnp"
SESSION = "txd"
ROLE_ARN = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1"


def trainer_app(replicas: int = 2) -> AppDef:
    role = Role(
        name="trainer",
        image=IMAGE,
        entrypoint="python",
        args=["-m", "train", "--run", "${app_id}", "--master", "${rank0_env}"],
        env={"LOG_LEVEL": "info"},
        num_replicas=replicas,
        max_retries=2,
        resource=Resource(
            cpu=8,
            gpu=1,
            mem_mb=59000,
            capabilities={"node.kubernetes.io/instance-type": "p3.2xlarge"},
        ),
    )
    return AppDef(name="train", roles=[role], metadata={"team": "vision"})


def opts(**kw: Any) -> SageMakerOpts:
    base: dict[str, Any] = {"role": ROLE_ARN, "output_path": "s3://bucket/out"}
    base.update(kw)
    return resolve(SageMakerOpts, {k: to_cfg_value(v) for k, v in base.items()})


def every_option() -> SageMakerOpts:
    """Every option set, as the golden request `sagemaker-every-option.json` was built."""
    return opts(
        instance_type="ml.p4d.24xlarge",
        inputs={"train": "s3://bucket/data/train", "eval": "s3://bucket/data/eval"},
        input_mode="FastFile",
        output_kms_key="arn:aws:kms:us-east-1:123456789012:key/out",
        disable_output_compression=True,
        volume_size=200,
        volume_kms_key="arn:aws:kms:us-east-1:123456789012:key/vol",
        keep_alive_period_in_seconds=600,
        max_run=7200,
        use_spot_instances=True,
        max_wait=10800,
        checkpoint_s3_uri="s3://bucket/ckpt",
        checkpoint_local_path="/opt/ml/checkpoints",
        max_retry_attempts=3,
        tags={"project": "demo"},
        subnets=["subnet-0a1b2c"],
        security_group_ids=["sg-0d1e2f"],
        enable_network_isolation=True,
        encrypt_inter_container_traffic=True,
        environment={"NCCL_DEBUG": "INFO", "LOG_LEVEL": "debug"},
        hyperparameters={"epochs": "10", "lr": "0.01"},
        model_uri="s3://bucket/models/base",
        metric_definitions={"loss": "loss=([0-9.]+)"},
        enable_sagemaker_metrics=True,
        debugger_hook_config=True,
        disable_profiler=True,
        training_repository_access_mode="Vpc",
        training_repository_credentials_provider_arn=(
            "arn:aws:lambda:us-east-1:123456789012:function:creds"
        ),
        enable_infra_check=True,
    )


def validate(request: dict[str, Any], operation: str = "CreateTrainingJob") -> None:
    """Raises AssertionError naming the path for what SageMaker's service model refuses: an
    unknown or missing member, a wrong type, a value outside an enum, a length, count or number
    out of range, a string not matching the member's pattern (botocore's own validator checks
    only types and minimums, so this walks the shape itself)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    _check(request, model.operation_model(operation).input_shape, operation)


def _check(value: Any, shape: Any, path: str) -> None:
    import regex  # Java's \p{L} classes, as the model's patterns use them

    meta = shape.metadata
    kind = shape.type_name
    if kind == "structure":
        assert isinstance(value, dict), f"{path}: expected an object"
        for name in shape.required_members:
            assert name in value, f"{path}.{name}: required"
        for name, item in value.items():
            assert name in shape.members, f"{path}.{name}: not a member of {shape.name}"
            _check(item, shape.members[name], f"{path}.{name}")
        return
    if kind in ("list", "map", "string"):
        assert isinstance(value, {"list": list, "map": dict, "string": str}[kind]), (
            f"{path}: expected a {kind}"
        )
        size = len(value)
        assert meta.get("min", 0) <= size <= meta.get("max", size), f"{path}: length {size}"
    if kind == "list":
        for i, item in enumerate(value):
            _check(item, shape.member, f"{path}[{i}]")
    elif kind == "map":
        for key, item in value.items():
            _check(key, shape.key, f"{path} key")
            _check(item, shape.value, f"{path}[{key}]")
    elif kind == "string":
        if shape.enum:
            assert value in shape.enum, f"{path}: {value!r} not in {shape.enum}"
        if "pattern" in meta:
            assert regex.fullmatch(meta["pattern"], value), (
                f"{path}: {value!r} !~ {meta['pattern']}"
            )
    elif kind in ("integer", "long"):
        assert isinstance(value, int) and not isinstance(value, bool), f"{path}: expected an int"
        assert meta.get("min", value) <= value <= meta.get("max", value), f"{path}: {value}"
    elif kind == "boolean":
        assert isinstance(value, bool), f"{path}: expected a bool"
    else:
        raise AssertionError(f"{path}: {kind} not checked")
