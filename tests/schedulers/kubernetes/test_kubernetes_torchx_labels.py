"""TorchX 0.7's labels on txd's Kubernetes objects, beside txd's own, without a cluster: every
pod of every shape carries what TorchX's own label functions (torchx.schedulers.kubernetes_
scheduler and kubernetes_mcad_scheduler, called here) give for the same app, role and replica;
every other object TorchX's object labels; values TorchX would send invalid are made valid.
The same labels on a real cluster, selected as a TorchX user would: the _live test file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
import torchx
from k8s_apps import APP_ID, APPWRAPPER_SHAPES, SHAPES, build, two_role_app
from torchx import specs
from torchx.schedulers import kubernetes_mcad_scheduler as torchx_mcad
from torchx.schedulers import kubernetes_scheduler as torchx_k8s
from txd.schedulers import torchx_labels
from txd.schedulers.kubernetes import names
from txd.v1.app_pb2 import AppDef, Role

OWN = ("txd.dev/scheduler", "txd.dev/session", "txd.dev/app-id")
K8S_VERSION = kubernetes_validate.latest_version()


def as_torchx(app: AppDef) -> specs.AppDef:
    """The names TorchX's label functions read (labels depend on nothing else)."""
    roles = [specs.Role(name=r.name, image=r.image) for r in app.roles]
    return specs.AppDef(name=app.name, roles=roles)


def nested(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """obj, then every object wrapped in it (Volcano task templates, AppWrapper items, Job pod
    templates), with its kind: Pod for a template."""
    yield obj
    spec = obj.get("spec", {})
    if obj["kind"] == "Job" and "template" in spec:
        yield {"kind": "Pod", **spec["template"]}
    for task in spec.get("tasks", []):
        yield {"kind": "Pod", **task["template"]}
    for c in spec.get("components", []):
        yield from nested(c["template"])
    for g in spec.get("resources", {}).get("GenericItems", []):
        yield from nested(g["generictemplate"])


def pods(shape: str, app: AppDef) -> list[dict[str, Any]]:
    """Every pod (or pod template) of the shape, in replica order."""
    return [o for top in build(shape, app) for o in nested(top) if o["kind"] == "Pod"]


def replicas(app: AppDef) -> list[tuple[int, int]]:
    return [(i, k) for i, r in enumerate(app.roles) for k in range(max(r.num_replicas, 1))]


def test_txd_writes_the_torchx_version_it_follows() -> None:
    assert torchx_labels.TORCHX_VERSION == torchx.__version__ == "0.7.0"


@pytest.mark.parametrize("shape", ["plain", "volcano"])
def test_every_pod_has_torchx_kubernetes_pod_labels(shape: str) -> None:
    app = two_role_app()
    found = pods(shape, app)
    assert len(found) == len(replicas(app)) == 3
    tapp = as_torchx(app)
    for pod, (i, k) in zip(found, replicas(app), strict=True):
        want = torchx_k8s.pod_labels(tapp, i, tapp.roles[i], k, APP_ID)
        labels = pod["metadata"]["labels"]
        assert {key: labels.get(key) for key in want} == want
        assert labels["txd.dev/role"] == app.roles[i].name
        assert labels["txd.dev/replica-id"] == str(k)
        assert all(labels[key] for key in OWN)


@pytest.mark.parametrize("shape", sorted(APPWRAPPER_SHAPES))
def test_every_appwrapper_item_has_torchx_mcad_labels(shape: str) -> None:
    app = two_role_app()
    tapp = as_torchx(app)
    (wrapper,) = build(shape, app)
    items = list(nested(wrapper))[1:]
    kinds = [o["kind"] for o in items]
    assert kinds == ["PodGroup", "PodGroup", "Pod", "Pod", "Pod", "Service"]
    coscheduler = "scheduler-plugins-scheduler"  # the golden options'
    for pod, (i, k) in zip(items[2:5], replicas(app), strict=True):
        want = torchx_mcad.pod_labels(tapp, i, tapp.roles[i], k, coscheduler, APP_ID)
        labels = pod["metadata"]["labels"]
        assert {key: labels.get(key) for key in want} == want
        assert labels["txd.dev/replica-id"] == str(k)
    for i, group in enumerate(items[:2]):
        want = torchx_mcad.create_pod_group(tapp, tapp.roles[i], i, "ns", APP_ID)
        want_labels = want["generictemplate"]["metadata"]["labels"]
        labels = group["metadata"]["labels"]
        assert {key: labels.get(key) for key in want_labels} == want_labels
    want = torchx_mcad.object_labels(tapp, APP_ID)
    for obj in (wrapper, items[-1]):
        assert {key: obj["metadata"]["labels"].get(key) for key in want} == want


@pytest.mark.parametrize("shape", SHAPES)
def test_every_object_has_torchx_object_labels_and_txds(shape: str) -> None:
    """TorchX's managed-by, name and instance on every object, wrapped ones too; txd's own
    beside them (txd reads only those)."""
    app = two_role_app()
    want = torchx_mcad.object_labels(as_torchx(app), APP_ID)
    objects = [o for top in build(shape, app) for o in nested(top)]
    assert len(objects) > 1
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert {key: labels.get(key) for key in want} == want, obj["kind"]
        assert labels["app.kubernetes.io/managed-by"] == "torchx.pytorch.org"
        assert labels["txd.dev/app-id"] == APP_ID
        assert labels["txd.dev/scheduler"] in ("kubernetes", "kubernetes_mcad")


def test_indexed_pods_carry_all_but_the_replica_id() -> None:
    """An Indexed Job's replicas share one template: no replica id, TorchX's or txd's."""
    app = two_role_app()
    tapp = as_torchx(app)
    templates = pods("indexed", app)
    assert len(templates) == len(app.roles)
    for i, pod in enumerate(templates):
        want = torchx_k8s.pod_labels(tapp, i, tapp.roles[i], 0, APP_ID)
        del want["torchx.pytorch.org/replica-id"]
        labels = pod["metadata"]["labels"]
        assert {key: labels.get(key) for key in want} == want
        assert "torchx.pytorch.org/replica-id" not in labels
        assert "txd.dev/replica-id" not in labels


def test_a_name_no_label_may_hold_is_made_a_valid_value() -> None:
    """TorchX writes names as they are, and the apiserver refuses a job whose app or role name
    is longer than 63 or ends in '_' or '.'; txd writes the longest valid value it can."""
    long_name = "a" * 70 + "_"
    app = AppDef(
        name=long_name,
        roles=[Role(name="worker_", image="busybox", entrypoint="true")],
    )
    objects = build("plain", app)
    pod = objects[1]["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert labels["torchx.pytorch.org/app-name"] == labels["app.kubernetes.io/name"] == "a" * 63
    assert labels["torchx.pytorch.org/role-name"] == "worker"
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("demo", "demo"),
        ("Train.v1_x", "Train.v1_x"),
        ("_x_", "x"),
        ("a" * 64, "a" * 63),
        ("a" * 62 + "_b", "a" * 62),
        ("", ""),
    ],
)
def test_label_value(text: str, value: str) -> None:
    assert names.label_value(text) == value
