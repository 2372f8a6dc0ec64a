"""Both dry runs brought to one comparable structure per scheduler, then flattened to
`field -> value` (dotted paths; lists of named things keyed by their name, lists of plain values
kept whole), so that the suite compares them field by field.

What is masked, and why: the app id (random on both sides) becomes `<app_id>`; the log folder
each side picks (a temp dir) becomes `<log_dir>`; variables both processes inherit from their
own environment (PATH, HOME, ...) are dropped from local_cwd's env. Nothing else is changed.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
from collections.abc import Callable
from typing import Any

import yaml

# Keys that name an element of a list of dicts, in order of preference.
_LIST_KEYS = ("name", "type", "targetNodes", "containerPath", "Key", "Target", "mountPath")
_INHERITED = set(os.environ) | {"PATH", "HOME", "PWD", "SHLVL", "_", "OLDPWD"}


# Lists kept by position: a pod's containers and an AppDef's roles (each side may name them
# its own way; the name is compared as a field).
_BY_POSITION = {"containers", "roles"}


def keyed(obj: Any, parent: str = "") -> Any:
    """Lists of dicts that all carry one of _LIST_KEYS (unique) become dicts keyed by it."""
    if isinstance(obj, dict):
        return {k: keyed(v, k) for k, v in obj.items()}
    if isinstance(obj, list) and parent in _BY_POSITION:
        return [keyed(v) for v in obj]
    if isinstance(obj, list):
        items = [keyed(v) for v in obj]
        if items and all(isinstance(v, dict) for v in items):
            for key in _LIST_KEYS:
                names = [v.get(key) for v in items]
                if all(isinstance(n, str) for n in names) and len(set(names)) == len(names):
                    return {f"[{n}]": {k: x for k, x in v.items() if k != key}
                            for n, v in zip(names, items, strict=True)}  # fmt: skip
        return items
    return obj


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaves; a list of dicts is indexed ([0], [1], ...), any other list and
    every empty container is a leaf."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            sep = "" if str(k).startswith("[") or not prefix else "."
            out.update(flatten(v, f"{prefix}{sep}{k}"))
    elif isinstance(obj, list) and obj and any(isinstance(v, dict) for v in obj):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}[{i}]"))
    else:
        out[prefix or "(request)"] = obj
    return out


def mask(obj: Any, words: dict[str, str]) -> Any:
    """Every occurrence of a key of `words` in a string (keys and values) replaced by its value,
    longest first; a key starting with `=` is a whole word only (a role's name: `ps` is not
    masked in `https`)."""
    pats = []
    for w in sorted((w for w in words if w.strip("=")), key=len, reverse=True):
        if w.startswith("="):
            pats.append(
                (re.compile(rf"(?<![A-Za-z0-9]){re.escape(w[1:])}(?![A-Za-z0-9])"), words[w])
            )
        else:
            pats.append((re.compile(re.escape(w)), words[w]))

    def sub(s: str) -> str:
        for pat, repl in pats:
            s = pat.sub(repl, s)
        return s

    if isinstance(obj, dict):
        return {sub(str(k)): mask(v, words) for k, v in obj.items()}
    if isinstance(obj, list):
        return [mask(v, words) for v in obj]
    if isinstance(obj, str):
        return sub(obj)
    return obj


# -- local_cwd --------------------------------------------------------------------------------


def _env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in _INHERITED or os.environ.get(k) != v}


def torchx_local(req: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    out = {}
    for role, params in req["role_params"].items():
        for k, p in enumerate(params):
            env = {k2: v for k2, v in _env(p["env"]).items() if k2 != "PATH"}
            out[f"[{role}/{k}]"] = {"args": p["args"], "env": env, "cwd": p["cwd"]}
    return out, {req["app_id"]: "<app_id>", req["log_dir"]: "<log_dir>"}


def txd_local(text: str) -> tuple[Any, dict[str, str]]:
    req = ast.literal_eval(text)
    out = {}
    for r in req["replicas"]:
        env = {k: v for k, v in _env(r["env"]).items() if k != "PATH"}
        out[f"[{r['role']}/{r['replica_id']}]"] = {"args": r["args"], "env": env, "cwd": r["cwd"]}
    return out, {req["app_id"]: "<app_id>", req["app_dir"]: "<log_dir>"}


# -- local_docker -----------------------------------------------------------------------------

_UNITS = {"k": 2**10, "m": 2**20, "g": 2**30}


def _bytes(v: Any) -> Any:
    if isinstance(v, str) and v[:-1].isdigit() and v[-1:].lower() in _UNITS:
        return int(v[:-1]) * _UNITS[v[-1].lower()]
    return v


def torchx_docker(req: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    out = {}
    for c in req["containers"]:
        kw = dict(c["kwargs"])
        name = kw.pop("name")
        for k in ("mem_limit", "shm_size"):
            if k in kw:
                kw[k] = _bytes(kw[k])
        out[f"[{name}]"] = {"image": c["image"], "command": c["command"], **kw}
    return out, _docker_ids(req["app_id"])


def _docker_ids(app_id: str) -> dict[str, str]:
    # Container names hold the app id's last 30 characters (TorchX's rule, and txd's).
    return {app_id: "<app_id>", app_id[-30:]: "<app_id>"}


# The Engine API's create body in docker-py's run() keyword names (TorchX's request).
_ENGINE_TO_PY = {
    "Image": "image",
    "Cmd": "command",
    "Labels": "labels",
    "Hostname": "hostname",
    "StopTimeout": "stop_timeout",
    "User": "user",
    "WorkingDir": "working_dir",
    "Entrypoint": "entrypoint",
}
_HOST_TO_PY = {
    "NetworkMode": "network",
    "Privileged": "privileged",
    "Mounts": "mounts",
    "Memory": "mem_limit",
    "ShmSize": "shm_size",
    "NanoCpus": "nano_cpus",
    "DeviceRequests": "device_requests",
    "RestartPolicy": "restart_policy",
    "Init": "init",
    "LogConfig": "log_config",
}


def txd_docker(text: str) -> tuple[Any, dict[str, str]]:
    req = json.loads(text)
    out = {}
    for c in req["container_create"]:
        body = dict(c["body"])
        host = body.pop("HostConfig", {})
        item: dict[str, Any] = {}
        env = body.pop("Env", [])
        item["environment"] = dict(e.partition("=")[::2] for e in env)
        for k, v in body.items():
            item[_ENGINE_TO_PY.get(k, k)] = v
        for k, v in host.items():
            if k == "Devices":
                v = [f"{d['PathOnHost']}:{d['PathInContainer']}:{d['CgroupPermissions']}"
                     for d in v]  # fmt: skip
                item["devices"] = v
            else:
                item[_HOST_TO_PY.get(k, f"HostConfig.{k}")] = v
        out[f"[{c['name']}]"] = item
    return out, _docker_ids(req["app_id"])


# -- slurm, lsf --------------------------------------------------------------------------------

_TXD_LOG_TAG = re.compile(
    r"slurm-(%j|\$SLURM_JOB_ID)-[a-z0-9]{6}(?=\.(?:out|err)$|-.+-\d+\.(?:out|err)$)"
)


def _srun(tokens: list[str]) -> dict[str, Any]:
    opts: dict[str, str] = {}
    env: dict[str, str] = {}
    i = 0
    while i < len(tokens) and tokens[i].startswith("-"):
        k, _, v = tokens[i].partition("=")
        if k == "--export":
            # As Slurm reads it: a comma starts the next variable, whatever the quoting.
            for item in v.split(","):
                if item != "ALL":
                    name, _, val = item.partition("=")
                    env[name] = val
        else:
            opts[k] = v
        i += 1
    if i < len(tokens) and tokens[i] == "env":
        i += 1
        while i < len(tokens) and re.match(r"^[A-Za-z_]\w*=", tokens[i]):
            name, _, val = tokens[i].partition("=")
            env[name] = val
            i += 1
    return {"opts": opts, "env": env, "cmd": tokens[i:]}


def slurm_script(script: str) -> dict[str, Any]:
    """An sbatch script as its #SBATCH options per het group, its exports, and each het
    group's srun (options, env, command). Its other lines (each side's retry logic) are not
    compared."""
    script = script.replace("\\\n", " ")  # continued lines (TorchX's het-group srun) as one
    groups: list[dict[str, str]] = [{}]
    exports: dict[str, str] = {}
    sruns: list[dict[str, Any]] = []
    for line in script.splitlines():
        s = line.strip()
        if s.startswith("#SBATCH"):
            for tok in shlex.split(s[len("#SBATCH") :]):
                if tok == "hetjob":
                    groups.append({})
                else:
                    k, _, v = tok.partition("=")
                    groups[-1][k] = v
        elif not s or s.startswith("#"):
            continue
        elif s.startswith("export "):
            for tok in shlex.split(s[len("export ") :]):
                k, _, v = tok.partition("=")
                exports[k] = v
        elif s.startswith("srun "):
            tokens = shlex.split(s)[1:]
            part: list[str] = []
            for tok in [*tokens, ":"]:
                if tok == ":":
                    sruns.append(_srun(part))
                    part = []
                else:
                    part.append(tok)
    out = {
        **{f"sbatch[{i}]": g for i, g in enumerate(groups)},
        "export": exports,
        **{f"srun[{i}]": s for i, s in enumerate(sruns)},
    }
    return _untag(out)


def _untag(obj: Any) -> Any:
    """txd's random per-job tag in log file names (slurm-%j-<tag>-...) as `<tag>`."""
    if isinstance(obj, dict):
        return {k: _untag(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_untag(v) for v in obj]
    return _TXD_LOG_TAG.sub(r"slurm-\1-<tag>", obj) if isinstance(obj, str) else obj


def torchx_slurm(req: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    return slurm_script(req["script"]), {}


def txd_slurm(text: str) -> tuple[Any, dict[str, str]]:
    return slurm_script(text), {}


_RANK0 = re.compile(r"(?<![A-Z_])RANK0_HOST|<rank0-host>")


def lsf_script(script: str) -> dict[str, Any]:
    """An LSF submit script as its bsub commands (argv, and the heredoc marker as written:
    quoted, the submit host's shell expands nothing in the job) and each job's command line as
    the job receives it (read through the heredoc).
    The rank-0 host, which both fill in at submission (bhosts), is `<rank0-host>`; the other
    lines (`set -e`) are not compared."""
    out: dict[str, Any] = {}
    n = -1
    for raw in script.splitlines():
        line = _RANK0.sub("<rank0-host>", raw.strip())
        if line.startswith("bsub "):
            n += 1
            argv, _, marker = line.partition(" << ")
            out[f"bsub[{n}]"] = {"argv": shlex.split(argv), "heredoc": marker}
        elif n >= 0 and "job" not in out[f"bsub[{n}]"] and line and not line.startswith("#"):
            if not out[f"bsub[{n}]"]["heredoc"].startswith(("'", '"')):
                # Read through an unquoted heredoc, as the shell does: \$ \` \\ lose the \.
                line = re.sub(r"\\([$`\\])", r"\1", line)
            out[f"bsub[{n}]"].update(_docker_run(shlex.split(line)))
    return out


def _docker_run(argv: list[str]) -> dict[str, Any]:
    """A job's `docker run` line as its `-e` variables and the rest of its argv."""
    env: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "-e" and i + 1 < len(argv):
            k, _, v = argv[i + 1].partition("=")
            env[k] = v
            i += 2
        else:
            rest.append(argv[i])
            i += 1
    return {"job": rest, "job_env": env}


def torchx_lsf(req: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    return lsf_script(req["script"]), {req["app_id"]: "<app_id>"}


def txd_lsf(text: str) -> tuple[Any, dict[str, str]]:
    m = re.search(r"^bsub -P (\S+)", text, re.MULTILINE)
    return lsf_script(text), {m.group(1): "<app_id>"} if m else {}


# -- kubernetes, kubernetes_mcad ---------------------------------------------------------------


def _yaml_docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def torchx_k8s(req: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    return keyed(req), {req["metadata"]["name"]: "<app_id>"}


def txd_k8s(text: str) -> tuple[Any, dict[str, str]]:
    first = _yaml_docs(text)[0]
    return keyed(first), {first["metadata"]["name"]: "<app_id>"}


def _embedded(root: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The wrapper with each object it carries (a dict with kind, apiVersion and metadata)
    taken out, and those objects by kind and position (`[Pod#0]`: each side names its pods
    its own way, and the name is compared as a field)."""
    found: dict[str, Any] = {}

    def walk(obj: Any, top: bool) -> Any:
        if isinstance(obj, dict):
            if not top and {"kind", "apiVersion", "metadata"} <= set(obj):
                n = sum(1 for k in found if k.startswith(f"[{obj['kind']}#"))
                key = f"{obj['kind']}#{n}"
                found[f"[{key}]"] = keyed(obj)
                return f"<{key}>"
            return {k: walk(v, False) for k, v in obj.items()}
        if isinstance(obj, list):
            return [walk(v, False) for v in obj]
        return obj

    return walk(root, True), found


def torchx_mcad(req: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    wrapper, objects = _embedded(req)
    return {"wrapper": wrapper, "objects": objects}, {req["metadata"]["name"]: "<app_id>"}


def txd_mcad(text: str) -> tuple[Any, dict[str, str]]:
    first = _yaml_docs(text)[0]
    wrapper, objects = _embedded(first)
    return {"wrapper": wrapper, "objects": objects}, {first["metadata"]["name"]: "<app_id>"}


# -- aws_batch, aws_sagemaker ------------------------------------------------------------------


def torchx_batch(req: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    out = {"queue": req["queue"], "share_id": req["share_id"], "job_def": keyed(req["job_def"])}
    return out, {req["name"]: "<app_id>"}


def txd_batch(text: str) -> tuple[Any, dict[str, str]]:
    req = json.loads(text)
    submit = req["submit_job"]
    job_def = dict(req["register_job_definition"])
    if "containerProperties" in job_def:
        # A single-node container job, laid out as the one node of a multi-node job (what
        # TorchX submits) so that its container's fields are compared; `type` still differs.
        job_def["nodeProperties"] = {
            "numNodes": 1,
            "mainNode": 0,
            "nodeRangeProperties": [
                {"targetNodes": "0:0", "container": job_def.pop("containerProperties")}
            ],
        }
    out = {
        "queue": submit["jobQueue"],
        "share_id": submit.get("shareIdentifier"),
        "job_def": keyed(job_def),
    }
    return out, {submit["jobName"]: "<app_id>"}


# CreateTrainingJob's fields in the SageMaker SDK's estimator keywords (TorchX's request).
_SM_FIELDS = {
    ("AlgorithmSpecification", "TrainingImage"): "image_uri",
    ("RoleArn",): "role",
    ("ResourceConfig", "InstanceType"): "instance_type",
    ("ResourceConfig", "InstanceCount"): "instance_count",
    ("ResourceConfig", "VolumeSizeInGB"): "volume_size",
    ("ResourceConfig", "VolumeKmsKeyId"): "volume_kms_key",
    ("StoppingCondition", "MaxRuntimeInSeconds"): "max_run",
    ("StoppingCondition", "MaxWaitTimeInSeconds"): "max_wait",
    ("Environment",): "environment",
    ("HyperParameters",): "hyperparameters",
    ("Tags",): "tags",
    ("OutputDataConfig", "S3OutputPath"): "output_path",
    ("EnableManagedSpotTraining",): "use_spot_instances",
}


def torchx_sagemaker(req: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    job_def = dict(req["job_def"])
    job_def["tags"] = {t["Key"]: t["Value"] for t in job_def.get("tags") or []}
    return job_def, {req["job_name"]: "<app_id>"}


def txd_sagemaker(text: str) -> tuple[Any, dict[str, str]]:
    req = json.loads(text)
    name = req.get("TrainingJobName", "")
    out: dict[str, Any] = {}
    for path, key in _SM_FIELDS.items():
        node: Any = req
        for p in path:
            node = node.get(p) if isinstance(node, dict) else None
        if node is not None:
            out[key] = node
            parent = req
            for p in path[:-1]:
                parent = parent[p]
            parent.pop(path[-1])
    if isinstance(out.get("tags"), list):
        out["tags"] = {t["Key"]: t["Value"] for t in out["tags"]}
    hyper = out.get("hyperparameters")
    if hyper and "sagemaker_program" in hyper:  # framework mode: the SDK's request at fit()
        _as_estimator(out, hyper)
    for k, v in req.items():  # what has no estimator keyword keeps its API name
        if k != "TrainingJobName" and v not in ({}, None):
            out[k] = v
    return out, {name: "<app_id>"}


def _as_estimator(out: dict[str, Any], hyper: dict[str, str]) -> None:
    """Framework mode's hyperparameters as the estimator's keywords (TorchX's side): the SDK
    JSON-encodes every value at fit() and carries entry_point and distribution as
    `sagemaker_*` keys. The other `sagemaker_*` keys it adds at fit() stay, as rows."""
    decoded = {}
    for k, v in hyper.items():
        try:
            decoded[k] = json.loads(v)
        except ValueError:
            decoded[k] = v
    out["entry_point"] = decoded.pop("sagemaker_program")
    if decoded.pop("sagemaker_torch_distributed_enabled", False):
        out["distribution"] = {"torch_distributed": {"enabled": True}}
    out["hyperparameters"] = {
        k: v if k.startswith("sagemaker_") or isinstance(v, str) else json.dumps(v)
        for k, v in decoded.items()
    }


Normaliser = Callable[[Any], tuple[Any, dict[str, str]]]
NORMALISERS: dict[str, tuple[Normaliser, Normaliser]] = {
    "local_cwd": (torchx_local, txd_local),
    "local_docker": (torchx_docker, txd_docker),
    "slurm": (torchx_slurm, txd_slurm),
    "lsf": (torchx_lsf, txd_lsf),
    "kubernetes": (torchx_k8s, txd_k8s),
    "kubernetes_mcad": (torchx_mcad, txd_mcad),
    "aws_batch": (torchx_batch, txd_batch),
    "aws_sagemaker": (torchx_sagemaker, txd_sagemaker),
}


def fields(
    scheduler: str, side: int, request: Any, names: dict[str, str] | None = None
) -> dict[str, Any]:
    """One side's request (side 0: TorchX's JSON, 1: txd's rendered text) as field -> value;
    `names` masks more words (the roles' names as <role0>, <role1>: so that a difference every
    app shows is one row)."""
    structure, words = NORMALISERS[scheduler][side](request)
    return flatten(mask(structure, {**words, **(names or {})}))
