"""local_docker's requests: what is created on the engine for an AppDef (its network, one
container per replica, named and labelled so that the engine alone tells txd its jobs), in the
engine's JSON, as DryRun prints it; and the volume that marks a job cancelled.

A container carries txd's labels (`txd.*`, which txd reads) and TorchX 0.7's
(`torchx.pytorch.org/version`, `app-id`, `role-name`, `replica-id`: `torchx_labels`), so that
TorchX's tools and `docker ps --filter label=torchx.pytorch.org/...` find txd's containers."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from txd.schedulers import torchx_labels as tx
from txd.schedulers.api import Macros, SubmitContext, make_unique, num_replicas
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.options import opt
from txd.v1.app_pb2 import AppDef, Role

NAME = "local_docker"
RANK0_ENV = "TORCHX_RANK0_HOST"
# The engine's default network (its `bridge` network, where it has one): what a container of
# `docker run` without --network joins.
DEFAULT_NETWORK = "default"
# On the marker volume of a cancelled job (labels cannot change after create).
CANCELLED_LABEL = "txd.cancelled"
# On the marker too: the containers the cancel stopped (a JSON list of names), which are
# CANCELLED even when they exit 0 on SIGTERM (they had the stop grace to checkpoint).
STOPPED_LABEL = "txd.stopped"
_SIZE = re.compile(r"(\d+)([bkmg]?)", re.IGNORECASE)
_NAME_BAD = re.compile(r"[^a-zA-Z0-9_.-]")


@dataclass
class DockerOpts:
    copy_env: list[str] = opt(
        [], "glob patterns of the caller's environment variables to pass to every replica"
    )
    env: dict[str, str] = opt(
        {}, "environment variables for every replica (over copy_env; the role's env wins)"
    )
    privileged: bool = opt(False, "run the containers privileged")
    network: str | None = opt(
        None,
        "the network the containers join: host, none or an existing network (default: an app "
        "of more than one replica gets a network of its own, removed once the job has ended; "
        "a single replica joins the engine's default network, as `docker run` does)",
    )
    shm_size: str | None = opt(
        None, "size of /dev/shm (bytes, or with k, m, g; default: the role's memory if set)"
    )
    stop_timeout: int = opt(
        10,
        "seconds a cancelled container gets after SIGTERM before SIGKILL (10: TorchX's and "
        "docker stop's)",
    )
    pull: str = opt(
        "always",
        "which images a run pulls first: always (TorchX's: a tag moved in its registry runs "
        "anew; an image built here and never pushed runs as built; a failed pull fails the "
        "run), missing (only images the engine lacks), never",
    )
    image_repo: str | None = opt(
        None,
        "with a workspace: tag its image <image_repo>:<key> and push it there "
        "(e.g. 127.0.0.1:5000/me/app), for backends that pull it elsewhere",
    )


@dataclass
class ContainerSpec:
    name: str
    role: str
    replica_id: int
    body: dict[str, Any]


@dataclass
class DockerJob:
    """Every create request of a submission, in the engine's JSON, as DryRun prints them."""

    app_id: str
    network: dict[str, Any] | None  # the app's own network, None when joining another
    containers: list[ContainerSpec] = field(default_factory=list)
    images: dict[str, str] = field(default_factory=dict)  # image -> field path, for errors

    def render(self) -> str:
        data = {
            "app_id": self.app_id,
            "network_create": self.network,
            "container_create": [{"name": c.name, "body": c.body} for c in self.containers],
        }
        return json.dumps(data, indent=2)


def container_name(app_id: str, role: str, k: int) -> str:
    """TorchX's rule: the app id's last 30 characters, the role's first 30, the replica; valid
    as a container name and as a host name (under 64 characters)."""
    name = _NAME_BAD.sub("-", f"{app_id[-30:]}-{role[:30]}-{k}")
    return name.lstrip("_.-")


def torchx_labels(app_id: str, role: str, k: int) -> dict[str, str]:
    """TorchX's labels of replica k of the role (Docker takes any value: written as they are)."""
    return {
        tx.VERSION: tx.TORCHX_VERSION,
        tx.APP_ID: app_id,
        tx.ROLE_NAME: role,
        tx.REPLICA_ID: str(k),
    }


def network_name(app_id: str) -> str:
    return _NAME_BAD.sub("-", app_id).lstrip("_.-")


def marker_name(app_id: str) -> str:
    return f"{network_name(app_id)}-cancelled"


def cancel_marker(app_id: str, stopped: Sequence[str] = ()) -> dict[str, Any]:
    """The volume that says the job was cancelled: made before its containers (`stopped`) are
    stopped, so that a container seen stopped is then known to be cancelled, after a restart
    too."""
    return {
        "Name": marker_name(app_id),
        "Labels": {
            "txd.scheduler": NAME,
            "txd.app_id": app_id,
            CANCELLED_LABEL: "1",
            STOPPED_LABEL: json.dumps(sorted(stopped)),
        },
    }


def _size(text: str, field_path: str) -> int:
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise InvalidArgument(field_path, f"expected a size such as 67108864, 64m or 1g: {text!r}")
    return int(m.group(1)) * 1024 ** "bkmg".index((m.group(2) or "b").lower())


def _mounts(role: Role, cwd: str, field_path: str) -> tuple[list[Any], list[Any]]:
    """The role's bind and volume mounts (Mounts) and device mounts (Devices)."""
    mounts: list[Any] = []
    devices: list[Any] = []
    for i, m in enumerate(role.mounts):
        kind = m.WhichOneof("kind")
        if kind == "bind":
            src = str(Path(cwd, m.bind.src_path))  # relative: to the caller's directory
            target, ro = m.bind.dst_path, m.bind.read_only
            mounts.append({"Type": "bind", "Source": src, "Target": target, "ReadOnly": ro})
        elif kind == "volume":
            target, ro = m.volume.dst_path, m.volume.read_only
            mounts.append(
                {"Type": "volume", "Source": m.volume.src, "Target": target, "ReadOnly": ro}
            )
        elif kind == "device":
            devices.append(
                {
                    "PathOnHost": m.device.src_path,
                    "PathInContainer": m.device.dst_path or m.device.src_path,
                    "CgroupPermissions": m.device.permissions or "rwm",
                }
            )
        else:
            raise InvalidArgument(f"{field_path}.mounts[{i}]", "a mount of no kind")
    return mounts, devices


def _host_config(role: Role, opts: DockerOpts, network: str, cwd: str, path: str) -> dict[str, Any]:
    mounts, devices = _mounts(role, cwd, path)
    host: dict[str, Any] = {
        "NetworkMode": network,
        "Init": True,  # a shell as PID 1 would ignore SIGTERM
        "LogConfig": {"Type": "local", "Config": {}},  # keeps bytes as written (not JSON text)
        "Privileged": opts.privileged,
        "Mounts": mounts,
        "Devices": devices,
        "RestartPolicy": (
            {"Name": "on-failure", "MaximumRetryCount": role.max_retries}
            if role.max_retries > 0
            else {"Name": "no"}
        ),
    }
    res = role.resource
    if res.devices:
        raise InvalidArgument(
            f"{path}.resource.devices",
            f"local_docker maps no named devices ({', '.join(res.devices)}): use device mounts",
        )
    if res.cpu > 0:
        host["NanoCpus"] = res.cpu * 10**9
    if res.mem_mb > 0:
        host["Memory"] = host["ShmSize"] = res.mem_mb * 2**20  # TorchX: shm as big as memory
    if opts.shm_size:
        host["ShmSize"] = _size(opts.shm_size, "cfg.shm_size")
    if res.gpu > 0:
        host["DeviceRequests"] = [
            {"Driver": "", "Count": res.gpu, "Capabilities": [["compute", "utility"]]}
        ]
    return host


def build(app: AppDef, opts: DockerOpts, ctx: SubmitContext, session: str) -> DockerJob:
    """Every create request of the app's submission, under a new app id."""
    if opts.stop_timeout < 0:
        raise InvalidArgument("cfg.stop_timeout", f"must be >= 0, got {opts.stop_timeout}")
    if not app.roles:
        raise InvalidArgument("app.roles", "an app needs at least one role")
    app_id = make_unique(app.name)
    # Only replicas that must talk get a network of their own: a container's start on it took
    # 250 ms on the test engine, against 85 ms on the default network.
    single = sum(num_replicas(r) for r in app.roles) == 1
    own = opts.network is None and not single
    network = opts.network or (network_name(app_id) if own else DEFAULT_NETWORK)
    req = DockerJob(app_id=app_id, network=None)
    if own:
        req.network = {
            "Name": network,
            "Driver": "bridge",
            "CheckDuplicate": True,
            "Labels": {
                "txd.scheduler": NAME,
                "txd.app_id": app_id,
                "txd.session": session,
            },
        }
    rank0 = container_name(app_id, app.roles[0].name, 0)
    # Rank 0 is found by its container name (the engine's DNS on the app's network); a single
    # replica is rank 0 itself, and on host or none every replica is on localhost.
    rank0_host = "localhost" if single or network in ("host", "none") else rank0
    copied = {
        k: v for k, v in ctx.env.items() if any(fnmatch.fnmatchcase(k, p) for p in opts.copy_env)
    }
    shape = json.dumps([[r.name, num_replicas(r)] for r in app.roles])
    for i, role in enumerate(app.roles):
        path = f"app.roles[{i}]"
        if not role.image:
            raise InvalidArgument(f"{path}.image", "local_docker runs images: set the role's image")
        req.images.setdefault(role.image, f"{path}.image")
        for k in range(num_replicas(role)):
            macros = Macros(img_root="", app_id=app_id, replica_id=str(k), rank0_env=RANK0_ENV)
            r = macros.apply(role)
            env = {**copied, **opts.env, **r.env, RANK0_ENV: rank0_host}
            name = container_name(app_id, role.name, k)
            body: dict[str, Any] = {
                "Image": role.image,
                "Cmd": [r.entrypoint, *r.args],
                "Env": [f"{key}={value}" for key, value in env.items()],
                "Labels": {
                    "txd.scheduler": NAME,
                    "txd.session": session,
                    "txd.app_id": app_id,
                    "txd.role": role.name,
                    "txd.replica_id": str(k),
                    "txd.roles": shape,
                    **torchx_labels(app_id, role.name, k),
                },
                "StopTimeout": opts.stop_timeout,
                "HostConfig": _host_config(r, opts, network, ctx.cwd, path),
            }
            if network != "host":
                body["Hostname"] = name
            if role.port_map:  # exposed, as TorchX does; nothing is published
                body["ExposedPorts"] = {f"{p}/tcp": {} for p in role.port_map.values()}
            req.containers.append(ContainerSpec(name, role.name, k, body))
    return req
