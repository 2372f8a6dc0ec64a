"""The apps and schedulers of the compatibility suite: each case is given, as the same app, to
TorchX 0.7's dry run (tests/compat/torchx_side.py, in TorchX's venv) and to txd's (a real
daemon). An app is a builtin component with its arguments (each side resolves it with its own
builtins) or a neutral app spec (a dict both sides turn into their own AppDef)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from txd.v1 import AppDef, BindMount, DeviceMount, Mount, Resource, Role, VolumeMount

IMAGE = "python:3.11-slim"

# Env values and args that quoting gets wrong: a comma (Slurm's --export list), a space, `$`
# (shell and Kubernetes' $(VAR) expansion), a semicolon (TorchX's --env separator).
NASTY_ENV = {
    "COMMA": "a,b",
    "SPACE": "two words",
    "DOLLAR": "$HOME ${USER} $(POD_NAME)",
    "SEMI": "x;y",
}

TWO_ROLE: dict[str, Any] = {
    "name": "tworole",
    "roles": [
        {
            "name": "trainer",
            "image": IMAGE,
            "entrypoint": "python",
            "args": ["-m", "train", "--lr", "0.1", "--note", "two words", "--home", "$HOME"],
            "env": NASTY_ENV,
            "num_replicas": 2,
            "max_retries": 3,
            "cpu": 2,
            "gpu": 1,
            "mem_mb": 2048,
        },
        {
            "name": "ps",
            "image": IMAGE,
            "entrypoint": "python",
            "args": ["-m", "ps"],
            "env": {"ROLE": "ps"},
            "num_replicas": 1,
            "cpu": 1,
            "mem_mb": 512,
            "port_map": {"http": 8080},
        },
    ],
}

# The same values without a GPU, so that every scheduler dry runs them (a GPU needs more of
# some: txd's slurm asks sinfo), with retries and two replicas.
NASTY: dict[str, Any] = {
    "name": "nasty",
    "roles": [
        {
            "name": "worker",
            "image": IMAGE,
            "entrypoint": "python",
            "args": ["-c", "import os; print(os.environ['COMMA'])", "two words", "$HOME"],
            "env": NASTY_ENV,
            "num_replicas": 2,
            "max_retries": 2,
            "mem_mb": 1024,
        }
    ],
}

META: dict[str, Any] = {
    "name": "meta",
    "metadata": {"team": "ml", "cost-center": "42"},
    "roles": [
        {
            "name": "main",
            "image": IMAGE,
            "entrypoint": "python",
            "args": ["main.py", "--epochs", "2"],
            "env": {"A": "1"},
            "max_retries": 1,
        }
    ],
}

MOUNTS: dict[str, Any] = {
    "name": "mounts",
    "roles": [
        {
            "name": "main",
            "image": IMAGE,
            "entrypoint": "ls",
            "args": ["/mnt/data"],
            "mounts": [
                {"kind": "bind", "src": "/data", "dst": "/mnt/data", "read_only": True},
                {"kind": "volume", "src": "cache", "dst": "/mnt/cache"},
                {"kind": "device", "src": "/dev/fuse", "dst": "/dev/fuse"},
            ],
        }
    ],
}


@dataclass(frozen=True)
class App:
    """One app of the grid: `spec` (a neutral app) or `component` with `args`."""

    id: str
    component: str = ""
    args: tuple[str, ...] = ()
    spec: dict[str, Any] = field(default_factory=dict)
    # Schedulers the app is not given to (the reason is in the docs' table intro).
    skip: frozenset[str] = frozenset()

    def torchx_case(self, cfg: dict[str, Any]) -> dict[str, Any]:
        if self.spec:
            return {"id": self.id, "cfg": cfg, "app": self.spec}
        return {"id": self.id, "cfg": cfg, "component": self.component, "args": list(self.args)}


APPS = (
    App("echo", "utils.echo", ("--msg", "hello world")),
    App("sh", "utils.sh", ("echo", "$HOME", "a,b c")),
    App("python", "utils.python", ("--script", "train.py", "--", "--lr", "0.1")),
    # A second script with hyperparameters: SageMaker's framework mode runs only scripts.
    App(
        "python-hp", "utils.python", ("--script", "main.py", "--", "--epochs=3", "--name", "a b,c$")
    ),
    App("touch", "utils.touch", ("--file", "/tmp/done")),
    App("copy", "utils.copy", ("--src", "/tmp/a", "--dst", "/tmp/b")),
    App("booth", "utils.booth", ("--x1", "1.5", "--x2", "2")),
    App("ddp", "dist.ddp", ("-j", "2x2", "--script", "train.py", "--", "--lr", "0.1")),
    App("ddp-module", "dist.ddp", ("-j", "1", "-m", "pkg.main")),
    App(
        "ddp-gpu",
        "dist.ddp",
        ("-j", "2x1", "--gpu", "2", "--max_retries", "2", "--script", "train.py"),
    ),
    App("spmd", "dist.spmd", ("-j", "2x1", "--script", "train.py")),
    App("tensorboard", "metrics.tensorboard", ("--logdir", "/logs")),
    App(
        "torchserve",
        "serve.torchserve",
        ("--model_path", "/m.mar", "--management_api", "http://localhost:8081"),
    ),
    App("tworole", spec=TWO_ROLE),
    App("nasty", spec=NASTY),
    App("meta", spec=META),
    # Mounts only where the scheduler has them (TorchX refuses them or drops them silently).
    App("mounts", spec=MOUNTS, skip=frozenset({"local_cwd", "slurm", "lsf", "aws_sagemaker"})),
)

# The options each scheduler needs for a dry run, the same on both sides; txd's own options
# that keep its dry run from asking a backend (precheck) go in TXD_ONLY_CFG.
SCHEDULERS: dict[str, dict[str, Any]] = {
    "local_cwd": {},
    "local_docker": {},
    "slurm": {},
    "lsf": {},
    "kubernetes": {"queue": "default"},
    "kubernetes_mcad": {},
    "aws_batch": {"queue": "q"},
    "aws_sagemaker": {
        "role": "arn:aws:iam::123456789012:role/sm",
        "instance_type": "ml.m5.xlarge",
        "output_path": "s3://bucket/out",
    },
}
TXD_ONLY_CFG: dict[str, dict[str, Any]] = {
    "slurm": {"precheck": False},
    "lsf": {"precheck": False},
}


def apps_for(scheduler: str) -> list[App]:
    return [a for a in APPS if scheduler not in a.skip]


def txd_appdef(spec: dict[str, Any]) -> AppDef:
    """The neutral app as txd's AppDef."""

    def mount(m: dict[str, Any]) -> Mount:
        if m["kind"] == "bind":
            return Mount(
                bind=BindMount(
                    src_path=m["src"], dst_path=m["dst"], read_only=m.get("read_only", False)
                )
            )
        if m["kind"] == "volume":
            return Mount(
                volume=VolumeMount(
                    src=m["src"], dst_path=m["dst"], read_only=m.get("read_only", False)
                )
            )
        return Mount(
            device=DeviceMount(
                src_path=m["src"], dst_path=m["dst"], permissions=m.get("permissions", "rwm")
            )
        )

    roles = [
        Role(
            name=r["name"],
            image=r["image"],
            entrypoint=r["entrypoint"],
            args=list(r.get("args", [])),
            env=dict(r.get("env", {})),
            num_replicas=r.get("num_replicas", 1),
            max_retries=r.get("max_retries", 0),
            resource=Resource(
                cpu=r.get("cpu", 1), gpu=r.get("gpu", 0), mem_mb=r.get("mem_mb", 1024)
            ),
            port_map=dict(r.get("port_map", {})),
            mounts=[mount(m) for m in r.get("mounts", [])],
        )
        for r in spec["roles"]
    ]
    return AppDef(name=spec["name"], roles=roles, metadata=dict(spec.get("metadata", {})))
