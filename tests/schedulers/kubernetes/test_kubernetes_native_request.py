"""`txctl describe --native` after a cancel and the objects' deletion left Kubernetes nothing of
the job: the objects as they were submitted, kept by txd (issue 21)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from k8s_testing import K8S_CFG, Cluster
from txd.v1 import AppDef, AppState
from txd_testing import Daemon, with_name_of

from .test_kubernetes import SCHED, app_name, objects_of, sleeper, wait_running, wait_until_gone

pytestmark = pytest.mark.timeout(240)


async def test_describe_native_after_cancel_and_the_objects_are_deleted(
    k8s_daemon: Daemon, k8s_client: Any, k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    app = AppDef(name="kept", roles=[sleeper("main", replicas=2), sleeper("ps")])
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=K8S_CFG)
    dry = await k8s_client.dryrun(app, scheduler=SCHED, cfg=K8S_CFG)
    await wait_running(k8s_client, handle)
    await k8s_client.cancel(handle)
    assert (await k8s_client.wait(handle, timeout=120)).state == AppState.CANCELLED
    name = app_name(handle)
    # Cancel stopped the pods; the Service (the root) deleted, the garbage collector takes
    # the Jobs: Kubernetes keeps nothing of the job.
    k8s_cluster.kubectl("delete", "service", "-n", k8s_namespace, name)
    wait_until_gone(k8s_cluster, k8s_namespace, name, "services,jobs,pods")
    assert objects_of(k8s_cluster, k8s_namespace, name) == []
    out = k8s_daemon.txctl("describe", "--native", handle, check=True).stdout
    assert out == with_name_of(dry.request, out, "kept")
    docs = list(yaml.safe_load_all(out))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Service", name),
        ("Job", f"{name}-main-0"),
        ("Job", f"{name}-main-1"),
        ("Job", f"{name}-ps-0"),
    ]
    data = json.loads(k8s_daemon.txctl("describe", "--native", "--json", handle).stdout)
    assert data["native"]["text"] == out
    assert data["status"]["state"] == "CANCELLED"
