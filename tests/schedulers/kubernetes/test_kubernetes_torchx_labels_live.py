"""TorchX's label selectors find txd's jobs on the real test cluster, as a TorchX user's kubectl
(or quota rule) would: apps submitted through a real txd, their pods, Jobs and Service listed by
`kubectl get -l` with TorchX 0.7's labels only (the labels themselves, against TorchX's own
functions: test_kubernetes_torchx_labels.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from k8s_testing import K8S_CFG, Cluster, sh_role
from txd.schedulers.kubernetes.client import Kube
from txd.v1 import AppDef, AppState
from txd_testing import unique

SCHED = "kubernetes"
TORCHX = "app.kubernetes.io/managed-by=torchx.pytorch.org"

pytestmark = pytest.mark.timeout(240)


def app_id_of(handle: str) -> str:
    return handle.rsplit(":", 1)[1]


def select(cluster: Cluster, ns: str, kinds: str, selector: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", kinds, "-n", ns, "-l", selector, "-o", "json")
    return list(json.loads(out.stdout)["items"])


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"]["labels"])


async def test_torchx_selectors_find_the_pods_jobs_and_service(
    k8s_client: Any, k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    name = unique("tx-labels")
    app = AppDef(name=name, roles=[sh_role("trainer", "true", replicas=2), sh_role("ps", "true")])
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=K8S_CFG)
    app_id = app_id_of(handle)
    assert (await k8s_client.wait(handle, timeout=120)).state == AppState.SUCCEEDED
    ns = k8s_namespace
    pods = select(k8s_cluster, ns, "pods", f"{TORCHX},torchx.pytorch.org/app-name={name}")
    got = sorted(
        (
            labels(p)["torchx.pytorch.org/role-name"],
            labels(p)["torchx.pytorch.org/replica-id"],
            labels(p)["torchx.pytorch.org/role-index"],
            labels(p)["torchx.pytorch.org/version"],
        )
        for p in pods
    )
    assert got == [
        ("ps", "0", "1", "0.7.0"),
        ("trainer", "0", "0", "0.7.0"),
        ("trainer", "1", "0", "0.7.0"),
    ]
    # The same pods as txd's own label finds (txd's labels are still there).
    own = select(k8s_cluster, ns, "pods", f"txd.dev/app-id={app_id}")
    assert sorted(p["metadata"]["name"] for p in own) == sorted(p["metadata"]["name"] for p in pods)
    one = select(
        k8s_cluster,
        ns,
        "pods",
        f"app.kubernetes.io/instance={app_id},torchx.pytorch.org/role-name=trainer,"
        "torchx.pytorch.org/replica-id=1",
    )
    assert [labels(p)["txd.dev/replica-id"] for p in one] == ["1"]
    others = select(
        k8s_cluster, ns, "services,jobs", f"{TORCHX},app.kubernetes.io/instance={app_id}"
    )
    assert sorted(f"{o['kind']}/{o['metadata']['name']}" for o in others) == [
        f"Job/{app_id}-ps-0",
        f"Job/{app_id}-trainer-0",
        f"Job/{app_id}-trainer-1",
        f"Service/{app_id}",
    ]
    assert {labels(o)["app.kubernetes.io/name"] for o in others} == {name}


async def test_a_name_longer_than_a_label_value_runs_and_is_selected_by_its_cut_value(
    k8s_client: Any, k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    """The apiserver refuses TorchX's request for such an app (it writes the name as is); txd
    writes its first 63 characters, with the '_' that would end it dropped."""
    name = f"{unique('tx')}{'x' * 51}__{'y' * 10}"  # character 63 is a '_'
    cut = name[:62]
    assert name[62] == "_" and len(name) == 74
    app = AppDef(name=name, roles=[sh_role("main", "true")])
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=K8S_CFG)
    assert (await k8s_client.wait(handle, timeout=120)).state == AppState.SUCCEEDED
    pods = select(k8s_cluster, k8s_namespace, "pods", f"torchx.pytorch.org/app-name={cut}")
    assert [labels(p)["txd.dev/app-id"] for p in pods] == [app_id_of(handle)]
    assert labels(pods[0])["app.kubernetes.io/name"] == cut


async def test_a_volcano_job_is_selected_by_torchx_labels(
    k8s_client: Any, kube: Kube, k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    """The Volcano Job as the apiserver stores it (its controller, absent here, makes pods from
    the task templates: their labels are the offline tests')."""
    name = unique("tx-vc")
    app = AppDef(name=name, roles=[sh_role("trainer", "true", replicas=2)])
    handle = await k8s_client.run(app, scheduler=SCHED, cfg={**K8S_CFG, "queue": "default"})
    app_id = app_id_of(handle)
    try:
        jobs = select(
            k8s_cluster,
            k8s_namespace,
            "jobs.batch.volcano.sh",
            f"{TORCHX},app.kubernetes.io/instance={app_id},app.kubernetes.io/name={name}",
        )
        assert [j["metadata"]["name"] for j in jobs] == [app_id]
        tasks = jobs[0]["spec"]["tasks"]
        assert [labels(t["template"])["torchx.pytorch.org/replica-id"] for t in tasks] == [
            "0",
            "1",
        ]
    finally:
        await k8s_client.delete(handle)
