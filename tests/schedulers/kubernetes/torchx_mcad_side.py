"""TorchX 0.7's own kubernetes_mcad AppWrapper for an app, run in a Python that has torchx and
the `kubernetes` client (TorchX builds its pods with the client's models). Never imported by
txd: test_kubernetes_mcad_torchx.py runs it as a script. Reads one JSON document on stdin:

    {"app": {"name", "roles": [{"name", "image", "entrypoint", "args", "env", "num_replicas",
             "max_retries", "cpu", "gpu", "mem_mb", "port_map", "mounts": [...]}]},
     "cfg": {app_to_resource's keyword arguments but app}}

and prints {"app_id": TorchX's unique app id, "resource": the AppWrapper as JSON}.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _app(spec: dict[str, Any]) -> Any:
    from torchx import specs

    def mount(m: dict[str, Any]) -> Any:
        if m["kind"] == "bind":
            return specs.BindMount(m["src"], m["dst"], m.get("read_only", False))
        return specs.VolumeMount(m["src"], m["dst"], m.get("read_only", False))

    return specs.AppDef(
        name=spec["name"],
        roles=[
            specs.Role(
                name=r["name"],
                image=r["image"],
                entrypoint=r["entrypoint"],
                args=list(r["args"]),
                env=dict(r["env"]),
                num_replicas=r["num_replicas"],
                max_retries=r["max_retries"],
                resource=specs.Resource(cpu=r["cpu"], gpu=r["gpu"], memMB=r["mem_mb"]),
                port_map=dict(r["port_map"]),
                mounts=[mount(m) for m in r["mounts"]],
            )
            for r in spec["roles"]
        ],
    )


def main() -> None:
    from kubernetes.client import ApiClient
    from torchx.schedulers.kubernetes_mcad_scheduler import app_to_resource

    doc = json.load(sys.stdin)
    resource = app_to_resource(app=_app(doc["app"]), **doc["cfg"])
    out = ApiClient().sanitize_for_serialization(resource)
    json.dump({"app_id": out["metadata"]["name"], "resource": out}, sys.stdout)


if __name__ == "__main__":
    main()
