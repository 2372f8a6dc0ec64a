"""The fixed app the Kubernetes object tests build from (importable as `k8s_apps`): two roles,
three replicas in all, with resources, env, mounts, ports and retries; and the options the
golden YAML (tests/schedulers/kubernetes/golden) was rendered with."""

from __future__ import annotations

from typing import Any

from txd.schedulers.kubernetes.crds import appwrapper_objects, volcano_objects
from txd.schedulers.kubernetes.objects import indexed_objects, plain_objects
from txd.schedulers.kubernetes.opts import KubernetesOpts, McadOpts
from txd.v1.app_pb2 import AppDef, BindMount, DeviceMount, Mount, Resource, Role, VolumeMount

APP_ID = "demo-bcdfghjklmnp"
SCHEDULER = "kubernetes"
SESSION = "txd"
# Every shape, by the name of its golden file (tests/schedulers/kubernetes/golden/<shape>.yaml).
SHAPES = (
    "plain",
    "indexed",
    "volcano",
    "appwrapper-v1beta2",
    "appwrapper-codeflare-v1beta1",
    "appwrapper-mcad-v1beta1",
)
# The AppWrapper shapes' APIs.
APPWRAPPER_SHAPES = {
    "appwrapper-v1beta2": "workload.codeflare.dev/v1beta2",
    "appwrapper-codeflare-v1beta1": "workload.codeflare.dev/v1beta1",
    "appwrapper-mcad-v1beta1": "mcad.ibm.com/v1beta1",
}
EFA = "vpc.amazonaws.com/efa"


def two_role_app(image: str = "ghcr.io/example/trainer:1") -> AppDef:
    """Role 0 has a '-' in its name (Volcano's env name for it differs from TorchX's guess),
    role 1 a '_' (dropped in Kubernetes names, as TorchX does)."""
    trainer = Role(
        name="trainer-main",
        image=image,
        entrypoint="python",
        args=[
            "-m",
            "train",
            "--id",
            "${app_id}",
            "--rank",
            "${replica_id}",
            "--master",
            "${rank0_env}",
        ],
        env={"LOG_LEVEL": "info", "POD_IP": "[FIELD_PATH]status.podIP"},
        num_replicas=2,
        max_retries=2,
        resource=Resource(
            cpu=2,
            gpu=1,
            mem_mb=3000,
            devices={EFA: 1},
            capabilities={"node.kubernetes.io/instance-type": "p3.2xlarge"},
        ),
        port_map={"c10d": 29500},
        mounts=[
            Mount(bind=BindMount(src_path="/data", dst_path="/mnt/data", read_only=True)),
            Mount(volume=VolumeMount(src="checkpoints", dst_path="/ckpt")),
            Mount(device=DeviceMount(src_path="/dev/fuse", permissions="r")),
        ],
    )
    reader = Role(
        name="data_reader",
        image=image,
        entrypoint="sh",
        args=["-c", "echo reader ${replica_id} of ${app_id}"],
        env={"SHARD": "${replica_id}"},
        max_retries=1,
        retry_policy=Role.RetryPolicy.ROLE,
        resource=Resource(cpu=1, mem_mb=512),
        port_map={"tensorboard": 6006},
    )
    return AppDef(name="demo", roles=[trainer, reader])


def k8s_opts(**kw: object) -> KubernetesOpts:
    base: dict[str, object] = {
        "service_account": "trainer-sa",
        "priority_class": "high",
        "image_pull_policy": "IfNotPresent",
        "image_secret": "regcred",
        "node_selector": {"disk": "ssd"},
        "tolerations": ["gpu=true:NoSchedule", "spot:NoExecute"],
        "host_network": True,
    }
    return KubernetesOpts(**{**base, **kw})  # type: ignore[arg-type]


def mcad_opts(**kw: object) -> McadOpts:
    base: dict[str, object] = {
        "service_account": "trainer-sa",
        "priority_class_name": "high",
        "image_pull_policy": "IfNotPresent",
        "image_secret": "regcred",
        "coscheduler_name": "scheduler-plugins-scheduler",
        "network": "macvlan-conf",
        "host_network": True,
    }
    return McadOpts(**{**base, **kw})  # type: ignore[arg-type]


def build(shape: str, app: AppDef, **kw: object) -> list[dict[str, Any]]:
    """The objects of one shape for app, with the golden options (kw overrides them)."""
    common: dict[str, Any] = {"scheduler": SCHEDULER, "session": SESSION}
    if shape == "plain":
        return plain_objects(app, APP_ID, k8s_opts(**kw), **common)
    if shape == "indexed":
        return indexed_objects(app, APP_ID, k8s_opts(**kw), **common)
    if shape == "volcano":
        return volcano_objects(app, APP_ID, k8s_opts(**{"queue": "default", **kw}), **common)
    api = APPWRAPPER_SHAPES[shape]
    if api.endswith("/v1beta1"):
        kw = {"priority": 5, **kw}
    opts = mcad_opts(**{"appwrapper_version": api, **kw})
    return appwrapper_objects(app, APP_ID, opts, **{**common, "scheduler": "kubernetes_mcad"})
