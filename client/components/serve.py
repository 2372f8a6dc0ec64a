"""Builtin serving component: torchserve.

Every public function here returning an AppDef is a builtin named `serve.<function>`, built
exactly as TorchX 0.7's `torchx.components.serve` builds it.
"""

from __future__ import annotations

from txd.client.components._common import DEFAULT_IMAGE
from txd.v1 import AppDef, Resource, Role


def torchserve(
    model_path: str,
    management_api: str,
    image: str = DEFAULT_IMAGE,
    params: dict[str, str] | None = None,
    dryrun: bool = False,
) -> AppDef:
    """Registers a model archive with a running TorchServe through its management API.

    The replica serves the archive over HTTP (port 8222, named model-download in the port
    map) and asks TorchServe to register it from there (TorchX's serve app, in the image).

    Args:
        model_path: fsspec URL of the model archive (.mar)
        management_api: URL of the root of TorchServe's management API
            (e.g. http://torchserve:8081)
        image: image holding torchx.apps.serve.serve
        params: registration parameters, KEY=VALUE,... each passed as --KEY VALUE (see
            https://pytorch.org/serve/management_api.html#register-a-model)
        dryrun: start the app but register nothing
    """
    args = ["-m", "torchx.apps.serve.serve", "--model_path", model_path]
    args += ["--management_api", management_api]
    for key, value in (params or {}).items():
        args += [f"--{key}", str(value)]
    if dryrun:
        args.append("--dryrun")
    return AppDef(
        name="torchx-torchserve",
        roles=[
            Role(
                name="worker",
                image=image,
                entrypoint="python",
                num_replicas=1,
                args=args,
                port_map={"model-download": 8222},
                resource=Resource(cpu=1, gpu=0, mem_mb=1024),
            )
        ],
    )
