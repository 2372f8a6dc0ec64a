"""AppDef -> a SageMaker CreateTrainingJob request in container mode (`mode=container`): a pure
builder, no I/O (aws_sagemaker sends what it returns; DryRun prints it as JSON). Maps are sorted
by key (protobuf maps have no order), so the same app always gives the same request. The
options (SageMakerOpts) and the checks here serve framework mode too (sagemaker_framework,
TorchX's request, the default).

One role is one training job: its image is the training image, its entrypoint and args the
container's entrypoint and arguments (run as they are, on every instance), its env the job's
environment, `num_replicas` the instance count. Options are TorchX aws_sagemaker's, each mapped
onto the API field the SageMaker Python SDK fills from it; framework mode's code options
(source_dir, dependencies, code_location, container_log_level) mean nothing here. Every limit
the API documents for a field txd fills is checked here, so a bad value is refused with the
field named before anything is sent.

TorchX's `instance_count` option, when given, is the instance count instead of `num_replicas`,
as in TorchX (which never reads num_replicas; unset, it means 1 there).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from txd.schedulers.api import Macros, make_unique, num_replicas
from txd.schedulers.aws.sagemaker_source import SourceUpload
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.options import opt
from txd.v1.app_pb2 import AppDef, Role

Request = dict[str, Any]

# SageMaker's training job names: ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$.
MAX_NAME = 63
ID_SUFFIX = 12  # make_unique's random part
_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
_NAME_DROP = re.compile(r"[^a-zA-Z0-9-]+")
_ROLE_ARN = re.compile(r"arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+")
_LAMBDA_ARN = re.compile(r"arn:[A-Za-z0-9\-]+:lambda:[A-Za-z0-9\-]+:[0-9]{12}:function:.*")
_S3 = re.compile(r"(https|s3)://([^/]+)/?(.*)")
_KMS = re.compile(r"[a-zA-Z0-9:/_-]*")
_CHANNEL = re.compile(r"[A-Za-z0-9.\-_]{1,64}")
_ENV_KEY = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_TAG = re.compile(r"[\w\s.:/=+\-@]*")  # letters, digits, spaces and _ . : / = + - @
_NET_ID = re.compile(r"[-0-9a-zA-Z]{1,32}")

RANK0_ENV = "TORCHX_RANK0_HOST"
RANK0_HOST = "algo-1"  # SageMaker names a job's instances algo-1 ... algo-N
INSTANCE_TYPE = "node.kubernetes.io/instance-type"  # set by the aws_* named resources
INPUT_MODES = ("File", "Pipe", "FastFile")
ACCESS_MODES = ("Platform", "Vpc")
DEFAULT_VOLUME_GB = 30  # the SDK's defaults
DEFAULT_MAX_RUN = 24 * 60 * 60
MAX_WARM_POOL = 3600

SCHEDULER_TAG = "txd.dev/scheduler"
SESSION_TAG = "txd.dev/session"
ROLE_TAG = "txd.dev/role"
APP_NAME_TAG = "txd.dev/app-name"
MAX_TAGS = 50
MAX_CHANNELS = 20
MAX_ENV = 100
MAX_HYPERPARAMETERS = 100
MAX_METRICS = 40
MAX_COMMAND = 100  # items of ContainerEntrypoint and of ContainerArguments, 256 chars each
MAX_COMMAND_ITEM = 256
# What the API's `.*` (a Java pattern) does not match: SageMaker would refuse the job.
_LINE_BREAKS = "\n\r\x85\u2028\u2029"


@dataclass
class SageMakerOpts:
    # TorchX's options that txd does not implement: refused, saying why (options.resolve).
    TORCHX_REFUSED = {  # not annotated: no dataclass field
        "git_config": "txd does not clone git repositories for a job (the SDK clones one on the "
        "submitting host, with its credentials): check the code out and give it as the "
        "workspace or source_dir",
    }

    role: str = opt(
        "", "the IAM role ARN the training job runs as (arn:aws:iam::<account>:role/<name>)", True
    )
    output_path: str = opt(
        "",
        "the S3 location of the model artifacts and output (s3://bucket/prefix; default in "
        "framework mode: the SDK's bucket, s3://sagemaker-<region>-<account>/; container "
        "mode needs it)",
    )
    instance_type: str | None = opt(
        None,
        "the instance type, e.g. ml.p3.2xlarge (default: from the role's named resource, "
        "aws_p3.2xlarge -> ml.p3.2xlarge)",
    )
    image_repo: str | None = opt(
        None, "with a workspace: push its image to this repository (an ECR repository URI)"
    )
    instance_count: int | None = opt(
        None,
        "the number of instances (TorchX's option; it wins over the role's num_replicas, as "
        "in TorchX; default: num_replicas)",
    )
    inputs: dict[str, str] = opt(
        {}, "input channels as channel:s3_uri,... (each an S3 prefix, fully replicated)"
    )
    input_mode: str = opt("File", "how input channels reach the job: File, Pipe or FastFile")
    output_kms_key: str | None = opt(None, "the KMS key encrypting the output in S3")
    disable_output_compression: bool = opt(False, "upload the model uncompressed (not gzipped)")
    volume_size: int = opt(DEFAULT_VOLUME_GB, "GB of storage attached to each instance")
    volume_kms_key: str | None = opt(None, "the KMS key encrypting the instances' volumes")
    keep_alive_period_in_seconds: int | None = opt(
        None, "keep the instances in a warm pool this long after the job (0..3600)"
    )
    max_run: int = opt(DEFAULT_MAX_RUN, "seconds the job may train before SageMaker stops it")
    use_spot_instances: bool = opt(False, "train on managed spot instances (needs max_wait)")
    max_wait: int | None = opt(
        None, "with spot instances: seconds to wait for capacity and train (>= max_run)"
    )
    checkpoint_s3_uri: str | None = opt(
        None, "where SageMaker keeps the checkpoints the job writes (s3://bucket/prefix)"
    )
    checkpoint_local_path: str | None = opt(
        None, "where the job writes its checkpoints (default: /opt/ml/checkpoints)"
    )
    max_retry_attempts: int | None = opt(
        None,
        "times SageMaker restarts the job after an internal error, 1..30 (default: the "
        "role's max_retries)",
    )
    base_job_name: str | None = opt(None, "the job name's prefix (default: the app's name)")
    tags: dict[str, str] = opt({}, "tags of the training job, key:value,... (and the metadata)")
    subnets: list[str] = opt([], "the VPC subnet ids of the job (with security_group_ids)")
    security_group_ids: list[str] = opt([], "the VPC security group ids (with subnets)")
    enable_network_isolation: bool = opt(False, "no network access from the containers")
    encrypt_inter_container_traffic: bool = opt(False, "encrypt the traffic between the instances")
    environment: dict[str, str] = opt(
        {}, "environment variables (KEY:value,...); the role's env wins over them"
    )
    hyperparameters: dict[str, str] = opt(
        {}, "hyperparameters (name:value,...), in /opt/ml/input/config/hyperparameters.json"
    )
    model_uri: str | None = opt(
        None, "an S3 URI of a pre-trained model, given to the job as an input channel"
    )
    model_channel_name: str = opt("model", "the input channel of model_uri")
    metric_definitions: dict[str, str] = opt(
        {}, "metrics read from the job's logs, name:regex,... (';' between pairs)"
    )
    enable_sagemaker_metrics: bool | None = opt(None, "record metrics as a time series")
    debugger_hook_config: bool | None = opt(
        None,
        "emit SageMaker Debugger tensors to output_path (default: on in framework mode, as "
        "the SDK, where the region has Debugger; off in container mode)",
    )
    disable_profiler: bool = opt(False, "turn off SageMaker's system monitoring and profiling")
    training_repository_access_mode: str | None = opt(
        None, "how SageMaker reaches a private image: Platform or Vpc"
    )
    training_repository_credentials_provider_arn: str | None = opt(
        None, "the Lambda function ARN giving credentials for a private registry (with Vpc)"
    )
    enable_infra_check: bool | None = opt(
        None, "run SageMaker's infrastructure health check first (default: SageMaker's, off)"
    )
    mode: str = opt(
        "framework",
        "framework: TorchX's request, SageMaker's framework mode (the source directory "
        "uploaded to S3 as sourcedir.tar.gz, args[0] the script run by torchrun, the other "
        "args --name value hyperparameters); container: the role's entrypoint and args run as "
        "they are in its image",
    )
    source_dir: str | None = opt(
        None,
        "framework mode: the directory uploaded as the job's code, or an s3:// URI of a "
        "sourcedir.tar.gz (default: the workspace, else the working directory)",
    )
    code_location: str | None = opt(
        None,
        "framework mode: the S3 prefix the code is uploaded below (default: output_path's bucket)",
    )
    dependencies: list[str] = opt(
        [], "framework mode: more directories packed beside the source, each under its name"
    )
    container_log_level: int = opt(
        20, "framework mode: the log level of SageMaker's launcher (default: 20, logging.INFO)"
    )


@dataclass(frozen=True)
class TrainingJob:
    """The request of one submission and what the scheduler records of it."""

    name: str
    role: str  # the AppDef role's name
    instances: int
    request: Request
    # Framework mode: the code uploaded before the job is created.
    upload: SourceUpload | None = None

    def render(self) -> str:
        return json.dumps(self.request, indent=2)


def job_name_for(base: str) -> str:
    """A unique training job name: `base` made legal (runs of other characters become one
    '-', no '-' at either end), cut so that the random suffix fits in 63 characters."""
    prefix = _NAME_DROP.sub("-", base).strip("-")
    prefix = re.sub(r"-{2,}", "-", prefix)[: MAX_NAME - ID_SUFFIX - 1].rstrip("-")
    name = make_unique(prefix, ID_SUFFIX)
    assert _NAME.fullmatch(name), name
    return name


def training_job(app: AppDef, opts: SageMakerOpts, *, session: str, name: str = "") -> TrainingJob:
    """The CreateTrainingJob request of `app` (one role), named `name` (default: a new unique
    name). Raises InvalidArgument naming the field for anything SageMaker cannot run or would
    refuse."""
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
    if not role.entrypoint:
        raise InvalidArgument(f"{path}.entrypoint", "required")
    if role.mounts:
        raise InvalidArgument(
            f"{path}.mounts", "SageMaker has no mounts: give data as input channels (-c inputs=)"
        )
    instances = _instance_count(opts, role)
    name = name or job_name_for(opts.base_job_name or app.name)
    _check_opts(opts)
    if not opts.output_path:
        raise _bad("output_path", "required in container mode (s3://bucket/prefix)")

    # Every instance runs the same command: there is no per-instance value for ${replica_id}.
    marker = "\0replica\0"
    macros = Macros(img_root="", app_id=name, replica_id=marker, rank0_env=RANK0_ENV)
    r = macros.apply(role)
    for i, arg in enumerate(r.args):
        r.args[i] = _no_replica_id(marker, arg, f"{path}.args[{i}]", instances)
    for key, value in r.env.items():
        r.env[key] = _no_replica_id(marker, value, f"{path}.env[{key}]", instances)

    algorithm: Request = {
        "TrainingImage": r.image,
        "TrainingInputMode": opts.input_mode,
        "ContainerEntrypoint": _command([r.entrypoint], f"{path}.entrypoint"),
    }
    if r.args:
        algorithm["ContainerArguments"] = _command(list(r.args), f"{path}.args")
    req = _training_request(
        opts,
        name,
        algorithm,
        instance_type=_instance_type(opts, role.resource.capabilities),
        instances=instances,
        output_path=opts.output_path,
    )
    if opts.hyperparameters:
        req["HyperParameters"] = _hyperparameters(opts.hyperparameters)
    if channels := _channels(opts):
        req["InputDataConfig"] = channels
    _job_flags(req, opts, isolated=opts.enable_network_isolation)
    if opts.debugger_hook_config:
        req["DebugHookConfig"] = {"S3OutputPath": opts.output_path}
    if opts.disable_profiler:
        req["ProfilerConfig"] = {"DisableProfiler": True}
    # The role's env wins over the option's (TorchX merges them in this order).
    env = {**opts.environment, **r.env}
    if instances > 1:
        env.setdefault(RANK0_ENV, RANK0_HOST)
    if env:
        req["Environment"] = _environment(env, opts.environment, path)
    _retries(req, opts, role, path)
    req["Tags"] = _tags(app, opts, session=session, role=role.name)
    return TrainingJob(name=name, role=role.name, instances=instances, request=req)


# -- what both modes build alike ----------------------------------------------------------------


def _training_request(
    opts: SageMakerOpts,
    name: str,
    algorithm: Request,
    *,
    instance_type: str,
    instances: int,
    output_path: str,
) -> Request:
    """The request's head, from the options alike in both modes: the algorithm's metrics and
    image settings added to `algorithm`, the output, the instances and the time limits."""
    if opts.metric_definitions:
        algorithm["MetricDefinitions"] = _metrics(opts.metric_definitions)
    if opts.enable_sagemaker_metrics is not None:
        algorithm["EnableSageMakerMetricsTimeSeries"] = opts.enable_sagemaker_metrics
    if image_config := _image_config(opts):
        algorithm["TrainingImageConfig"] = image_config

    resources: Request = {
        "InstanceType": instance_type,
        "InstanceCount": instances,
        "VolumeSizeInGB": opts.volume_size,
    }
    if opts.volume_kms_key:
        resources["VolumeKmsKeyId"] = opts.volume_kms_key
    if opts.keep_alive_period_in_seconds is not None:
        resources["KeepAlivePeriodInSeconds"] = opts.keep_alive_period_in_seconds

    output: Request = {"S3OutputPath": output_path}
    if opts.output_kms_key:
        output["KmsKeyId"] = opts.output_kms_key
    if opts.disable_output_compression:
        output["CompressionType"] = "NONE"

    stopping: Request = {"MaxRuntimeInSeconds": opts.max_run}
    if opts.max_wait is not None:
        stopping["MaxWaitTimeInSeconds"] = opts.max_wait

    return {
        "TrainingJobName": name,
        "RoleArn": opts.role,
        "AlgorithmSpecification": algorithm,
        "OutputDataConfig": output,
        "ResourceConfig": resources,
        "StoppingCondition": stopping,
    }


def _job_flags(req: Request, opts: SageMakerOpts, *, isolated: bool) -> None:
    """The VPC, the switches and the checkpoint location, alike in both modes but for network
    isolation, which framework mode also turns on to give the code as a channel."""
    if opts.subnets:
        req["VpcConfig"] = {"SecurityGroupIds": opts.security_group_ids, "Subnets": opts.subnets}
    if isolated:
        req["EnableNetworkIsolation"] = True
    if opts.encrypt_inter_container_traffic:
        req["EnableInterContainerTrafficEncryption"] = True
    if opts.use_spot_instances:
        req["EnableManagedSpotTraining"] = True
    if opts.checkpoint_s3_uri:
        checkpoint = {"S3Uri": opts.checkpoint_s3_uri}
        if opts.checkpoint_local_path:
            checkpoint["LocalPath"] = opts.checkpoint_local_path
        req["CheckpointConfig"] = checkpoint


def _retries(req: Request, opts: SageMakerOpts, role: Role, path: str) -> None:
    """The retry strategy (max_retry_attempts, else the role's max_retries: TorchX drops
    those) and the infrastructure check."""
    retries = opts.max_retry_attempts
    if retries is None and role.max_retries > 0:
        retries = role.max_retries
    if retries is not None:
        field = (
            "cfg.max_retry_attempts"
            if opts.max_retry_attempts is not None
            else f"{path}.max_retries"
        )
        if not 1 <= retries <= 30:
            raise InvalidArgument(field, f"SageMaker retries a job 1 to 30 times, got {retries}")
        req["RetryStrategy"] = {"MaximumRetryAttempts": retries}
    if opts.enable_infra_check is not None:
        req["InfraCheckConfig"] = {"EnableInfraCheck": opts.enable_infra_check}


# -- checks -------------------------------------------------------------------------------------


def _bad(option: str, reason: str) -> InvalidArgument:
    return InvalidArgument(f"cfg.{option}", reason)


def _instance_count(opts: SageMakerOpts, role: Role) -> int:
    """instance_count when given (TorchX's rule: the option, never num_replicas), else the
    role's num_replicas."""
    if opts.instance_count is None:
        return num_replicas(role)
    if opts.instance_count < 1:
        raise _bad("instance_count", f"must be >= 1, got {opts.instance_count}")
    return opts.instance_count


def _check_opts(opts: SageMakerOpts) -> None:
    if not _ROLE_ARN.fullmatch(opts.role):
        raise _bad(
            "role",
            f"expected an IAM role ARN (arn:aws:iam::<account>:role/<name>), got {opts.role!r}",
        )
    for option in ("output_path", "checkpoint_s3_uri", "model_uri"):
        value = getattr(opts, option)
        if value and not _S3.fullmatch(value):
            raise _bad(option, f"expected an S3 URI (s3://bucket/prefix), got {value!r}")
    for option in ("output_kms_key", "volume_kms_key"):
        value = getattr(opts, option)
        if value is not None and not _KMS.fullmatch(value):
            raise _bad(option, f"{value!r} is not a KMS key id or ARN")
    if opts.input_mode not in INPUT_MODES:
        raise _bad(
            "input_mode", f"expected one of {', '.join(INPUT_MODES)}, got {opts.input_mode!r}"
        )
    if opts.volume_size < 1:
        raise _bad("volume_size", f"at least 1 GB, got {opts.volume_size}")
    if opts.max_run < 1:
        raise _bad("max_run", f"at least 1 second, got {opts.max_run}")
    keep = opts.keep_alive_period_in_seconds
    if keep is not None and not 0 <= keep <= MAX_WARM_POOL:
        raise _bad("keep_alive_period_in_seconds", f"0 to {MAX_WARM_POOL} seconds, got {keep}")
    if opts.use_spot_instances:
        if opts.max_wait is None:
            raise _bad("max_wait", "required with use_spot_instances (seconds, >= max_run)")
        if opts.max_wait < opts.max_run:
            raise _bad("max_wait", f"{opts.max_wait} is less than max_run ({opts.max_run})")
    elif opts.max_wait is not None:
        raise _bad("max_wait", "only spot training waits: set use_spot_instances=true too")
    if opts.checkpoint_local_path and not opts.checkpoint_s3_uri:
        raise _bad("checkpoint_local_path", "needs checkpoint_s3_uri (where SageMaker keeps them)")
    if bool(opts.subnets) != bool(opts.security_group_ids):
        given, missing = (
            ("subnets", "security_group_ids") if opts.subnets else ("security_group_ids", "subnets")
        )
        raise _bad(missing, f"required with {given}: a VPC configuration needs both")
    for option, limit in (("subnets", 16), ("security_group_ids", 5)):
        ids: list[str] = getattr(opts, option)
        if len(ids) > limit:
            raise _bad(option, f"at most {limit}, got {len(ids)}")
        for value in ids:
            if not _NET_ID.fullmatch(value):
                raise _bad(option, f"{value!r} is not a VPC id (letters, digits and '-')")


def _no_replica_id(marker: str, text: str, field: str, instances: int) -> str:
    """`text` with ${replica_id} as 0 when there is one instance; refused with more."""
    if marker not in text:
        return text
    if instances > 1:
        raise InvalidArgument(
            field,
            "${replica_id}: every instance of a SageMaker job runs the same command, so it has "
            "no replica id to substitute (an instance finds its host, algo-1 ... algo-N, in "
            "/opt/ml/input/config/resourceconfig.json)",
        )
    return text.replace(marker, "0")


def _command(items: list[str], field: str) -> list[str]:
    if len(items) > MAX_COMMAND:
        raise InvalidArgument(field, f"SageMaker takes at most {MAX_COMMAND}, got {len(items)}")
    for i, item in enumerate(items):
        where = field if field.endswith("entrypoint") else f"{field}[{i}]"
        if any(c in item for c in _LINE_BREAKS):
            raise InvalidArgument(
                where, "has a line break, which SageMaker refuses in a command word (pattern .*)"
            )
        if len(item) > MAX_COMMAND_ITEM:
            raise InvalidArgument(
                where, f"SageMaker takes at most {MAX_COMMAND_ITEM} characters, got {len(item)}"
            )
    return items


def _metrics(defs: Mapping[str, str]) -> list[dict[str, str]]:
    if len(defs) > MAX_METRICS:
        raise _bad("metric_definitions", f"at most {MAX_METRICS}, got {len(defs)}")
    for name, regex in defs.items():
        if not name or len(name) > 255 or not regex or len(regex) > 500:
            raise _bad(
                "metric_definitions", f"{name!r}: a name of 1-255 characters and a regex of 1-500"
            )
        try:
            re.compile(regex)
        except re.error as e:
            raise _bad("metric_definitions", f"{name!r}: bad regex {regex!r}: {e}") from None
    return [{"Name": name, "Regex": regex} for name, regex in sorted(defs.items())]


def _image_config(opts: SageMakerOpts) -> Request:
    mode, arn = (
        opts.training_repository_access_mode,
        opts.training_repository_credentials_provider_arn,
    )
    if mode is None:
        if arn is not None:
            raise _bad(
                "training_repository_access_mode",
                "required with training_repository_credentials_provider_arn (Vpc)",
            )
        return {}
    if mode not in ACCESS_MODES:
        raise _bad(
            "training_repository_access_mode",
            f"expected one of {', '.join(ACCESS_MODES)}, got {mode!r}",
        )
    config: Request = {"TrainingRepositoryAccessMode": mode}
    if arn is not None:
        if not _LAMBDA_ARN.fullmatch(arn):
            raise _bad(
                "training_repository_credentials_provider_arn",
                f"expected a Lambda function ARN, got {arn!r}",
            )
        config["TrainingRepositoryAuthConfig"] = {"TrainingRepositoryCredentialsProviderArn": arn}
    return config


def _instance_type(opts: SageMakerOpts, capabilities: Mapping[str, str]) -> str:
    if opts.instance_type:
        if not opts.instance_type.startswith("ml."):
            raise _bad(
                "instance_type",
                f"SageMaker's types start with 'ml.' (ml.p3.2xlarge), got {opts.instance_type!r}",
            )
        return opts.instance_type
    named = capabilities.get(INSTANCE_TYPE)
    if not named:
        raise _bad(
            "instance_type",
            "required: set it (-c instance_type=ml.m5.xlarge) or give "
            "the role an aws_* named resource (aws_p3.2xlarge)",
        )
    return named if named.startswith("ml.") else f"ml.{named}"


def _hyperparameters(params: Mapping[str, str]) -> dict[str, str]:
    if len(params) > MAX_HYPERPARAMETERS:
        raise _bad("hyperparameters", f"at most {MAX_HYPERPARAMETERS}, got {len(params)}")
    for key, value in params.items():
        if len(key) > 256 or len(value) > 2500:
            raise _bad(
                "hyperparameters",
                f"{key[:40]!r}: names take up to 256 characters, values up to 2500",
            )
    return dict(sorted(params.items()))


def _channels(opts: SageMakerOpts) -> list[Request]:
    wanted = [(channel, uri, "inputs") for channel, uri in sorted(opts.inputs.items())]
    if opts.model_uri:
        if opts.model_channel_name in opts.inputs:
            raise _bad(
                "model_channel_name",
                f"{opts.model_channel_name!r} is an input channel already (cfg.inputs)",
            )
        wanted.append((opts.model_channel_name, opts.model_uri, "model_channel_name"))
    if len(wanted) > MAX_CHANNELS:
        raise _bad("inputs", f"at most {MAX_CHANNELS} channels, got {len(wanted)}")
    out = []
    for channel, uri, option in wanted:
        if not _CHANNEL.fullmatch(channel):
            raise _bad(option, f"{channel!r} is not a channel name (1-64 of A-Z a-z 0-9 . - _)")
        if not _S3.fullmatch(uri):
            raise _bad(option, f"{channel}: expected an S3 URI (s3://bucket/prefix), got {uri!r}")
        source = {
            "S3DataType": "S3Prefix",
            "S3Uri": uri,
            "S3DataDistributionType": "FullyReplicated",
        }
        out.append({"ChannelName": channel, "DataSource": {"S3DataSource": source}})
    return out


def _environment(env: Mapping[str, str], from_opts: Mapping[str, str], path: str) -> dict[str, str]:
    if len(env) > MAX_ENV:
        raise InvalidArgument(
            f"{path}.env",
            f"SageMaker takes at most {MAX_ENV} environment "
            f"variables, got {len(env)} (with cfg.environment)",
        )
    for key, value in env.items():
        field = "cfg.environment" if key in from_opts else f"{path}.env[{key}]"
        if not _ENV_KEY.fullmatch(key) or len(key) > 512:
            raise InvalidArgument(field, f"{key!r} is not an environment variable name")
        if len(value) > 512:
            raise InvalidArgument(
                field, f"{key}: SageMaker takes values up to 512 characters, got {len(value)}"
            )
    return dict(sorted(env.items()))


def _tags(app: AppDef, opts: SageMakerOpts, *, session: str, role: str) -> list[dict[str, str]]:
    """The option's tags, then the app's metadata, then txd's own (which list finds jobs by)."""
    tags: dict[str, tuple[str, str]] = {}
    for key, value in sorted(opts.tags.items()):
        tags[key] = (value, "cfg.tags")
    for key, value in sorted(app.metadata.items()):
        tags[key] = (value, f"app.metadata[{key}]")
    own = {
        SCHEDULER_TAG: "aws_sagemaker",
        SESSION_TAG: session,
        ROLE_TAG: role,
        APP_NAME_TAG: app.name,
    }
    for key, value in own.items():
        tags[key] = (_tag_text(value), "app")
    if len(tags) > MAX_TAGS:
        raise _bad(
            "tags",
            f"SageMaker takes at most {MAX_TAGS} tags, got {len(tags)} (with the "
            f"app's metadata and txd's {len(own)})",
        )
    for key, (value, field) in tags.items():
        if key.startswith("aws:") or not 1 <= len(key) <= 128 or not _TAG.fullmatch(key):
            raise InvalidArgument(
                field,
                f"{key!r} is not a tag key (1-128 letters, digits, "
                "spaces, _ . : / = + - @; not aws:)",
            )
        if len(value) > 256 or not _TAG.fullmatch(value):
            raise InvalidArgument(
                field,
                f"{key}: {value[:40]!r} is not a tag value (up to 256 "
                "letters, digits, spaces, _ . : / = + - @)",
            )
    return [{"Key": key, "Value": value} for key, (value, _) in tags.items()]


def _tag_text(text: str) -> str:
    """txd's own tag values made legal (an app name may hold any character)."""
    return re.sub(r"[^\w\s.:/=+\-@]", "-", text)[:256]


def tag_map(tags: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """SageMaker's [{Key, Value}] as a dict."""
    return {str(t.get("Key", "")): str(t.get("Value", "")) for t in tags}
