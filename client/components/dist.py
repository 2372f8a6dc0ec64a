"""Builtin distributed-training components: ddp and spmd, both launched through torchrun.

Every public function here returning an AppDef is a builtin named `dist.<function>`.
"""

from __future__ import annotations

import os
import shlex

from txd import resources
from txd.client.components._mounts import parse_mounts
from txd.client.components.utils import DEFAULT_IMAGE
from txd.v1 import AppDef, Resource, Role

_DEFAULT_EXPERIMENT = "default-experiment"
_DEBUG_ENV = {
    "CUDA_LAUNCH_BLOCKING": "1",
    "NCCL_DESYNC_DEBUG": "1",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "TORCH_SHOW_CPP_STACKTRACES": "1",
}


def _gpus_per_host(named: str) -> int | None:
    """The GPUs of a named resource (txd.resources, which the daemon uses too), None if unknown."""
    try:
        return resources.lookup(named).gpu
    except KeyError:
        return None


class _Raw(str):
    """A torchrun argument that must reach bash unquoted (macros and shell expansions)."""


def _parse_j(j: str, *, bare_is_nodes: bool) -> tuple[int, int, int | None]:
    """`[min:]nnodes x nproc`, or a bare number -> (min_nodes, max_nodes, nproc or None).

    A bare number is nproc on one node for ddp and the node count for spmd.
    """
    usage = "[MIN_NODES:]NODESxPROCS or " + ("[MIN_NODES:]NODES" if bare_is_nodes else "PROCS")
    nodes, sep, procs = j.strip().partition("x")
    try:
        if not sep and not bare_is_nodes:
            min_nodes = max_nodes = 1
            nproc: int | None = int(nodes)
        else:
            low, colon, high = nodes.partition(":")
            max_nodes = int(high if colon else low)
            min_nodes = int(low) if colon else max_nodes
            nproc = int(procs) if sep else None
    except ValueError:
        raise ValueError(f"bad -j {j!r}: expected {usage}") from None
    if min_nodes < 1 or max_nodes < min_nodes or (nproc is not None and nproc < 1):
        raise ValueError(f"bad -j {j!r}: need 1 <= MIN_NODES <= NODES and PROCS >= 1")
    return min_nodes, max_nodes, nproc


def _role_name(script: str | None, m: str | None) -> str:
    if script:
        return os.path.splitext(os.path.basename(script))[0]
    return str(m).rpartition(".")[2]


def ddp(
    *script_args: str,
    script: str | None = None,
    m: str | None = None,
    image: str = DEFAULT_IMAGE,
    name: str = "/",
    h: str | None = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 1024,
    j: str = "1x2",
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    rdzv_port: int = 29500,
    rdzv_backend: str = "c10d",
    rdzv_conf: str | None = None,
    mounts: list[str] | None = None,
    debug: bool = False,
    tee: int = 3,
) -> AppDef:
    """Distributed data parallel training with torchrun (one role, one replica per node).

    Args:
        script_args: arguments passed to the script or module
        script: training script to run
        m: module to run instead of a script (python -m)
        image: image to run in
        name: EXPERIMENT/RUN; the run name (the script or module name when empty) names the
            app, the experiment defaults to default-experiment
        h: named resource (overrides cpu, gpu and memMB)
        cpu: CPU cores per node
        gpu: GPUs per node
        memMB: memory per node in MiB
        j: [MIN_NODES:]NODESxPROCS_PER_NODE, or PROCS_PER_NODE for a single node
        env: environment variables, KEY=VALUE,...
        max_retries: how many times to retry a failed run
        rdzv_port: port of the c10d rendezvous on the rank 0 host
        rdzv_backend: torchrun rendezvous backend
        rdzv_conf: extra rendezvous configuration (torchrun --rdzv_conf)
        mounts: mounts, e.g. type=bind,src=/data,dst=/data,readonly
        debug: turn on CUDA/NCCL/torch.distributed debug settings
        tee: which streams torchrun tees to the console (torchrun --tee)
    """
    if bool(script) == bool(m):
        raise ValueError("exactly one of --script and --m is required")
    min_nodes, max_nodes, nproc = _parse_j(j, bare_is_nodes=False)
    assert nproc is not None
    if not 1 <= rdzv_port <= 65535:
        raise ValueError(f"--rdzv_port {rdzv_port} is not a port (1..65535)")

    role = _role_name(script, m)
    experiment, _, run = name.rpartition("/")
    # One node: torchrun picks a free local port. Several: ${rank0_env} becomes the name of the
    # variable holding the rank 0 host and bash expands it (localhost when unset, as on rank 0).
    endpoint = "localhost:0" if max_nodes == 1 else f"${{${{rank0_env}}:=localhost}}:{rdzv_port}"
    nnodes = f"{min_nodes}:{max_nodes}" if min_nodes != max_nodes else str(max_nodes)
    cmd: list[str] = ["torchrun", "--rdzv_backend", rdzv_backend]
    if rdzv_conf:
        cmd += ["--rdzv_conf", rdzv_conf]
    cmd += [
        "--rdzv_endpoint",
        _Raw(endpoint),
        "--rdzv_id",
        _Raw("${app_id}"),
        "--nnodes",
        nnodes,
        "--nproc_per_node",
        str(nproc),
        "--tee",
        str(tee),
        "--role",
        "",
    ]
    if min_nodes == max_nodes:
        cmd += ["--node_rank", _Raw("${replica_id}")]
    cmd += [script] if script else ["-m", str(m)]
    cmd += script_args

    role_env = dict(env or {})
    role_env.setdefault("LOGLEVEL", os.environ.get("LOGLEVEL", "WARNING"))
    role_env["TORCHX_TRACKING_EXPERIMENT_NAME"] = experiment or _DEFAULT_EXPERIMENT
    role_env["TORCHX_TRACKING_RUN_NAME"] = run or role
    if debug:
        role_env.update(_DEBUG_ENV)
    return AppDef(
        name=run or role,
        roles=[
            Role(
                name=role,
                image=image,
                entrypoint="bash",
                args=["-c", " ".join(a if isinstance(a, _Raw) else shlex.quote(a) for a in cmd)],
                env=role_env,
                num_replicas=max_nodes,
                min_replicas=min_nodes,
                max_retries=max_retries,
                resource=Resource(named=h) if h else Resource(cpu=cpu, gpu=gpu, mem_mb=memMB),
                port_map={"c10d": rdzv_port},
                mounts=parse_mounts(mounts or []),
            )
        ],
    )


def spmd(
    *args: str,
    script: str | None = None,
    m: str | None = None,
    image: str = DEFAULT_IMAGE,
    name: str = "/",
    h: str = "gpu.small",
    j: str = "1x1",
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    mounts: list[str] | None = None,
    debug: bool = False,
) -> AppDef:
    """SPMD training with torchrun on GPU hosts: one process per GPU unless -j says otherwise.

    Args:
        args: arguments passed to the script or module
        script: training script to run
        m: module to run instead of a script (python -m)
        image: image to run in
        name: EXPERIMENT/RUN; the run name (the script or module name when empty) names the
            app, the experiment defaults to default-experiment
        h: named resource of each host (a GPU host when -j gives no process count)
        j: [MIN_NODES:]NODES (one process per GPU of --h) or [MIN_NODES:]NODESxPROCS_PER_NODE
        env: environment variables, KEY=VALUE,...
        max_retries: how many times to retry a failed run
        mounts: mounts, e.g. type=bind,src=/data,dst=/data,readonly
        debug: turn on CUDA/NCCL/torch.distributed debug settings
    """
    min_nodes, max_nodes, nproc = _parse_j(j, bare_is_nodes=True)
    if nproc is None:
        gpus = _gpus_per_host(h)
        if not gpus:
            reason = "is not known here" if gpus is None else "has no GPUs"
            raise ValueError(
                f"cannot infer processes per node: named resource {h!r} {reason}; "
                "use -j NODESxPROCS"
            )
        nproc = gpus
    nodes = f"{min_nodes}:{max_nodes}" if min_nodes != max_nodes else str(max_nodes)
    return ddp(
        *args,
        script=script,
        m=m,
        image=image,
        name=name,
        h=h,
        j=f"{nodes}x{nproc}",
        env=env,
        max_retries=max_retries,
        mounts=mounts,
        debug=debug,
    )
