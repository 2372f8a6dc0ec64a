"""The real apiserver (Kubernetes 1.20) takes every shape txd builds: the CRDs of Volcano and
MCAD install, and each shape's objects are created for real in a namespace of their own (the
test plays Volcano's and MCAD's controllers: it creates the pods and Service they would), then
the namespace is deleted. The pods ask for a GPU the node lacks, so none of them runs."""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from docker_testing import BUSYBOX
from k8s_apps import APP_ID, APPWRAPPER_SHAPES, build, two_role_app
from k8s_testing import Cluster
from txd.schedulers.kubernetes.objects import owned, render_yaml

PODS_TIMEOUT = 60.0  # the job controller's creating the plain Jobs' pods


@pytest.fixture(scope="module")
def crds(k8s_cluster: Cluster) -> list[str]:
    return k8s_cluster.install_crds()


@pytest.fixture
def ns(k8s_cluster: Cluster, crds: list[str]) -> Iterator[str]:
    name = f"txd-objs-{uuid.uuid4().hex[:8]}"
    k8s_cluster.kubectl("create", "namespace", name)
    # Pods naming a PriorityClass that does not exist are refused (Priority admission).
    k8s_cluster.kubectl("create", "priorityclass", name, "--value=1000")
    try:
        yield name
    finally:
        k8s_cluster.kubectl("delete", "namespace", name, "--timeout=120s", timeout=150)
        k8s_cluster.kubectl("delete", "priorityclass", name)


def _create(cluster: Cluster, ns: str, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Creates the objects in order (kubectl create: the apiserver validates each); returns
    them as the apiserver stored them."""
    out = []
    for obj in objects:
        path = cluster.run_dir / f"object-{uuid.uuid4().hex[:8]}.yaml"
        path.write_text(render_yaml([obj]))
        out.append(
            json.loads(cluster.kubectl("create", "-n", ns, "-o", "json", "-f", str(path)).stdout)
        )
    return out


def _app() -> Any:
    return two_role_app(image=BUSYBOX)


def _opts(ns: str, shape: str) -> dict[str, Any]:
    key = "priority_class_name" if shape.startswith("appwrapper") else "priority_class"
    return {key: ns, "image_pull_policy": "Never"}


def test_crds_install_and_reinstall(k8s_cluster: Cluster, crds: list[str]) -> None:
    assert sorted(crds) == [
        "appwrappers.mcad.ibm.com",
        "appwrappers.workload.codeflare.dev",
        "jobs.batch.volcano.sh",
    ]
    assert sorted(k8s_cluster.install_crds()) == sorted(crds)  # idempotent
    kinds = k8s_cluster.kubectl("api-resources", "-o", "name").stdout.split()
    assert {"jobs.batch.volcano.sh", "appwrappers.workload.codeflare.dev"} <= set(kinds)


def test_jobs_and_service_owned_by_the_root(k8s_cluster: Cluster, ns: str) -> None:
    root, *rest = build("plain", _app(), **_opts(ns, "plain"))
    (created_root,) = _create(k8s_cluster, ns, [root])
    uid = created_root["metadata"]["uid"]
    created = _create(k8s_cluster, ns, owned([root, *rest], root, uid))
    assert [c["metadata"]["name"] for c in created] == [o["metadata"]["name"] for o in rest]
    for c in created:
        (ref,) = c["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("Service", APP_ID, uid)
        assert c["metadata"]["labels"]["txd.dev/app-id"] == APP_ID
    # The job controller makes their pods: the templates pass pod validation and admission.
    deadline = time.monotonic() + PODS_TIMEOUT
    pods: list[str] = []
    while len(pods) < len(rest) and time.monotonic() < deadline:
        selector = f"txd.dev/app-id={APP_ID}"
        pods = k8s_cluster.kubectl(
            "get", "pods", "-n", ns, "-l", selector, "-o", "name"
        ).stdout.split()
        time.sleep(0.2)
    assert len(pods) == len(rest), pods


def test_indexed_jobs_are_not_for_1_20(k8s_cluster: Cluster, ns: str) -> None:
    """Why the scheduler picks the shape by server version: 1.20's schema has no
    completionMode (the indexed shape is checked against current schemas instead)."""
    service, job, _ = build("indexed", _app(), **_opts(ns, "indexed"))
    _create(k8s_cluster, ns, [service])
    path = k8s_cluster.run_dir / f"indexed-{ns}.yaml"
    path.write_text(render_yaml([job]))
    proc = k8s_cluster.kubectl("create", "-n", ns, "-f", str(path), check=False)
    assert proc.returncode != 0 and 'unknown field "completionMode"' in proc.stderr, proc


def test_volcano_job_and_its_task_pods(k8s_cluster: Cluster, ns: str) -> None:
    (job,) = build("volcano", _app(), **_opts(ns, "volcano"))
    (created,) = _create(k8s_cluster, ns, [job])
    assert created["spec"] == job["spec"]  # the permissive CRD keeps every field
    # As Volcano's controller: a pod per task, named <job>-<task>-<index>.
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            **task["template"],
            "metadata": {"name": f"{APP_ID}-{task['name']}-0", **task["template"]["metadata"]},
        }
        for task in job["spec"]["tasks"]
    ]
    made = _create(k8s_cluster, ns, pods)
    assert [p["metadata"]["name"] for p in made] == [
        f"{APP_ID}-trainer-main-0-0",
        f"{APP_ID}-trainer-main-1-0",
        f"{APP_ID}-datareader-0-0",
    ]


@pytest.mark.parametrize("shape", sorted(APPWRAPPER_SHAPES))
def test_appwrapper_and_what_it_wraps(k8s_cluster: Cluster, ns: str, shape: str) -> None:
    (aw,) = build(shape, _app(), **_opts(ns, shape))
    (created,) = _create(k8s_cluster, ns, [aw])
    assert created["apiVersion"] == aw["apiVersion"]
    want = copy.deepcopy(aw["spec"])
    if shape == "appwrapper-codeflare-v1beta1":
        # MCAD's published schema: nothing txd writes is pruned, and these are defaulted.
        want["schedulingSpec"]["requeuing"].update(forcefulDeletionAfterSeconds=0, numRequeuings=0)
    assert created["spec"] == want
    if "components" in aw["spec"]:
        inner = [c["template"] for c in aw["spec"]["components"]]
    else:
        inner = [g["generictemplate"] for g in aw["spec"]["resources"]["GenericItems"]]
    # As MCAD: the wrapped Pods and Service (PodGroups need the coscheduler's CRD: left out).
    wrapped = [o for o in inner if o["kind"] != "PodGroup"]
    made = _create(k8s_cluster, ns, wrapped)
    assert [(m["kind"], m["metadata"]["name"]) for m in made] == [
        ("Pod", f"{APP_ID}-trainer-main-0"),
        ("Pod", f"{APP_ID}-trainer-main-1"),
        ("Pod", f"{APP_ID}-datareader-0"),
        ("Service", APP_ID),
    ]
    assert made[1]["spec"]["hostname"] == "trainer-main-1"
    assert made[1]["spec"]["subdomain"] == APP_ID
