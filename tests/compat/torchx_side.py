"""TorchX's side of the compatibility suite: run inside TorchX 0.7's own venv (scripts/torchx-venv),
never imported by txd or its tests. Reads one JSON document on stdin, prints one on stdout:

    python torchx_side.py dryrun   {"scheduler": S, "cases": [CASE, ...]}  -> [RESULT, ...]
    python torchx_side.py dryrun   {"jobs": [{"scheduler": S, "cases": [...]}, ...]}
                                                                   -> {S: [RESULT, ...], ...}
    python torchx_side.py runopts  {"schedulers": [S, ...]}                 -> {S: [OPT, ...]}
    python torchx_side.py appdef   {"cases": [CASE, ...]}  -> [{"id", "app"} or {"id", "error"}]

A CASE is {"id", "cfg", "app": APP} or {"id", "cfg", "component": "utils.echo", "args": [...]},
with "config_dir" to read that folder's .torchxconfig as `torchx run` does;
APP is the neutral app of tests/compat/apps.py. A RESULT is {"id", "request"} (the scheduler's
request as JSON: a script for slurm/lsf, the resource dict for kubernetes, the containers for
docker, the job definition for batch, ...) or {"id", "error"}. Every case of a scheduler runs in
this one process, so TorchX is imported once per scheduler.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from typing import Any


def _appdef(spec: dict[str, Any]) -> Any:
    from torchx import specs

    def mount(m: dict[str, Any]) -> Any:
        kind = m["kind"]
        if kind == "bind":
            return specs.BindMount(m["src"], m["dst"], m.get("read_only", False))
        if kind == "volume":
            return specs.VolumeMount(m["src"], m["dst"], m.get("read_only", False))
        return specs.DeviceMount(m["src"], m["dst"], m.get("permissions", "rwm"))

    roles = [
        specs.Role(
            name=r["name"],
            image=r["image"],
            entrypoint=r["entrypoint"],
            args=list(r.get("args", [])),
            env=dict(r.get("env", {})),
            num_replicas=r.get("num_replicas", 1),
            max_retries=r.get("max_retries", 0),
            resource=specs.Resource(
                cpu=r.get("cpu", 1), gpu=r.get("gpu", 0), memMB=r.get("mem_mb", 1024)
            ),
            port_map=dict(r.get("port_map", {})),
            mounts=[mount(m) for m in r.get("mounts", [])],
        )
        for r in spec["roles"]
    ]
    return specs.AppDef(name=spec["name"], roles=roles, metadata=dict(spec.get("metadata", {})))


def _component(name: str, args: list[str]) -> Any:
    from torchx.specs.builders import materialize_appdef
    from torchx.specs.finder import get_component

    return materialize_appdef(get_component(name).fn, args)


def _jsonable(obj: Any) -> Any:
    """docker-py's Mount and DeviceRequest are dicts; the kubernetes client's models go
    through its own serialiser; dataclasses field by field."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Not asdict(): it rebuilds dict subclasses (docker-py's Mount) by calling them.
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if hasattr(obj, "openapi_types"):
        from kubernetes.client import ApiClient

        return ApiClient().sanitize_for_serialization(obj)
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    return repr(obj)


def _request(scheduler: str, req: Any) -> Any:
    if scheduler in ("slurm", "lsf"):
        return {"app_id": getattr(req, "app_id", ""), "script": req.materialize()}
    if scheduler in ("kubernetes", "kubernetes_mcad"):
        from kubernetes.client import ApiClient

        return ApiClient().sanitize_for_serialization(req.resource)
    if scheduler == "aws_batch":
        return {"name": req.name, "queue": req.queue, "share_id": req.share_id,
                "job_def": _jsonable(req.job_def)}  # fmt: skip
    if scheduler == "aws_sagemaker":
        return {"job_name": req.job_name, "job_def": _jsonable(req.job_def)}
    if scheduler == "local_docker":
        return {"app_id": req.app_id, "containers": _jsonable(req.containers)}
    return _jsonable(req)  # local_cwd: the PopenRequest


def dryrun(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Through TorchX's Runner, as `torchx run --dryrun` does: it adds TORCHX_JOB_ID and
    resolves the options' defaults before the scheduler's own dry run."""
    from torchx.runner import get_runner

    scheduler = doc["scheduler"]
    runner = get_runner()
    out = []
    for case in doc["cases"]:
        try:
            if "app" in case:
                app = _appdef(case["app"])
            else:
                app = _component(case["component"], case["args"])
            cfg = dict(case["cfg"])
            if "config_dir" in case:  # as `torchx run` reads .torchxconfig
                from torchx.runner import config

                config.apply(scheduler, cfg, dirs=[case["config_dir"]])
            info = runner.dryrun(app, scheduler, cfg=cfg, workspace=None)
            roles = [r.name for r in app.roles]
            request = _request(scheduler, info.request)
            out.append({"id": case["id"], "roles": roles, "request": request})
        except Exception as e:  # every refusal is a result to compare
            out.append({"id": case["id"], "error": f"{type(e).__name__}: {e}"})
    return out


def _app_dict(app: Any) -> dict[str, Any]:
    """A TorchX AppDef as plain JSON (None fields left out; mounts with their kind)."""
    from torchx import specs

    def mount(m: Any) -> dict[str, Any]:
        kind = type(m).__name__.replace("Mount", "").lower()
        return {"kind": kind, **_jsonable(m)}

    def role(r: Any) -> dict[str, Any]:
        d = {f.name: getattr(r, f.name) for f in dataclasses.fields(r)}
        d["retry_policy"] = r.retry_policy.name
        # TorchX's NULL_RESOURCE (cpu, gpu, memMB -1) is "no resource", txd's unset field.
        null = _jsonable(specs.NULL_RESOURCE)
        d["resource"] = None if _jsonable(r.resource) == null else _jsonable(r.resource)
        d["mounts"] = [mount(m) for m in r.mounts]
        return {k: _jsonable(v) for k, v in d.items() if v is not None}

    return {"name": app.name, "metadata": dict(app.metadata), "roles": [role(r) for r in app.roles]}


def appdefs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for case in doc["cases"]:
        try:
            app = _component(case["component"], case["args"])
            out.append({"id": case["id"], "app": _app_dict(app)})
        except Exception as e:  # a refusal is a result to compare
            out.append({"id": case["id"], "error": f"{type(e).__name__}: {e}"})
    return out


def _type_name(t: Any) -> str:
    if getattr(t, "__origin__", None) is not None:  # List[str], Dict[str, str]
        return str(t).replace("typing.", "")
    return getattr(t, "__name__", None) or str(t)


def runopts(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    from torchx.schedulers import get_scheduler_factories

    factories = get_scheduler_factories()
    out: dict[str, list[dict[str, Any]]] = {}
    for name in doc["schedulers"]:
        opts = factories[name]("torchx").run_opts()
        out[name] = [
            {
                "name": key,
                "type": _type_name(opt.opt_type),
                "default": _jsonable(opt.default),
                "required": opt.is_required,
            }
            for key, opt in opts
        ]
    return out


def main() -> int:
    mode = sys.argv[1]
    doc = json.load(sys.stdin)
    # The SageMaker SDK prints its config notes on stdout: only the result goes there.
    with contextlib.redirect_stdout(sys.stderr):
        result: Any
        if mode == "runopts":
            result = runopts(doc)
        elif mode == "appdef":
            result = appdefs(doc)
        elif "jobs" in doc:  # several schedulers' cases in this one process
            result = {job["scheduler"]: dryrun(job) for job in doc["jobs"]}
        else:
            result = dryrun(doc)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
