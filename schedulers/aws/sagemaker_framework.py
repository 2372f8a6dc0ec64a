"""AppDef -> the CreateTrainingJob request of SageMaker's framework mode, as TorchX 0.7's
aws_sagemaker makes it through the SageMaker Python SDK's PyTorch estimator (sagemaker<3),
built here without the SDK: a pure builder, no I/O but checking that local paths exist.

TorchX's mapping: the role's args[0] is the script (a .py file in the source directory; the
role's entrypoint is not used: SageMaker's launcher runs the script with torchrun, the SDK's
`torch_distributed`), the other args `--name value` or `--name=value` pairs that become
hyperparameters (after the hyperparameters option's: an arg wins), the role's env after the
environment option's, with TORCHX_JOB_ID the job's name, the app's metadata as tags. The SDK
adds the hyperparameters its launcher reads (sagemaker_program, sagemaker_submit_directory,
sagemaker_container_log_level, sagemaker_job_name, sagemaker_region,
sagemaker_torch_distributed_enabled, sagemaker_instance_type), every value JSON-encoded; a
Debugger hook and the profiler writing to output_path (unless turned off, or the region has
neither); and uploads the source directory as `<prefix>/<job>/source/sourcedir.tar.gz`
(sagemaker_source) to code_location's bucket, else output_path's, else its default bucket
`sagemaker-<region>-<account>` (whose output path is `s3://<that bucket>/`). The account is
only known from AWS (STS): a request that needs it holds ACCOUNT until the job is submitted;
a dry run on a daemon with no region holds REGION (TorchX's dry run needs none either).

Where txd differs on purpose: ${app_id} and the other macros are substituted (TorchX sends
them as they are), base_job_name is the name's prefix (TorchX ignores it), the role's
max_retries is the retry strategy unless max_retry_attempts is set (TorchX drops it), and
txd's own tags are added beside the metadata's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
from collections.abc import Sequence
from typing import Any

from txd.schedulers.api import Macros, SubmitContext
from txd.schedulers.aws import sagemaker_request as base
from txd.schedulers.aws.sagemaker_request import Request, SageMakerOpts, TrainingJob
from txd.schedulers.aws.sagemaker_source import ARCHIVE, SourceUpload
from txd.schedulers.errors import InvalidArgument
from txd.v1.app_pb2 import AppDef

ACCOUNT = "<account>"  # stands for the caller's AWS account until STS says which
REGION = "<region>"  # stands for the region in a dry run on a daemon that has none set
JOB_ID_ENV = "TORCHX_JOB_ID"
# The SDK's fw_utils: regions without SageMaker Debugger and its profiler.
NO_DEBUGGER = frozenset(
    {
        "us-iso-east-1",
        "us-isob-east-1",
        "ap-southeast-3",
        "ap-southeast-4",
        "eu-south-2",
        "me-central-1",
        "ap-south-2",
        "eu-central-2",
        "us-gov-east-1",
    }
)
NO_PROFILER = NO_DEBUGGER - {"us-gov-east-1"}
ISOLATED_CODE = "/opt/ml/input/data/code/" + ARCHIVE  # the code channel, in the container
CODE_CHANNEL = "code"
MODEL_CONTENT_TYPE = "application/x-sagemaker-model"


def default_bucket(region: str, account: str = ACCOUNT) -> str:
    """The SDK's default bucket (Session.default_bucket)."""
    return f"sagemaker-{region}-{account}"


def parse_args(args: Sequence[str], path: str) -> tuple[str, dict[str, str]]:
    """TorchX's split of a role's args: the script, then `--name value` / `--name=value`
    pairs as hyperparameters (in order: a later one wins)."""
    if not args:
        raise InvalidArgument(
            f"{path}.args", "framework mode needs the script (a .py file) as args[0]"
        )
    script = args[0]
    if script == "-m" or not script.endswith(".py"):
        raise InvalidArgument(
            f"{path}.args[0]",
            f"framework mode runs a script with torchrun (SageMaker's torch_distributed), "
            f"which takes only python programs (*.py), got {script!r}: give a script, or use "
            "-c mode=container to run any command in the image",
        )
    params: dict[str, str] = {}
    i = 1
    while i < len(args):
        arg, at = args[i], i
        key, sep, value = arg.partition("=")
        if not sep:
            if i + 1 >= len(args):
                raise InvalidArgument(
                    f"{path}.args[{i}]",
                    f"{arg!r} has no value: framework mode passes args as hyperparameters, "
                    "--name value or --name=value (or use -c mode=container)",
                )
            i += 1
            value = args[i]
        if not key.startswith("--"):
            raise InvalidArgument(
                f"{path}.args[{at}]",
                f"{key!r}: framework mode passes args as hyperparameters, which start with "
                "-- (or use -c mode=container)",
            )
        params[key[2:]] = value
        i += 1
    return script, params


def framework_job(
    app: AppDef,
    opts: SageMakerOpts,
    ctx: SubmitContext,
    *,
    session: str,
    region: str,
    account: str = ACCOUNT,
    name: str = "",
) -> TrainingJob:
    """The framework-mode CreateTrainingJob request of `app` (one role) and the upload of its
    code. `region`: where the job runs (a hyperparameter, the default bucket's name).
    Raises InvalidArgument naming the field for anything the SDK or SageMaker refuses."""
    if len(app.roles) != 1:
        names = ", ".join(r.name for r in app.roles) or "none"
        raise InvalidArgument(
            "app.roles",
            f"aws_sagemaker runs one role as one training job, got {len(app.roles)} ({names})",
        )
    role = app.roles[0]
    path = "app.roles[0]"
    if not role.image:
        raise InvalidArgument(f"{path}.image", "required: the training image (an ECR image)")
    if role.mounts:
        raise InvalidArgument(
            f"{path}.mounts", "SageMaker has no mounts: give data as input channels (-c inputs=)"
        )
    instances = base._instance_count(opts, role)
    name = name or base.job_name_for(opts.base_job_name or app.name)
    base._check_opts(opts)
    if opts.code_location and not opts.code_location.startswith("s3://"):
        raise base._bad(
            "code_location", f"expected an S3 URI (s3://bucket/prefix), got {opts.code_location!r}"
        )

    marker = "\0replica\0"
    macros = Macros(img_root="", app_id=name, replica_id=marker, rank0_env=base.RANK0_ENV)
    r = macros.apply(role)
    for i, arg in enumerate(r.args):
        r.args[i] = base._no_replica_id(marker, arg, f"{path}.args[{i}]", instances)
    for key, value in r.env.items():
        r.env[key] = base._no_replica_id(marker, value, f"{path}.env[{key}]", instances)
    script, from_args = parse_args(list(r.args), path)
    instance_type = base._instance_type(opts, role.resource.capabilities)

    output_path = opts.output_path or f"s3://{default_bucket(region, account)}/"
    upload = _upload(opts, ctx, region=region, account=account, name=name, script=script)
    isolated = bool(opts.enable_network_isolation)
    code = upload.uri if upload else str(opts.source_dir)
    launcher: dict[str, Any] = {
        "sagemaker_submit_directory": ISOLATED_CODE if isolated else code,
        "sagemaker_program": script,
        "sagemaker_container_log_level": opts.container_log_level,
        "sagemaker_job_name": name,
        "sagemaker_region": region,
        "sagemaker_torch_distributed_enabled": True,
        "sagemaker_instance_type": instance_type,
    }
    params = {**opts.hyperparameters, **from_args}
    hyperparameters = {k: json.dumps(v) for k, v in {**params, **launcher}.items()}
    base._hyperparameters(hyperparameters)

    algorithm: Request = {"TrainingImage": r.image, "TrainingInputMode": opts.input_mode}
    req = base._training_request(
        opts,
        name,
        algorithm,
        instance_type=instance_type,
        instances=instances,
        output_path=output_path,
    )
    req["HyperParameters"] = dict(sorted(hyperparameters.items()))
    channels = _channels(opts, code if isolated else "")
    if channels:
        req["InputDataConfig"] = channels
    base._job_flags(req, opts, isolated=isolated)
    if _debugger(opts, region):
        req["DebugHookConfig"] = {"S3OutputPath": output_path, "CollectionConfigurations": []}
    if opts.disable_profiler or region in NO_PROFILER:
        req["ProfilerConfig"] = {"DisableProfiler": True}
    else:
        req["ProfilerConfig"] = {"S3OutputPath": output_path, "DisableProfiler": False}
    env = {**opts.environment, **r.env, JOB_ID_ENV: name}
    req["Environment"] = base._environment(env, opts.environment, path)
    base._retries(req, opts, role, path)
    req["Tags"] = base._tags(app, opts, session=session, role=role.name)
    return TrainingJob(name=name, role=role.name, instances=instances, request=req, upload=upload)


def _debugger(opts: SageMakerOpts, region: str) -> bool:
    """The SDK's rule: on unless turned off; refused where the region has no Debugger; off
    with checkpoints (smdebug does not take distributed jobs that checkpoint, and TorchX's
    jobs are all distributed: torch_distributed)."""
    if region in NO_DEBUGGER:
        if opts.debugger_hook_config:
            raise base._bad("debugger_hook_config", f"SageMaker Debugger is not in {region}")
        return False
    if opts.debugger_hook_config is False:
        return False
    return not (opts.checkpoint_s3_uri and opts.checkpoint_local_path)


def _channels(opts: SageMakerOpts, code_uri: str) -> list[Request]:
    """txd's input channels, then the model's and, with network isolation, the code's (the
    SDK's order and fields)."""
    model_uri = opts.model_uri
    out = base._channels(dataclasses.replace(opts, model_uri=None))
    if model_uri:
        if opts.model_channel_name in opts.inputs:
            raise base._bad(
                "model_channel_name",
                f"{opts.model_channel_name!r} is an input channel already (cfg.inputs)",
            )
        if not base._S3.fullmatch(model_uri):
            raise base._bad("model_uri", f"expected an S3 URI (s3://...), got {model_uri!r}")
        out.append(
            {
                "ChannelName": opts.model_channel_name,
                "DataSource": {"S3DataSource": _prefix(model_uri)},
                "ContentType": MODEL_CONTENT_TYPE,
                "InputMode": "File",
            }
        )
    if code_uri:
        out.append({"ChannelName": CODE_CHANNEL, "DataSource": {"S3DataSource": _prefix(code_uri)}})
    return out


def _prefix(uri: str) -> Request:
    return {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}


def _split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def _join(*parts: str) -> str:
    """The SDK's s3_path_join: the non-empty parts, their slashes trimmed, joined by '/'."""
    return posixpath.join(*[p.strip("/") for p in parts if p.strip("/")])


def _local(path: str, cwd: str) -> str:
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))


def _upload(
    opts: SageMakerOpts, ctx: SubmitContext, *, region: str, account: str, name: str, script: str
) -> SourceUpload | None:
    """Where the code goes and with which S3 arguments (the SDK's _stage_user_code_in_s3);
    None for a source_dir already in S3 (nothing is uploaded)."""
    if opts.source_dir and opts.source_dir.startswith("s3://"):
        if opts.dependencies:
            raise base._bad(
                "dependencies", "cannot be packed with a source_dir already in S3 (s3://)"
            )
        return None
    cwd = ctx.cwd or os.getcwd()
    source = _local(opts.source_dir, cwd) if opts.source_dir else ctx.workspace or cwd
    field = "cfg.source_dir" if opts.source_dir else "workspace"
    if not os.path.isdir(source):
        raise InvalidArgument(field, f"{source!r} is not a directory on txd's host")
    deps = tuple(_local(d, cwd) for d in opts.dependencies)
    for dep in deps:
        if not os.path.exists(dep):
            raise base._bad("dependencies", f"{dep!r} does not exist on txd's host")
    own = default_bucket(region, account)
    if opts.code_location:
        bucket, prefix = _split_s3(opts.code_location)
        output_bucket = _split_s3(opts.output_path)[0] if opts.output_path else own
        kms = opts.output_kms_key if bucket == output_bucket else None
    else:
        bucket = _split_s3(opts.output_path)[0] if opts.output_path else own
        prefix, kms = "", opts.output_kms_key
    extra = {"ServerSideEncryption": "aws:kms"}
    if kms:
        extra["SSEKMSKeyId"] = kms
    if bucket == own:
        extra["ExpectedBucketOwner"] = account
    return SourceUpload(
        source_dir=source,
        script=script,
        bucket=bucket,
        key=_join(prefix, name, "source", ARCHIVE),
        dependencies=deps,
        extra=extra,
        default_bucket=bucket == own,
    )
