"""local_cwd's requests: what is started for an AppDef (one process per replica, in the
caller's directory, with its environment and what txd adds to it), what the job store keeps of
it, and how DryRun prints it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pprint
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from txd.schedulers.api import Macros, SubmitContext, num_replicas
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.local.recovery import REPLICA_ENV, start_ticks
from txd.schedulers.options import opt
from txd.v1.app_pb2 import AppDef

RANK0_ENV = "TORCHX_RANK0_HOST"


@dataclass
class LocalOpts:
    log_dir: str | None = opt(
        None, "directory for the replicas' log files (default: under the daemon's state dir)"
    )
    prepend_cwd: bool = opt(
        False, "put the working directory first on the replicas' PATH (default: last)"
    )
    auto_set_cuda_visible_devices: bool = opt(
        False,
        "give each GPU-requesting replica its own CUDA_VISIBLE_DEVICES; does nothing when the "
        "host has fewer GPUs than requested",
    )


@dataclass
class ReplicaSpec:
    role: str
    replica_id: int
    args: list[str]
    env: dict[str, str]
    cwd: str
    log: str  # the replica's log files are <log>.log and <log>.idx


@dataclass
class PopenRequest:
    app_id: str
    app_dir: str
    replicas: list[ReplicaSpec]


async def build(
    app: AppDef, opts: LocalOpts, ctx: SubmitContext, app_id: str, app_dir: Path
) -> PopenRequest:
    """One process per replica, in the caller's directory and environment (with what txd
    adds), logging under `app_dir`. Raises InvalidArgument for an entrypoint not found."""
    cuda = await _cuda_devices(app) if opts.auto_set_cuda_visible_devices else {}
    replicas = []
    for i, role in enumerate(app.roles):
        for k in range(num_replicas(role)):
            macros = Macros(img_root=ctx.cwd, app_id=app_id, replica_id=str(k), rank0_env=RANK0_ENV)
            r = macros.apply(role)
            log = app_dir / f"{role.name}.{k}"
            env = dict(ctx.env)
            env.update(r.env)
            env[RANK0_ENV] = "localhost"
            env.setdefault("PYTHONUNBUFFERED", "x")
            env[REPLICA_ENV] = str(log)
            env.setdefault("TORCHELASTIC_ERROR_FILE", f"{log}.error.json")
            if "PET_LOG_DIR" not in r.env:  # torchrun's --log_dir, in the app's folder as TorchX
                env["PET_LOG_DIR"] = str(app_dir / "torchelastic" / role.name)
            env["PATH"] = _join_path(
                r.env.get("PATH", ""),
                ctx.env.get("PATH", ""),
                ctx.cwd,
                prepend_cwd=opts.prepend_cwd,
            )
            if (role.name, k) in cuda:
                env["CUDA_VISIBLE_DEVICES"] = cuda[(role.name, k)]
            if shutil.which(r.entrypoint, path=env["PATH"]) is None and not (
                "/" in r.entrypoint and os.access(Path(ctx.cwd, r.entrypoint), os.X_OK)
            ):
                raise InvalidArgument(
                    f"app.roles[{i}].entrypoint",
                    f"{r.entrypoint!r} is not an executable found on the caller's PATH "
                    f"or relative to {ctx.cwd}",
                )
            replicas.append(
                ReplicaSpec(
                    role=role.name,
                    replica_id=k,
                    args=[r.entrypoint, *r.args],
                    env=env,
                    cwd=ctx.cwd,
                    log=str(log),
                )
            )
    return PopenRequest(app_id=app_id, app_dir=str(app_dir), replicas=replicas)


async def _cuda_devices(app: AppDef) -> dict[tuple[str, int], str]:
    """Consecutive GPU indices per replica, all or nothing, as TorchX assigns them."""
    wanted = [
        (role.name, k, role.resource.gpu)
        for role in app.roles
        if role.resource.gpu > 0
        for k in range(num_replicas(role))
    ]
    total = sum(n for _, _, n in wanted)
    if total == 0 or total > await _gpu_count():
        return {}
    out, next_dev = {}, 0
    for role_name, k, n in wanted:
        out[(role_name, k)] = ",".join(str(d) for d in range(next_dev, next_dev + n))
        next_dev += n
    return out


def native(req: PopenRequest, pids: Mapping[tuple[str, int], int]) -> dict[str, Any]:
    """What the job store keeps: where the logs are, and each replica's process group (pid
    None for one not started yet), from the pids by (role, replica id)."""
    out = []
    for spec in req.replicas:
        pid = pids.get((spec.role, spec.replica_id))
        out.append(
            {
                "role": spec.role,
                "replica_id": spec.replica_id,
                "log": spec.log,
                "pid": pid,
                "start_ticks": start_ticks(pid) if pid else None,
            }
        )
    return {"app_dir": req.app_dir, "replicas": out}


def render(req: PopenRequest, caller_env: dict[str, str]) -> str:
    """The request for people: the caller's environment is left out, only what txd adds or
    changes in it is shown."""
    replicas = []
    for s in req.replicas:
        env = {k: v for k, v in s.env.items() if caller_env.get(k) != v}
        replicas.append({**asdict(s), "env": env})
    data = {"app_id": req.app_id, "app_dir": req.app_dir, "replicas": replicas}
    return pprint.pformat(data, width=100, sort_dicts=False)


def _join_path(role_path: str, caller_path: str, cwd: str, *, prepend_cwd: bool) -> str:
    parts = [p for p in (role_path + ":" + caller_path).split(":") if p]
    parts = [cwd, *parts] if prepend_cwd else [*parts, cwd]
    return ":".join(dict.fromkeys(parts))


async def _gpu_count() -> int:
    """GPUs on this host, from `nvidia-smi -L` (0 when it is missing or fails)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    with contextlib.suppress(OSError):
        proc = await asyncio.create_subprocess_exec(
            "nvidia-smi", "-L", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
        out, _ = await proc.communicate()
        if proc.returncode == 0:
            return sum(1 for line in out.decode().splitlines() if line.startswith("GPU "))
    return 0
