"""kubernetes_mcad's AppWrapper of workload.codeflare.dev/v1beta1 against TorchX 0.7's own, for
the same app and options, field by field (issue 20, gap 11): TorchX's app_to_resource is called
(torchx_mcad_side.py, in a Python with torchx and the `kubernetes` client: TorchX 0.7's venv of
scripts/torchx-venv, $TXD_TORCHX_VENV, or this one if it has both; else skipped, saying so),
and every field that differs must be one of DIFFERENCES, each txd's on purpose, with its reason.
A new difference, or one that went away, fails. No cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from txd.schedulers.kubernetes.crds import CODEFLARE_V1BETA1, appwrapper_objects
from txd.schedulers.kubernetes.opts import McadOpts
from txd.v1.app_pb2 import AppDef, BindMount, Mount, Resource, Role, VolumeMount

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SIDE = HERE / "torchx_mcad_side.py"
SIDE_TIMEOUT = 120.0
APP_ID = "trainer-bcdfghjklmnp"

# The app on both sides: $ in env and args, every macro, resources, ports, mounts, retries.
APP: dict[str, Any] = {
    "name": "trainer",
    "roles": [
        {
            "name": "trainer",
            "image": "ghcr.io/example/trainer:1",
            "entrypoint": "python",
            "args": ["-m", "train", "--id", "${app_id}", "--rank", "${replica_id}",
                     "--master", "${rank0_env}", "--cost", "$5"],
            "env": {"LOG_LEVEL": "info", "REF": "$(LOG_LEVEL)"},
            "num_replicas": 2,
            "max_retries": 2,
            "cpu": 2,
            "gpu": 1,
            "mem_mb": 3000,
            "port_map": {"c10d": 29500},
            "mounts": [
                {"kind": "bind", "src": "/data", "dst": "/mnt/data", "read_only": True},
                {"kind": "volume", "src": "checkpoints", "dst": "/ckpt"},
            ],
        }
    ],
}  # fmt: skip
CFG: dict[str, Any] = {
    "namespace": "default",
    "service_account": "trainer-sa",
    "image_secret": "regcred",
    "coscheduler_name": "scheduler-plugins-scheduler",
    "priority_class_name": "high",
    "network": "macvlan-conf",
    "priority": 5,
}

POD = "spec.resources.GenericItems[1].generictemplate"
POD1 = "spec.resources.GenericItems[2].generictemplate"
SVC = "spec.resources.GenericItems[3].generictemplate"
PG = "spec.resources.GenericItems[0].generictemplate"
NAMESPACE = "txd posts to the namespace's URL; TorchX also writes it in each object"
OWN_LABEL = "txd's own label (how txd finds, lists and recovers its jobs), beside TorchX's"
NAMES = (
    "txd names pods, containers and hosts with the role: TorchX's <app>-<k> collides across roles"
)
SERVICE = (
    "txd's headless Service: every declared port, named, selected by txd's app-id label; "
    "TorchX's: the last port unnamed, type/sessionAffinity spelled out (their defaults)"
)
EMPTY = "TorchX sends an empty field that txd omits: the same object once defaults apply"
DEFAULT = "TorchX writes readOnly: false, the default, which txd leaves out"
ROLES = "txd's shape annotation on the root (roles and replicas, for status)"

# Every field txd writes otherwise than TorchX (path -> why). Pod fields are listed for pod 0
# and pod 1 alike.
DIFFERENCES: dict[str, str] = {
    "metadata.namespace": NAMESPACE,
    "metadata.annotations": ROLES,
    "metadata.labels": "txd labels the AppWrapper (TorchX's object labels and txd's); TorchX none",
    f"{PG}.metadata.namespace": NAMESPACE,
    f"{SVC}.metadata.namespace": NAMESPACE,
    f"{SVC}.spec.ports[0]": SERVICE,
    f"{SVC}.spec.selector": SERVICE,
    f"{SVC}.spec.sessionAffinity": SERVICE,
    f"{SVC}.spec.type": SERVICE,
    f"{SVC}.status": EMPTY,
    **{f"{PG}.metadata.labels.txd.dev/{k}": OWN_LABEL for k in ("app-id", "scheduler", "session")},
    **{f"{SVC}.metadata.labels.txd.dev/{k}": OWN_LABEL for k in ("app-id", "scheduler", "session")},
}
for pod in (POD, POD1):
    DIFFERENCES.update(
        {
            f"{pod}.metadata.namespace": NAMESPACE,
            f"{pod}.metadata.name": NAMES,
            f"{pod}.spec.hostname": NAMES,
            f"{pod}.spec.containers[0].name": NAMES,
            f"{pod}.spec.containers[0].securityContext": EMPTY,
            f"{pod}.spec.nodeSelector": EMPTY,
            f"{pod}.spec.containers[0].volumeMounts[2].readOnly": DEFAULT,
            **{
                f"{pod}.metadata.labels.txd.dev/{k}": OWN_LABEL
                for k in ("app-id", "scheduler", "session", "role", "replica-id")
            },
        }
    )
# TorchX's pod 1 reaches rank 0 at `<app>-0.<app>` (its host name), txd's at `<role>-0.<app>`.
DIFFERENCES[f"{POD}.spec.containers[0].env[TORCHX_MCAD_TRAINER_0_HOSTS]"] = NAMES
DIFFERENCES[f"{POD1}.spec.containers[0].env[TORCHX_MCAD_TRAINER_0_HOSTS]"] = NAMES


@cache
def torchx_python() -> str:
    """A Python with TorchX 0.7 and the kubernetes client, or "" when there is none."""
    venv = Path(os.environ.get("TXD_TORCHX_VENV") or REPO / ".torchx-venv")
    probe = "import kubernetes, torchx; assert torchx.__version__ == '0.7.0'"
    for python in (venv / "bin" / "python", Path(sys.executable)):
        if (
            python.exists()
            and subprocess.run(
                [str(python), "-c", probe], capture_output=True, timeout=SIDE_TIMEOUT, check=False
            ).returncode
            == 0
        ):
            return str(python)
    return ""


def torchx_resource(cfg: dict[str, Any]) -> dict[str, Any]:
    python = torchx_python()
    if not python:
        pytest.skip(
            "no Python with TorchX 0.7 and the kubernetes client (TorchX builds its pods with "
            "its models): make .torchx-venv with scripts/torchx-venv, or set TXD_TORCHX_VENV"
        )
    out = subprocess.run(
        [python, str(SIDE)],
        input=json.dumps({"app": APP, "cfg": cfg}),
        capture_output=True,
        text=True,
        timeout=SIDE_TIMEOUT,
        check=True,
    )
    doc = json.loads(out.stdout)
    # TorchX draws its own random app id: the same objects would carry txd's.
    return dict(json.loads(json.dumps(doc["resource"]).replace(doc["app_id"], APP_ID)))


def txd_resource(**opts: Any) -> dict[str, Any]:
    (r,) = APP["roles"]
    mounts = [
        Mount(bind=BindMount(src_path="/data", dst_path="/mnt/data", read_only=True)),
        Mount(volume=VolumeMount(src="checkpoints", dst_path="/ckpt")),
    ]
    role = Role(
        name=r["name"], image=r["image"], entrypoint=r["entrypoint"], args=r["args"],
        env=r["env"], num_replicas=r["num_replicas"], max_retries=r["max_retries"],
        resource=Resource(cpu=r["cpu"], gpu=r["gpu"], mem_mb=r["mem_mb"]),
        port_map=r["port_map"], mounts=mounts,
    )  # fmt: skip
    cfg = {k: v for k, v in CFG.items() if k != "namespace"}
    (wrapper,) = appwrapper_objects(
        AppDef(name=APP["name"], roles=[role]),
        APP_ID,
        McadOpts(**cfg, **opts),
        scheduler="kubernetes_mcad",
        session="txd",
        api=CODEFLARE_V1BETA1,
    )
    return wrapper


def fields(obj: Any, path: str = "") -> dict[str, Any]:
    """path -> value of every leaf; env lists keyed by name, other lists by position; an empty
    dict or list is a leaf."""
    if isinstance(obj, dict) and obj:
        return {
            k: v for key, value in obj.items() for k, v in fields(value, _join(path, key)).items()
        }
    if isinstance(obj, list) and obj:
        if path.endswith(".env"):
            return {k: v for e in obj for k, v in fields(e, f"{path}[{e['name']}]").items()}
        return {
            k: v for i, value in enumerate(obj) for k, v in fields(value, f"{path}[{i}]").items()
        }
    return {path: obj}


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def differing(torchx: dict[str, Any], txd: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Paths (cut to the nearest DIFFERENCES entry above them) whose values differ."""
    a, b = fields(torchx), fields(txd)
    out: dict[str, tuple[Any, Any]] = {}
    for path in sorted(set(a) | set(b)):
        if a.get(path, "(absent)") == b.get(path, "(absent)"):
            continue
        key = next(
            (
                p
                for p in DIFFERENCES
                if path == p or path.startswith(p + ".") or path.startswith(p + "[")
            ),
            path,
        )
        out.setdefault(key, (a.get(path, "(absent)"), b.get(path, "(absent)")))
    return out


def test_the_appwrapper_is_torchx_own_but_for_the_listed_differences() -> None:
    """With expand_vars (TorchX's $ handling), every field is TorchX's or a listed difference,
    and every listed difference is real."""
    found = differing(torchx_resource(CFG), txd_resource(expand_vars=True))
    unlisted = {p: v for p, v in found.items() if p not in DIFFERENCES}
    assert unlisted == {}, "fields differing from TorchX's, with no reason listed"
    assert sorted(set(DIFFERENCES) - set(found)) == [], "listed differences that are gone"
    for pod in (POD, POD1):  # the same variable, each side's name for rank 0's host
        hosts = found[f"{pod}.spec.containers[0].env[TORCHX_MCAD_TRAINER_0_HOSTS]"]
        assert hosts == (f"{APP_ID}-0.{APP_ID}", f"trainer-0.{APP_ID}")


def test_by_default_every_dollar_is_passed_on_as_given() -> None:
    """txd's default differs from TorchX's in exactly the strings holding a `$`: doubled."""
    found = differing(torchx_resource(CFG), txd_resource())
    dollars = {p: v for p, v in found.items() if p not in DIFFERENCES}
    assert dollars, "no $ differs: the test app lost its $"
    for torchx_value, txd_value in dollars.values():
        assert isinstance(torchx_value, str) and "$" in torchx_value
        assert txd_value == torchx_value.replace("$", "$$")
