"""kubernetes through a real txd on the real test cluster (Kubernetes 1.20: plain batch/v1 Jobs
under a headless Service): what runs, how it ends, its logs, cancel, delete, a missing image,
the watch across 410 Gone and an apiserver restart, a daemon restart, DryRun, bad options and
list. Every pod uses the node's network and the engine's test images (k8s_testing.K8S_CFG).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from docker_testing import BUSYBOX
from k8s_testing import K8S_CFG, Cluster
from txd.v1 import AppDef, AppState, BindMount, Mount, Role
from txd_testing import Daemon, read_logs, read_logs_by_replica, repeated_statuses, unique

SCHED = "kubernetes"
GONE_TIMEOUT = 90.0  # the garbage collector's removing what a deleted root owned

pytestmark = pytest.mark.timeout(240)


def sh_role(name: str, script: str, replicas: int = 1, image: str = BUSYBOX) -> Role:
    return Role(name=name, image=image, entrypoint="sh", args=["-c", script], num_replicas=replicas)


def app_name(handle: str) -> str:
    """The objects' name of a handle kubernetes://<session>/<namespace>:<name>."""
    return handle.rsplit(":", 1)[1]


def objects_of(cluster: Cluster, ns: str, name: str, kinds: str = "services,jobs,pods") -> Any:
    """The app's objects of these kinds, as kubectl sees them (kind/name)."""
    out = cluster.kubectl(
        "get", kinds, "-n", ns, "-l", f"txd.dev/app-id={name}", "-o", "name"
    ).stdout.split()
    return sorted(out)


def pods_of(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", f"txd.dev/app-id={name}", "-o", "json")
    return list(json.loads(out.stdout)["items"])


def wait_until_gone(cluster: Cluster, ns: str, name: str, kinds: str) -> None:
    """Until kubectl finds none of the app's objects of these kinds (bounded)."""
    left = objects_of(cluster, ns, name, kinds)
    if not left:
        return
    # kubectl wait --for=delete returns as soon as each is gone (a watch, not a poll).
    cluster.kubectl(
        "wait", "--for=delete", f"--timeout={GONE_TIMEOUT:.0f}s", "-n", ns, *left,
        check=False, timeout=GONE_TIMEOUT + 30,
    )  # fmt: skip
    assert objects_of(cluster, ns, name, kinds) == []


async def test_a_two_role_three_replica_app_succeeds_with_real_pods_and_logs(
    k8s_client: Any, k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    app = AppDef(
        name="two",
        roles=[
            sh_role("trainer", 'echo "t ${replica_id} $TORCHX_RANK0_HOST"', replicas=2),
            sh_role("ps", 'echo "p ${replica_id} ${app_id}"'),
        ],
    )
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=K8S_CFG)
    name = app_name(handle)
    assert handle == f"kubernetes://txd/{k8s_namespace}:{name}"
    final = await k8s_client.wait(handle, timeout=120)
    assert final.state == AppState.SUCCEEDED, final
    assert [(r.role, [x.exit_code for x in r.replicas]) for r in final.roles] == [
        ("trainer", [0, 0]),
        ("ps", [0]),
    ]
    assert await read_logs_by_replica(k8s_client, handle) == {
        "trainer/0": b"t 0 localhost\n",
        "trainer/1": f"t 1 trainer-0.{name}\n".encode(),
        "ps/0": f"p 0 {name}\n".encode(),
    }
    # The cluster's own view: a Service, a Job per replica, the pods their controller made.
    assert objects_of(k8s_cluster, k8s_namespace, name) == sorted(
        [f"service/{name}"]
        + [f"job.batch/{name}-{r}" for r in ("trainer-0", "trainer-1", "ps-0")]
        + [f"pod/{p['metadata']['name']}" for p in pods_of(k8s_cluster, k8s_namespace, name)]
    )
    pods = pods_of(k8s_cluster, k8s_namespace, name)
    assert sorted(
        (p["metadata"]["labels"]["txd.dev/role"], p["metadata"]["labels"]["txd.dev/replica-id"])
        for p in pods
    ) == [("ps", "0"), ("trainer", "0"), ("trainer", "1")]
    assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
    assert all(p["spec"]["hostNetwork"] for p in pods)
