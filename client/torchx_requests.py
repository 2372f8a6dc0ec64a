"""TorchX's request objects of txd's dry runs: what `Runner.dryrun(...).request` is.

TorchX's `AppDryRunInfo.request` is its scheduler's own request type (a KubernetesJob whose
`.resource` is the Volcano Job, a SlurmBatchRequest, a DockerJob ...). txd's daemon answers a
dry run with its native request as text (YAML, JSON, a script); each function here reads that
text (and the app as the daemon would submit it) into the TorchX type of the scheduler, filled
from what txd submits, not from what TorchX would have built: the values are txd's.

Only `images_to_push` is always empty: txd builds and pushes workspace images in the daemon.
torchx is imported only when one of these runs (txd.client.torchx_compat says how to install it).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from txd.client.torchx_compat import to_torchx_appdef
from txd.v1 import AppDef

# The daemon cuts a native request longer than this with a line saying so (daemon.core).
_CUT_NOTE = "more characters not shown)"


class RequestError(ValueError):
    """The dry run's text is not the request this module reads (cut, or of another shape)."""


def torchx_request(scheduler: str, text: str, app: AppDef, cfg: Mapping[str, Any]) -> Any:
    """The TorchX request object of `scheduler`'s dry run `text`, of `app` (the app as the
    daemon would submit it) with options `cfg`. Raises RequestError when the text cannot be
    read (a request too big for a dry run's answer is cut) and KeyError for a scheduler TorchX
    has no request type for."""
    if text.rstrip().endswith(_CUT_NOTE):
        raise RequestError("the daemon cut the dry run's request short (it is too big)")
    build = _BUILDERS[scheduler]
    try:
        return build(text, app, cfg)
    except Exception as e:  # any text it cannot read (YAML, JSON, a script of another shape)
        raise RequestError(f"cannot read {scheduler}'s dry run request: {e!r}") from e


def has_request_type(scheduler: str) -> bool:
    return scheduler in _BUILDERS


# -- Kubernetes --------------------------------------------------------------------------------


def _yaml_objects(text: str) -> list[dict[str, Any]]:
    import yaml  # torchx needs pyyaml: there whenever torchx is

    return [o for o in yaml.safe_load_all(text) if o]


def _kubernetes(text: str, app: AppDef, cfg: Mapping[str, Any]) -> Any:
    """KubernetesJob: `.resource` the Volcano Job (or the batch/v1 Job of an app txd runs
    without a queue) as a dict, the first object txd creates."""
    from torchx.schedulers.kubernetes_scheduler import KubernetesJob

    return _printable(KubernetesJob)(images_to_push={}, resource=_yaml_objects(text)[0])


def _kubernetes_mcad(text: str, app: AppDef, cfg: Mapping[str, Any]) -> Any:
    """KubernetesMCADJob: `.resource` the AppWrapper as a dict."""
    from torchx.schedulers.kubernetes_mcad_scheduler import KubernetesMCADJob

    return _printable(KubernetesMCADJob)(images_to_push={}, resource=_yaml_objects(text)[0])


@functools.cache
def _printable(cls: type) -> type:
    """A subclass of TorchX's Kubernetes request type that prints its `.resource` (a plain
    dict here) as YAML without the `kubernetes` package, which TorchX's own __str__ imports
    and txd does not need."""

    def text(self: Any) -> str:
        import yaml

        return str(yaml.safe_dump(self.resource, sort_keys=False))

    return type(cls.__name__, (cls,), {"__str__": text, "__repr__": text})


# -- local -------------------------------------------------------------------------------------


def _local_cwd(text: str, app: AppDef, cfg: Mapping[str, Any]) -> Any:
    """PopenRequest: each replica's argv, environment (what txd adds to the caller's) and
    directory; its log is txd's `<log>.log` (both streams, with an index beside it)."""
    from torchx.schedulers.local_scheduler import PopenRequest, ReplicaParam

    data = ast.literal_eval(text)
    params: dict[str, list[Any]] = {}
    log_dirs: dict[str, list[str]] = {}
    for r in data["replicas"]:
        params.setdefault(r["role"], []).append(
            ReplicaParam(args=r["args"], env=r["env"], combined=f"{r['log']}.log", cwd=r["cwd"])
        )
        log_dirs.setdefault(r["role"], []).append(data["app_dir"])
    return PopenRequest(
        app_id=data["app_id"], log_dir=data["app_dir"], role_params=params, role_log_dirs=log_dirs
    )


def _local_docker(text: str, app: AppDef, cfg: Mapping[str, Any]) -> Any:
    """DockerJob: one DockerContainer per replica, its kwargs docker-py's for txd's body."""
    from torchx.schedulers.docker_scheduler import DockerContainer, DockerJob

    data = json.loads(text)
    containers = []
    for c in data["container_create"]:
        body = c["body"]
        containers.append(
            DockerContainer(
                image=body["Image"],
                command=[*(body.get("Entrypoint") or []), *(body.get("Cmd") or [])],
                kwargs=_docker_kwargs(c["name"], body),
            )
        )
    return DockerJob(app_id=data["app_id"], containers=containers)


def _docker_kwargs(name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """docker-py's `containers.run` arguments (as TorchX fills them) for an Engine API body."""
    host = body.get("HostConfig", {})
    env = dict(item.split("=", 1) for item in body.get("Env", []))
    out: dict[str, Any] = {
        "name": name,
        "environment": env,
        "labels": dict(body.get("Labels", {})),
        "hostname": body.get("Hostname", name),
        "privileged": bool(host.get("Privileged", False)),
        "network": host.get("NetworkMode"),
        "mounts": list(host.get("Mounts", [])),
        "devices": [
            f"{d['PathOnHost']}:{d['PathInContainer']}:{d.get('CgroupPermissions', 'rwm')}"
            for d in host.get("Devices", [])
        ],
    }
    policy = host.get("RestartPolicy", {})
    if policy.get("Name", "no") != "no":
        out["restart_policy"] = dict(policy)
    if host.get("Memory"):
        out["mem_limit"] = f"{host['Memory'] // 2**20}m"
    if host.get("ShmSize"):
        out["shm_size"] = f"{host['ShmSize'] // 2**20}m"
    if host.get("NanoCpus"):
        out["nano_cpus"] = host["NanoCpus"]
    if host.get("DeviceRequests"):
        out["device_requests"] = list(host["DeviceRequests"])
    return out


# -- AWS ---------------------------------------------------------------------------------------


def _aws_batch(text: str, app: AppDef, cfg: Mapping[str, Any]) -> Any:
    """BatchJob: `.job_def` txd's RegisterJobDefinition request; name, queue and share id
    those of its SubmitJob."""
    from torchx.schedulers.aws_batch_scheduler import BatchJob

    data = json.loads(text)
    submit = data["submit_job"]
    return BatchJob(
        name=submit["jobName"],
        queue=submit["jobQueue"],
        share_id=submit.get("shareIdentifier"),
        job_def=data["register_job_definition"],
        images_to_push={},
    )


@dataclasses.dataclass
class SageMakerJob:
    """TorchX's AWSSageMakerJob (same fields), for when torchx's SageMaker module cannot be
    imported: it needs the `sagemaker` SDK, which txd does not."""

    job_name: str
    job_def: dict[str, Any]
    images_to_push: dict[str, tuple[str, str]]

    def __str__(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)


def _aws_sagemaker(text: str, app: AppDef, cfg: Mapping[str, Any]) -> Any:
    """AWSSageMakerJob: `.job_def` is txd's CreateTrainingJob request (TorchX's is the SDK
    estimator's arguments; txd writes the request the SDK would make of them itself)."""
    cls: Callable[..., Any]
    try:
        from torchx.schedulers.aws_sagemaker_scheduler import AWSSageMakerJob

        cls = AWSSageMakerJob
    except ImportError:
        cls = SageMakerJob
    data = json.loads(text)
    return cls(job_name=data["TrainingJobName"], job_def=data, images_to_push={})


# -- HPC ---------------------------------------------------------------------------------------


def _slurm(text: str, app: AppDef, cfg: Mapping[str, Any]) -> Any:
    """SlurmBatchRequest read from txd's sbatch script: one SlurmReplicaRequest per hetjob
    component (its #SBATCH options, its srun options, env and command), the job-wide #SBATCH
    options in `cmd` (where TorchX puts comment and mail options), job_dir as given."""
    from torchx.schedulers.slurm_scheduler import SlurmBatchRequest, SlurmReplicaRequest

    job_opts: list[str] = []
    components: list[list[str]] = []
    lines = text.splitlines()
    for line in lines:
        if not line.startswith("#SBATCH ") or line == "#SBATCH hetjob":
            continue
        opt = shlex.split(line[len("#SBATCH ") :])[0]
        if opt.startswith("--job-name="):
            components.append([])
        (components[-1] if components else job_opts).append(opt)
    groups = _srun_groups(lines)
    if len(groups) != len(components):
        raise ValueError(f"{len(components)} #SBATCH components but {len(groups)} srun groups")
    replicas = {}
    for sbatch, srun in zip(components, groups, strict=True):
        opts = _opts(sbatch)
        name = str(opts.pop("job-name"))
        srun_opts, env, argv = _srun_parts(srun)
        replicas[name] = SlurmReplicaRequest(
            name=name,
            entrypoint=argv[0],
            args=argv[1:],
            srun_opts={k: str(v) for k, v in srun_opts.items()},
            sbatch_opts=opts,
            env=env,
        )
    retries = [ln.split("=", 1)[1] for ln in lines if ln.startswith("export TORCHX_MAX_RETRIES=")]
    return SlurmBatchRequest(
        cmd=["sbatch", "--parsable", *job_opts],
        replicas=replicas,
        job_dir=cfg.get("job_dir"),
        max_retries=int(retries[0]),
    )


def _srun_groups(lines: list[str]) -> list[list[str]]:
    """The srun line's components (split at its ` : `), each as its words."""
    start = next(i for i, ln in enumerate(lines) if ln.startswith("srun "))
    joined = []
    for line in lines[start:]:
        joined.append(line.removesuffix("\\"))
        if not line.endswith("\\"):
            break
    words = shlex.split(" ".join(joined))[1:]
    groups: list[list[str]] = [[]]
    for word in words:
        if word == ":":
            groups.append([])
        else:
            groups[-1].append(word)
    return groups


def _srun_parts(words: list[str]) -> tuple[dict[str, str | None], dict[str, str], list[str]]:
    """(srun options, the env(1) assignments, the command) of one srun component."""
    i = 0
    while i < len(words) and words[i].startswith("--"):
        i += 1
    opts = _opts(words[:i])
    env: dict[str, str] = {}
    if i < len(words) and words[i] == "env":
        i += 1
        while i < len(words) and "=" in words[i]:
            key, _, value = words[i].partition("=")
            env[key] = value
            i += 1
    return opts, env, words[i:]


def _opts(words: list[str]) -> dict[str, str | None]:
    """`--key=value` -> {key: value}, `--flag` -> {flag: None}, as TorchX keeps them."""
    out: dict[str, str | None] = {}
    for word in words:
        key, sep, value = word.removeprefix("--").partition("=")
        out[key] = value if sep else None
    return out


def _lsf(text: str, app: AppDef, cfg: Mapping[str, Any]) -> Any:
    """LsfBsub: the app id txd's script names, the app and options, jobdir as given."""
    from torchx.schedulers.lsf_scheduler import LsfBsub

    marker = "# Generated by txd: LSF app "
    [app_id] = [ln[len(marker) :].strip() for ln in text.splitlines() if ln.startswith(marker)]
    return LsfBsub(
        jobdir=cfg.get("jobdir"),
        app_id=app_id,
        app=to_torchx_appdef(app),
        cfg=dict(cfg),
        cmd=["/bin/bash"],
    )


_BUILDERS: dict[str, Callable[[str, AppDef, Mapping[str, Any]], Any]] = {
    "local_cwd": _local_cwd,
    "local_docker": _local_docker,
    "kubernetes": _kubernetes,
    "kubernetes_mcad": _kubernetes_mcad,
    "aws_batch": _aws_batch,
    "aws_sagemaker": _aws_sagemaker,
    "slurm": _slurm,
    "lsf": _lsf,
}
