"""kubernetes in Volcano mode (a `queue` given) through a real txd on the real test cluster. Only
Volcano's CRD is installed, not its controller: the test plays the controller (k8s_controller):
it makes the task pods, owned by the Volcano Job, which the kubelet really runs, and moves the
Job's status.state.phase as Volcano would. txd's status must follow each phase.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from k8s_controller import VOLCANO_JOBS, Controller, StatusStream, gated
from k8s_testing import K8S_CFG
from txd.schedulers.kubernetes.client import Kube
from txd.v1 import AppDef, AppState
from txd_testing import read_logs_by_replica

SCHED = "kubernetes"
CFG = {**K8S_CFG, "queue": "default"}

pytestmark = pytest.mark.timeout(240)


def controller(kube: Kube, handle: str) -> Controller:
    ns, name = handle.rsplit("/", 1)[1].split(":")
    return Controller(kube, ns, VOLCANO_JOBS, name)


async def test_pending_running_completed(k8s_client: Any, kube: Kube, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    roles = [gated("v", "trainer", gate, replicas=2), gated("v", "ps", gate, 1)]
    app = AppDef(name="vc", roles=roles)
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=CFG)
    vc = controller(kube, handle)
    job = await vc.get()
    assert [t["name"] for t in job["spec"]["tasks"]] == ["trainer-0", "trainer-1", "ps-0"]
    assert job["spec"]["queue"] == "default"
    async with StatusStream(k8s_client, handle) as statuses:
        first = await statuses.until(AppState.PENDING)  # no phase yet: nothing scheduled
        assert [(r.role, len(r.replicas)) for r in first.roles] == [("trainer", 2), ("ps", 1)]
        await vc.set_status({"state": {"phase": "Pending"}})
        await statuses.until(AppState.PENDING, "phase Pending")
        pods = await vc.volcano_pods()
        assert [p["metadata"]["name"] for p in pods] == [
            f"{vc.name}-trainer-0-0", f"{vc.name}-trainer-1-0", f"{vc.name}-ps-0-0",
        ]  # fmt: skip
        await vc.set_status({"state": {"phase": "Running"}, "running": 3})
        await statuses.replicas(AppState.RUNNING)
        await statuses.until(AppState.RUNNING, "phase Running")
        (gate / "go").touch()
        # Every pod has succeeded, but the app ends only when the controller says so.
        # Every pod succeeded: the app has (no policy restarts a success), before the phase.
        final = await statuses.replicas(AppState.SUCCEEDED)
        assert final.state == AppState.SUCCEEDED, final
        assert final.msg == "Job phase Running", final
        await vc.set_status({"state": {"phase": "Completed"}, "running": 0, "succeeded": 3})
    assert [[r.exit_code for r in role.replicas] for role in final.roles] == [[0, 0], [0]]
    assert (await k8s_client.wait(handle, timeout=30)).state == AppState.SUCCEEDED
    assert await read_logs_by_replica(k8s_client, handle) == {
        "trainer/0": b"v 0\n",
        "trainer/1": b"v 1\n",
        "ps/0": b"v 0\n",
    }


async def test_failed(k8s_client: Any, kube: Kube, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    app = AppDef(name="vcfail", roles=[gated("v", "main", gate, 2, tail='exit "${replica_id}"')])
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=CFG)
    vc = controller(kube, handle)
    async with StatusStream(k8s_client, handle) as statuses:
        await vc.volcano_pods()
        await vc.set_status({"state": {"phase": "Running"}, "running": 2})
        await statuses.replicas(AppState.RUNNING)
        (gate / "go").touch()
        # The failed pod waits for the controller's word (a policy may restart it).
        ended = await statuses.wait(
            lambda s: (
                [(r.state, r.exit_code) for r in s.roles[0].replicas]
                == [(AppState.SUCCEEDED, 0), (AppState.PENDING, 1)]
            ),
            "replica 1 exited 1, awaiting the controller",
        )
        assert ended.state == AppState.PENDING, ended
        await vc.set_status({"state": {"phase": "Failed"}, "running": 0, "failed": 1})
        final = await statuses.until(AppState.FAILED)
    assert final.roles[0].replicas[1].exit_code == 1, final
    assert "main/1 exited with 1" in final.msg, final


async def test_cancel_sets_aborted_and_is_cancelled(
    k8s_client: Any, kube: Kube, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    app = AppDef(name="vccancel", roles=[gated("v", "main", gate, 2)])
    handle = await k8s_client.run(app, scheduler=SCHED, cfg=CFG)
    vc = controller(kube, handle)
    async with StatusStream(k8s_client, handle) as statuses:
        await vc.volcano_pods()
        await vc.set_status({"state": {"phase": "Running"}, "running": 2})
        await statuses.replicas(AppState.RUNNING)
        await k8s_client.cancel(handle)
        # txd asked for Aborted through the status subresource, as TorchX does.
        assert (await vc.get())["status"]["state"]["phase"] == "Aborted"
        # As Volcano: the pods go; the app is over once they have.
        await vc.delete_pods()
        final = await statuses.until(AppState.CANCELLED)
    assert final.msg == "cancelled by request", final
    assert (await k8s_client.wait(handle, timeout=30)).state == AppState.CANCELLED
    assert (await k8s_client.status(handle)).state == AppState.CANCELLED
    (gate / "go").touch()
