"""kubernetes_mcad through a real txd on the real test cluster. Only the AppWrapper CRDs are
installed, not MCAD: the test plays MCAD (k8s_controller): it creates the wrapped Pods and
Service, owned by the AppWrapper, which the kubelet really runs, and moves the AppWrapper through
its phases (v1beta2 status.phase, v1beta1 status.state) as MCAD would. txd's status must follow
each phase, `Completed` included (TorchX crashes on it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_controller import APPWRAPPERS, Controller, StatusStream, gated
from k8s_testing import K8S_CFG, Cluster, sh_role
from txd.schedulers.kubernetes import kubernetes_mcad
from txd.schedulers.kubernetes.client import Kube
from txd.v1 import AppDef, AppState
from txd_testing import read_logs_by_replica, with_name_of

SCHED = "kubernetes_mcad"

pytestmark = pytest.mark.timeout(240)


def controller(kube: Kube, handle: str, version: str) -> Controller:
    ns, name = handle.rsplit("/", 1)[1].split(":")
    return Controller(kube, ns, APPWRAPPERS[version], name)


V1BETA2 = "workload.codeflare.dev/v1beta2"
# (the status field, phases before running, the running phase, the success phase), by API.
FLOWS = {
    V1BETA2: ("phase", ["Suspended", "Resuming"], "Running", "Succeeded"),
    "workload.codeflare.dev/v1beta1": ("state", ["Pending"], "Running", "Completed"),
    "mcad.ibm.com/v1beta1": ("state", ["Pending"], "Running", "Completed"),
}


@pytest.mark.parametrize("version", sorted(FLOWS))
async def test_phases_to_success(k8s_client: Any, kube: Kube, tmp_path: Path, version: str) -> None:
    field, before, running, success = FLOWS[version]
    gate = tmp_path / "gate"
    gate.mkdir()
    app = AppDef(name="aw", roles=[gated("m", "trainer", gate, 2), gated("m", "ps", gate, 1)])
    cfg = {**K8S_CFG, "appwrapper_version": version}
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=cfg)
    aw = controller(kube, handle, version)
    async with StatusStream(k8s_client, handle) as statuses:
        first = await statuses.until(AppState.PENDING)
        assert [(r.role, len(r.replicas)) for r in first.roles] == [("trainer", 2), ("ps", 1)]
        for phase in before:
            await aw.set_status({field: phase})
            await statuses.until(AppState.PENDING, f"phase {phase}")
        made = await aw.appwrapper_items()
        assert [(m["kind"], m["metadata"]["name"]) for m in made] == [
            ("Pod", f"{aw.name}-trainer-0"),
            ("Pod", f"{aw.name}-trainer-1"),
            ("Pod", f"{aw.name}-ps-0"),
            ("Service", aw.name),
        ]
        await aw.set_status({field: running})
        await statuses.replicas(AppState.RUNNING)
        await statuses.until(AppState.RUNNING, f"phase {running}")
        (gate / "go").touch()
        # Every pod succeeded: so has the app (MCAD resets only failures), before the phase.
        final = await statuses.replicas(AppState.SUCCEEDED)
        assert final.state == AppState.SUCCEEDED, final
        assert final.msg == f"AppWrapper phase {running}", final
        await aw.set_status({field: success})
    assert (await k8s_client.wait(handle, timeout=30)).state == AppState.SUCCEEDED
    assert await read_logs_by_replica(k8s_client, handle) == {
        "trainer/0": b"m 0\n",
        "trainer/1": b"m 1\n",
        "ps/0": b"m 0\n",
    }


@pytest.mark.parametrize("version", sorted(FLOWS))
async def test_failed(k8s_client: Any, kube: Kube, tmp_path: Path, version: str) -> None:
    field = FLOWS[version][0]
    gate = tmp_path / "gate"
    gate.mkdir()
    app = AppDef(name="awfail", roles=[gated("m", "main", gate, 2, tail='exit "${replica_id}7"')])
    cfg = {**K8S_CFG, "appwrapper_version": version}
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=cfg)
    aw = controller(kube, handle, version)
    async with StatusStream(k8s_client, handle) as statuses:
        await aw.appwrapper_items()
        await aw.set_status({field: "Running"})
        await statuses.replicas(AppState.RUNNING)
        (gate / "go").touch()
        # Both pods failed; they wait for the controller's word (MCAD may reset the app).
        await statuses.wait(
            lambda s: (
                [(r.state, r.exit_code) for r in s.roles[0].replicas]
                == [(AppState.PENDING, 7), (AppState.PENDING, 17)]
            ),
            "both replicas exited, awaiting the controller",
        )
        await aw.set_status({field: "Failed"})
        final = await statuses.until(AppState.FAILED)
    assert [r.exit_code for r in final.roles[0].replicas] == [7, 17], final
    assert "main/1 exited with 17" in final.msg, final


@pytest.mark.parametrize("version", sorted(FLOWS))
async def test_cancel_deletes_the_pods_and_is_cancelled(
    k8s_client: Any, k8s_cluster: Cluster, kube: Kube, tmp_path: Path, version: str
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    app = AppDef(name="awcancel", roles=[gated("m", "main", gate, 2)])
    cfg = {**K8S_CFG, "appwrapper_version": version}
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=cfg)
    aw = controller(kube, handle, version)
    async with StatusStream(k8s_client, handle) as statuses:
        await aw.appwrapper_items()
        await aw.set_status({FLOWS[version][0]: "Running"})
        await statuses.replicas(AppState.RUNNING)
        await k8s_client.cancel(handle)
        final = await statuses.until(AppState.CANCELLED)
    assert final.msg == "cancelled by request", final
    wrapper = await aw.get()
    assert wrapper["apiVersion"] == version
    assert wrapper["metadata"]["annotations"]["txd.dev/cancelled"] == "true"
    # Only the AppWrapper controller (v1beta2) has a switch that stops it making pods.
    assert wrapper["spec"].get("suspend", False) == (version == V1BETA2)
    # txd deleted the pods itself (MCAD has no cancel); the wrapper stays as the record.
    pods = k8s_cluster.kubectl(
        "get", "pods", "-n", aw.ns, "-l", f"txd.dev/app-id={aw.name}", "-o", "name"
    ).stdout.split()
    if pods:
        k8s_cluster.kubectl(
            "wait", "--for=delete", "--timeout=90s", "-n", aw.ns, *pods, timeout=120
        )
    assert (await k8s_client.status(handle)).state == AppState.CANCELLED


async def test_dryrun_uses_the_api_the_cluster_serves(k8s_client: Any) -> None:
    """No appwrapper_version: the API the cluster serves (GET /apis), with no assumption
    noted; here one CRD serves both workload.codeflare.dev versions: the preferred, v1beta2."""
    app = AppDef(name="awdry", roles=[sh_role("main", "true")])
    info = await k8s_client.dryrun(app, scheduler=SCHED, cfg=K8S_CFG)
    assert "could not be asked" not in info.request, info.request
    (wrapper,) = yaml.safe_load_all(info.request)
    assert wrapper["apiVersion"] == V1BETA2
    cfg = {**K8S_CFG, "appwrapper_version": "workload.codeflare.dev/v1beta1"}
    (wrapper,) = yaml.safe_load_all(
        (await k8s_client.dryrun(app, scheduler=SCHED, cfg=cfg)).request
    )
    assert wrapper["apiVersion"] == "workload.codeflare.dev/v1beta1"


async def test_list_names_each_app_once_across_the_versions_of_one_crd(
    k8s_client: Any, k8s_cluster: Cluster, k8s_namespace: str, crds: list[str]
) -> None:
    """Both workload.codeflare.dev versions list every AppWrapper of the group (one CRD): list
    reports each app once, whichever version made it."""
    handles = [
        await k8s_client.run(
            AppDef(name="awlist", roles=[sh_role("main", "true")]),
            scheduler=SCHED,
            cfg={**K8S_CFG, "appwrapper_version": version},
        )
        for version in (V1BETA2, "workload.codeflare.dev/v1beta1")
    ]
    app_ids = [h.rsplit("/", 1)[1] for h in handles]
    settings = {"kubeconfig": str(k8s_cluster.kubeconfig), "namespace": k8s_namespace}
    sched = kubernetes_mcad.create_scheduler("list", settings=settings)
    try:
        listed = [s.app_id for s in await sched.list()]
    finally:
        await sched.aclose()
        for handle in handles:
            await k8s_client.delete(handle)
    assert [listed.count(a) for a in app_ids] == [1, 1], listed


async def test_delete_removes_the_wrapper_and_what_it_wrapped(
    k8s_client: Any, k8s_cluster: Cluster, kube: Kube, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    app = AppDef(name="awdelete", roles=[gated("m", "main", gate, 1)])
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=K8S_CFG)
    aw = controller(kube, handle, V1BETA2)  # discovery: the preferred version of the CRD
    async with StatusStream(k8s_client, handle) as statuses:
        await aw.appwrapper_items()
        await statuses.replicas(AppState.RUNNING)
    await k8s_client.delete(handle)
    kinds = "appwrappers.workload.codeflare.dev,services,pods"
    left = k8s_cluster.kubectl(
        "get", kinds, "-n", aw.ns, "-l", f"txd.dev/app-id={aw.name}", "-o", "name"
    ).stdout.split()
    if left:
        k8s_cluster.kubectl(
            "wait", "--for=delete", "--timeout=90s", "-n", aw.ns, *left, check=False, timeout=120
        )
    assert (
        k8s_cluster.kubectl(
            "get", kinds, "-n", aw.ns, "-l", f"txd.dev/app-id={aw.name}", "-o", "name"
        ).stdout.split()
        == []
    )
    (gate / "go").touch()


async def test_describe_native_is_the_appwrapper_submitted_after_it_is_gone(
    k8s_daemon: Any, k8s_client: Any, k8s_cluster: Cluster, kube: Kube
) -> None:
    """txd keeps the AppWrapper it created (issue 21), equal to DryRun's but for the drawn
    name, also once the wrapper was deleted outside txd."""
    app = AppDef(name="awkept", roles=[sh_role("main", "true", replicas=2)])
    cfg = {**K8S_CFG, "appwrapper_version": V1BETA2}
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=cfg)
    dry = await k8s_client.dryrun(app, scheduler=SCHED, cfg=cfg)
    aw = controller(kube, handle, V1BETA2)
    try:
        assert (await aw.get())["metadata"]["name"] == aw.name
        k8s_cluster.kubectl("delete", "appwrappers.workload.codeflare.dev", "-n", aw.ns, aw.name)
        out = k8s_daemon.txctl("describe", "--native", handle, check=True).stdout
        assert out == with_name_of(dry.request, out, "awkept")
        (wrapper,) = yaml.safe_load_all(out)
        assert (wrapper["kind"], wrapper["metadata"]["name"]) == ("AppWrapper", aw.name)
    finally:
        await k8s_client.delete(handle)
