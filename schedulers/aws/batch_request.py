"""An AppDef as an AWS Batch job definition and submit_job request (pure: no AWS call).

Every app is a multi-node parallel job, with one node range per role, main node 0, as TorchX
makes it: a single replica too, so that Batch sets AWS_BATCH_JOB_NODE_INDEX, _NUM_NODES and
_MAIN_NODE_INDEX for it as for any node (scripts written for TorchX read them). The job_type
option `container` makes a single-replica app a container job instead (Fargate runs no
multi-node jobs; Batch then sets none of those). Facts carried over from TorchX:
vCPU (at least 1), memory (required) and GPUs as resourceRequirements, /dev/shm as big as the
memory, bind mounts as host volumes, volume mounts as EFS file systems, named devices as device
mounts (`vpc.amazonaws.com/efa`: /dev/infiniband/uverbsN; `aws.amazon.com/neurondevice`:
/dev/neuronN), the instance type of a multi-node job's nodes from the resource's
`node.kubernetes.io/instance-type`, the role's index and name in TORCHX_ROLE_IDX and
TORCHX_ROLE_NAME, `${app_id}` as the job's name, `${replica_id}` as $AWS_BATCH_JOB_NODE_INDEX
(the job's node index, expanded only by a shell; "0" in a container job) and `${rank0_env}` as
AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS (Batch sets it on child nodes). Not carried over:
Batch makes max_retries + 1 attempts (TorchX asks for max(max_retries, 1), one short: none at
all for max_retries=1).

Tags, on the job definition and the job, as TorchX: `torchx.pytorch.org/version`, `app-name`
and `user`, then the app's metadata (over them, as in TorchX); then txd's own `txd.dev/*`, which
list and status read (so metadata cannot replace them). Batch's limits (50 tags, keys of 1-128
characters, values up to 256) are checked here, naming the metadata key that breaks them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from txd.schedulers import torchx_labels as tx
from txd.schedulers.api import Macros, make_unique, num_replicas
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.options import opt
from txd.v1.app_pb2 import AppDef, Role

NAME = "aws_batch"
LOG_GROUP = "/aws/batch/job"
NODE_INDEX_ENV = "AWS_BATCH_JOB_NODE_INDEX"
RANK0_ENV = "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"
ROLE_IDX_ENV = "TORCHX_ROLE_IDX"
ROLE_NAME_ENV = "TORCHX_ROLE_NAME"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
# Batch's limits (multi-node parallel jobs: node groups, nodes; retry attempts; timeout).
MAX_NODE_GROUPS = 5
MAX_NODES = 1000
MAX_ATTEMPTS = 10
MIN_TIMEOUT = 60
MAX_NAME = 128
# Tags txd puts on every job definition and job: list finds txd's jobs by them.
TAG_SCHEDULER = "txd.dev/scheduler"
TAG_SESSION = "txd.dev/session"
TAG_APP = "txd.dev/app-name"
TAG_USER = "txd.dev/user"
TAG_ROLES = "txd.dev/roles"  # the app's shape: "role=replicas role=replicas ..."
MAX_TAG_VALUE = 256
MAX_TAG_KEY = 128
MAX_TAGS = 50
DEVICES = {
    "vpc.amazonaws.com/efa": "/dev/infiniband/uverbs",
    "aws.amazon.com/neurondevice": "/dev/neuron",
}
MULTINODE = "multinode"
CONTAINER = "container"
_PERMS = {"r": "READ", "w": "WRITE", "m": "MKNOD"}
_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")


@dataclass
class BatchOpts:
    queue: str = opt(None, "the job queue to submit to", required=True)
    user: str = opt("", "the user name to tag the job with (default: the daemon's user)")
    image_repo: str | None = opt(
        None,
        "with a workspace: tag its image <image_repo>:<key> and push it there (an ECR "
        "repository, say) for Batch's hosts to pull",
    )
    privileged: bool = opt(False, "run the containers privileged")
    share_id: str | None = opt(
        None, "the share identifier (only for, and required by, queues with a fair-share policy)"
    )
    priority: int = opt(
        0, "the scheduling priority within share_id, 0 to 9999 (only with share_id)"
    )
    job_role_arn: str | None = opt(
        None, "the IAM role the containers can assume for AWS permissions"
    )
    execution_role_arn: str | None = opt(
        None, "the IAM role the ECS agent assumes (pulling images, writing logs)"
    )
    timeout: int | None = opt(
        None, f"seconds an attempt may run before Batch ends it (>= {MIN_TIMEOUT})"
    )
    job_type: str = opt(
        MULTINODE,
        "multinode (TorchX's: every app a multi-node parallel job, so Batch sets "
        "AWS_BATCH_JOB_NODE_INDEX and friends) or container (a single-replica app as a "
        "container job, which Fargate can run; Batch sets no node variables then)",
    )


@dataclass
class BatchRequest:
    """What schedule sends: the job definition, then the job. DryRun prints both as JSON."""

    app_id: str  # <queue>:<job name>
    job_definition: dict[str, Any]
    submit: dict[str, Any]
    role_nodes: list[tuple[str, int, int]] = field(default_factory=list)  # role, first, count

    def render(self) -> str:
        return json.dumps(
            {"register_job_definition": self.job_definition, "submit_job": self.submit}, indent=2
        )


def job_name(app_name: str) -> str:
    """A unique Batch name (1 to 128 letters, digits, '-', '_', starting with a letter or
    digit) from the app's name."""
    base = _NAME_BAD.sub("-", app_name).lstrip("_-")[: MAX_NAME - 13] or "app"
    return make_unique(base)


def shape(app: AppDef) -> list[tuple[str, int]]:
    return [(r.name, num_replicas(r)) for r in app.roles]


def _resources(role: Role, path: str) -> list[dict[str, str]]:
    res = role.resource
    if res.mem_mb <= 0:
        raise InvalidArgument(
            f"{path}.resource.mem_mb",
            "AWS Batch needs each replica's memory: set resource.mem_mb or a named resource",
        )
    out = [
        {"type": "VCPU", "value": str(max(res.cpu, 1))},
        {"type": "MEMORY", "value": str(res.mem_mb)},
    ]
    if res.gpu > 0:
        out.append({"type": "GPU", "value": str(res.gpu)})
    return out


def _mounts(role: Role, path: str) -> tuple[list[Any], list[Any], list[Any]]:
    """(volumes, mountPoints, devices) of the role's mounts and named devices."""
    volumes: list[Any] = []
    points: list[Any] = []
    devices: list[Any] = []
    for i, m in enumerate(role.mounts):
        kind = m.WhichOneof("kind")
        name = f"mount_{i}"
        if kind == "bind":
            volumes.append({"name": name, "host": {"sourcePath": m.bind.src_path}})
            point = {"containerPath": m.bind.dst_path, "readOnly": m.bind.read_only}
            points.append({**point, "sourceVolume": name})
        elif kind == "volume":
            volumes.append({"name": name, "efsVolumeConfiguration": {"fileSystemId": m.volume.src}})
            points.append(
                {
                    "containerPath": m.volume.dst_path,
                    "readOnly": m.volume.read_only,
                    "sourceVolume": name,
                }
            )
        elif kind == "device":
            devices.append(_device(m.device.src_path, m.device.dst_path, m.device.permissions))
        else:
            raise InvalidArgument(f"{path}.mounts[{i}]", "a mount of no kind")
    for dev, count in sorted(role.resource.devices.items()):
        prefix = DEVICES.get(dev)
        if prefix is None:
            raise InvalidArgument(
                f"{path}.resource.devices",
                f"AWS Batch maps no device {dev!r} (known: {', '.join(sorted(DEVICES))}); "
                "use a device mount",
            )
        devices.extend(_device(f"{prefix}{k}", "", "") for k in range(count))
    return volumes, points, devices


def _device(src: str, dst: str, perms: str) -> dict[str, Any]:
    return {
        "hostPath": src,
        "containerPath": dst or src,
        "permissions": [_PERMS[p] for p in perms or "rwm"],
    }


def _container(
    role: Role, index: int, opts: BatchOpts, path: str, *, multinode: bool
) -> dict[str, Any]:
    if not role.image:
        raise InvalidArgument(f"{path}.image", "AWS Batch runs images: set the role's image")
    for key in role.env:
        if key.startswith("AWS_BATCH"):
            raise InvalidArgument(f"{path}.env", f"{key}: AWS Batch reserves AWS_BATCH* names")
    env = {**role.env, ROLE_IDX_ENV: str(index), ROLE_NAME_ENV: role.name}
    volumes, points, devices = _mounts(role, path)
    container: dict[str, Any] = {
        "image": role.image,
        "command": [role.entrypoint, *role.args],
        "environment": [{"name": k, "value": v} for k, v in env.items()],
        "privileged": opts.privileged,
        "resourceRequirements": _resources(role, path),
        # PyTorch's data loaders need a /dev/shm bigger than Docker's 64 MiB (TorchX).
        "linuxParameters": {"sharedMemorySize": role.resource.mem_mb, "devices": devices},
        "logConfiguration": {"logDriver": "awslogs"},
        "mountPoints": points,
        "volumes": volumes,
    }
    itype = role.resource.capabilities.get(INSTANCE_TYPE)
    if itype and multinode:  # Batch takes it for multi-node jobs only
        container["instanceType"] = itype
    if opts.job_role_arn:
        container["jobRoleArn"] = opts.job_role_arn
    if opts.execution_role_arn:
        container["executionRoleArn"] = opts.execution_role_arn
    return container


def _tags(app: AppDef, *, session: str, user: str) -> dict[str, str]:
    """TorchX's tags, the app's metadata over them, then txd's own (see the module's doc)."""
    fields = {
        tx.APP_NAME: "app.name",
        tx.USER: "cfg.user",
        TAG_APP: "app.name",
        TAG_USER: "cfg.user",
    }
    tags = {tx.VERSION: tx.TORCHX_VERSION, tx.APP_NAME: app.name, tx.USER: user}
    for key, value in app.metadata.items():
        tags[key] = value
        fields[key] = f"app.metadata[{key!r}]"
    tags.update({TAG_SCHEDULER: NAME, TAG_SESSION: session, TAG_APP: app.name, TAG_USER: user})
    roles_tag = " ".join(f"{r}={n}" for r, n in shape(app))
    if len(roles_tag) <= MAX_TAG_VALUE:  # else status reads the node ranges
        tags[TAG_ROLES] = roles_tag
    if len(tags) > MAX_TAGS:
        raise InvalidArgument(
            "app.metadata",
            f"AWS Batch takes at most {MAX_TAGS} tags, got {len(tags)}: the app's "
            f"{len(app.metadata)} metadata entries and {len(tags) - len(app.metadata)} of "
            "TorchX's and txd's",
        )
    for key, value in tags.items():
        field = fields.get(key, "app")
        if not 1 <= len(key) <= MAX_TAG_KEY or key.startswith("aws:"):
            raise InvalidArgument(
                field, f"{key[:40]!r} is not a Batch tag key (1-{MAX_TAG_KEY} characters, not aws:)"
            )
        if len(value) > MAX_TAG_VALUE:
            raise InvalidArgument(
                field,
                f"{key}: Batch tag values are at most {MAX_TAG_VALUE} characters, got {len(value)}",
            )
    return tags


def _multinode(job_type: str, replicas: int) -> bool:
    """Whether the job is a multi-node parallel job (job_type's rule)."""
    if job_type not in (MULTINODE, CONTAINER):
        raise InvalidArgument(
            "cfg.job_type", f"expected {MULTINODE} or {CONTAINER}, got {job_type!r}"
        )
    if job_type == CONTAINER and replicas > 1:
        raise InvalidArgument(
            "cfg.job_type",
            f"a container job runs one replica, the app has {replicas}: use {MULTINODE}",
        )
    return job_type == MULTINODE


def build(app: AppDef, opts: BatchOpts, *, session: str, user: str) -> BatchRequest:
    """The job definition and submit request of `app`. Raises InvalidArgument for what Batch
    cannot run (over its limits, no image, no memory, an unknown device, bad options)."""
    if not app.roles:
        raise InvalidArgument("app.roles", "an app needs at least one role")
    if len(app.roles) > MAX_NODE_GROUPS:
        raise InvalidArgument(
            "app.roles",
            f"AWS Batch runs at most {MAX_NODE_GROUPS} roles (node groups) in a job, "
            f"got {len(app.roles)}",
        )
    total = sum(num_replicas(r) for r in app.roles)
    if total > MAX_NODES:
        raise InvalidArgument(
            "app.roles", f"AWS Batch runs at most {MAX_NODES} nodes in a job, got {total}"
        )
    retries = max(r.max_retries for r in app.roles)
    if retries + 1 > MAX_ATTEMPTS:
        raise InvalidArgument(
            "app.roles.max_retries",
            f"AWS Batch makes at most {MAX_ATTEMPTS} attempts: max_retries <= "
            f"{MAX_ATTEMPTS - 1}, got {retries}",
        )
    if opts.timeout is not None and opts.timeout < MIN_TIMEOUT:
        raise InvalidArgument(
            "cfg.timeout", f"AWS Batch needs >= {MIN_TIMEOUT} s, got {opts.timeout}"
        )
    if not 0 <= opts.priority <= 9999:
        raise InvalidArgument("cfg.priority", f"must be 0 to 9999, got {opts.priority}")
    if not opts.queue:
        raise InvalidArgument("cfg.queue", "the job queue is required")

    multinode = _multinode(opts.job_type, total)
    name = job_name(app.name)
    app_id = f"{opts.queue}:{name}"
    containers = []
    role_nodes = []
    first = 0
    for i, role in enumerate(app.roles):
        macros = Macros(
            img_root="",
            app_id=name,  # TorchX's: the job's name
            replica_id=f"${NODE_INDEX_ENV}" if multinode else "0",
            rank0_env=RANK0_ENV,
        )
        path = f"app.roles[{i}]"
        containers.append(_container(macros.apply(role), i, opts, path, multinode=multinode))
        role_nodes.append((role.name, first, num_replicas(role)))
        first += num_replicas(role)

    tags = _tags(app, session=session, user=opts.user or user)
    jobdef: dict[str, Any] = {"jobDefinitionName": name}
    if multinode:
        jobdef["type"] = "multinode"
        jobdef["nodeProperties"] = {
            "numNodes": total,
            "mainNode": 0,
            "nodeRangeProperties": [
                {"targetNodes": f"{start}:{start + n - 1}", "container": c}
                for (_, start, n), c in zip(role_nodes, containers, strict=True)
            ],
        }
    else:
        jobdef["type"] = "container"
        jobdef["containerProperties"] = containers[0]
    if retries > 0:
        jobdef["retryStrategy"] = {"attempts": retries + 1}
    if opts.timeout is not None:
        jobdef["timeout"] = {"attemptDurationSeconds": opts.timeout}
    if opts.share_id is not None:
        jobdef["schedulingPriority"] = opts.priority
    jobdef["tags"] = tags
    submit: dict[str, Any] = {
        "jobName": name,
        "jobQueue": opts.queue,
        "jobDefinition": name,
        "tags": tags,
    }
    if opts.share_id is not None:
        submit["shareIdentifier"] = opts.share_id
    return BatchRequest(app_id, jobdef, submit, role_nodes)
