"""Builtin distributed-training components: ddp and spmd, both launched through torchrun.

Every public function here returning an AppDef is a builtin named `dist.<function>`, built
exactly as TorchX 0.7's `torchx.components.dist` builds it for the same arguments. txd adds
`ddp --rdzv_conf` (off unless given) and `spmd -j MIN:MAX[xPROCS]`, and refuses a `-j` TorchX
passes on for torchrun or the daemon to fail on (0 nodes or processes, fewer nodes than the
minimum).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from txd import resources
from txd.client.components._common import DEFAULT_IMAGE, resource
from txd.client.components._mounts import parse_mounts
from txd.v1 import AppDef, Role

_DEFAULT_EXPERIMENT = "default-experiment"
_DEBUG_ENV = {
    "CUDA_LAUNCH_BLOCKING": "1",
    "NCCL_DESYNC_DEBUG": "1",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "TORCH_SHOW_CPP_STACKTRACES": "1",
}
# ddp's -j, as TorchX reads it: [[MIN:]NODESx]PROCS.
_J_ELASTIC = re.compile(r"([0-9]+):([0-9]+)x([0-9]+)")
_J_FIXED = re.compile(r"([0-9]+)x([0-9]+)")
_J_PROCS = re.compile(r"[0-9]+")


def _gpus_per_host(named: str) -> int | None:
    """The GPUs of a named resource (txd.resources, which the daemon uses too), None if unknown."""
    try:
        return resources.lookup(named).gpu
    except KeyError:
        return None


class _Raw(str):
    """A torchrun argument that must reach bash unquoted (a shell expansion)."""


def _parse_ddp_j(j: str) -> tuple[int, int, int, str]:
    """ddp's `-j` -> (min_nodes, max_nodes, nproc, the --nnodes text), as TorchX reads it: the
    --nnodes text is the node part as written (`2:4`, `2`), `1` for a bare PROCS."""
    text = j.strip()
    if m := _J_ELASTIC.fullmatch(text):
        low, high, procs = m.groups()
        nnodes = f"{low}:{high}"
    elif m := _J_FIXED.fullmatch(text):
        low, procs = m.groups()
        high = nnodes = low
    elif _J_PROCS.fullmatch(text):
        low = high = nnodes = "1"
        procs = text
    else:
        raise ValueError(
            f"bad -j {j!r}: expected [MIN_NODES:]NODESxPROCS or PROCS (e.g. 1:2x4, 1x4, 4)"
        )
    min_nodes, max_nodes, nproc = int(low), int(high), int(procs)
    _check_j(j, min_nodes, max_nodes, nproc)
    return min_nodes, max_nodes, nproc, nnodes


def _check_j(j: str, min_nodes: int, max_nodes: int, nproc: int | None) -> None:
    # TorchX lets these through to an app with 0 replicas or processes; the daemon would refuse
    # the app with a message about min_replicas, so name the -j here.
    if min_nodes < 1 or max_nodes < min_nodes or (nproc is not None and nproc < 1):
        raise ValueError(f"bad -j {j!r}: need 1 <= MIN_NODES <= NODES and PROCS >= 1")


def _role_name(script: str | None, m: str | None) -> str:
    if script:
        return Path(script).stem
    return str(m).rpartition(".")[2]


def _names(name: str, script: str | None, m: str | None) -> tuple[str, str]:
    """(experiment, run) of `--name`, as TorchX's StructuredNameArgument: split at the first
    `/`; an empty run is the script's stem or the module's last part, an empty experiment
    default-experiment; a name without `/` is the run."""
    experiment, sep, run = name.partition("/")
    if not sep:
        experiment, run = "", name
    return experiment or _DEFAULT_EXPERIMENT, run or _role_name(script, m)


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

    One node: torchrun's rendezvous takes a free local port (--rdzv_port is not used). Several:
    the c10d rendezvous runs on the rank 0 host at --rdzv_port, which must be reachable from
    every node. --h (a named resource) wins over --cpu, --gpu and --memMB.

    Args:
        script_args: arguments passed to the script or module
        script: training script to run
        m: module to run instead of a script (python -m)
        image: image to run in
        name: EXPERIMENT/RUN, EXPERIMENT/, /RUN or RUN; the run names the app (the script or
            module name when empty), the experiment defaults to default-experiment
        h: named resource (wins over cpu, gpu and memMB)
        cpu: CPU cores per node
        gpu: GPUs per node
        memMB: memory per node in MiB
        j: [MIN_NODES:]NODESxPROCS_PER_NODE, or PROCS_PER_NODE for a single node
        env: environment variables, KEY=VALUE,...
        max_retries: how many times to retry a failed run
        rdzv_port: port of the c10d rendezvous on the rank 0 host (several nodes only)
        rdzv_backend: torchrun rendezvous backend (static adds --node_rank)
        rdzv_conf: extra rendezvous configuration, torchrun --rdzv_conf (txd only)
        mounts: mounts, e.g. type=bind,src=/data,dst=/data,readonly
        debug: turn on CUDA/NCCL/torch.distributed debug settings
        tee: which streams torchrun tees to the console (torchrun --tee)
    """
    if bool(script) == bool(m):
        raise ValueError("exactly one of --script and --m is required")
    min_nodes, max_nodes, nproc, nnodes = _parse_ddp_j(j)
    if not 1 <= rdzv_port <= 65535:
        raise ValueError(f"--rdzv_port {rdzv_port} is not a port (1..65535)")
    experiment, run = _names(name, script, m)

    # One node: torchrun picks a free local port. Several: `$$` leaves one `$` after macro
    # substitution, ${rank0_env} becomes the name of the variable holding the rank 0 host, and
    # bash expands it (localhost when unset or empty, as on rank 0 of some schedulers).
    endpoint = "localhost:0" if max_nodes == 1 else f"$${{${{rank0_env}}:=localhost}}:{rdzv_port}"
    cmd: list[str] = ["torchrun", "--rdzv_backend", rdzv_backend]
    if rdzv_conf:
        cmd += ["--rdzv_conf", rdzv_conf]
    cmd += ["--rdzv_endpoint", _Raw(endpoint), "--rdzv_id", "${app_id}"]
    cmd += ["--nnodes", nnodes, "--nproc_per_node", str(nproc), "--tee", str(tee), "--role", ""]
    if rdzv_backend == "static":  # other backends give ranks out at the rendezvous
        cmd += ["--node_rank", "${replica_id}"]
    cmd += [script] if script else ["-m", str(m)]
    cmd += script_args

    role_env = dict(env or {})
    role_env["TORCHX_TRACKING_EXPERIMENT_NAME"] = experiment
    role_env.setdefault("LOGLEVEL", os.environ.get("LOGLEVEL", "WARNING"))
    if debug:
        role_env.update(_DEBUG_ENV)
    return AppDef(
        name=run,
        roles=[
            Role(
                name=_role_name(script, m),
                image=image,
                entrypoint="bash",
                # Macros inside single quotes still work: the scheduler substitutes them
                # before bash reads the line.
                args=["-c", " ".join(a if isinstance(a, _Raw) else shlex.quote(a) for a in cmd)],
                env=role_env,
                num_replicas=max_nodes,
                min_replicas=min_nodes,
                max_retries=max_retries,
                resource=resource(cpu, gpu, memMB, h),
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

    The same app as dist.ddp with --h and -j NODESxPROCS, where PROCS defaults to the GPUs of
    the named resource --h.

    Args:
        args: arguments passed to the script or module
        script: training script to run
        m: module to run instead of a script (python -m)
        image: image to run in
        name: EXPERIMENT/RUN, EXPERIMENT/, /RUN or RUN; the run names the app (the script or
            module name when empty), the experiment defaults to default-experiment
        h: named resource of each host (a GPU host when -j gives no process count)
        j: NODES (one process per GPU of --h) or NODESxPROCS_PER_NODE; txd also takes
            MIN_NODES:NODES[xPROCS_PER_NODE] for an elastic run
        env: environment variables, KEY=VALUE,...
        max_retries: how many times to retry a failed run
        mounts: mounts, e.g. type=bind,src=/data,dst=/data,readonly
        debug: turn on CUDA/NCCL/torch.distributed debug settings
    """
    nodes_text, sep, procs = j.strip().partition("x")
    low, colon, high = nodes_text.partition(":")
    try:
        max_nodes = int(high if colon else low)
        min_nodes = int(low) if colon else max_nodes
        nproc = int(procs) if sep else None
    except ValueError:
        raise ValueError(
            f"bad -j {j!r}: expected [MIN_NODES:]NODES or [MIN_NODES:]NODESxPROCS"
        ) from None
    _check_j(j, min_nodes, max_nodes, nproc)
    if nproc is None:
        gpus = _gpus_per_host(h)
        if not gpus:
            reason = "is not known here" if gpus is None else "has no GPUs"
            raise ValueError(
                f"cannot infer processes per node: named resource {h!r} {reason}; "
                "use -j NODESxPROCS"
            )
        nproc = gpus
    # TorchX passes ddp the numbers it read (`-j 02` is 2 nodes, --nnodes 2).
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
