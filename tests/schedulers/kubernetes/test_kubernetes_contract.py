"""The contract suite (txd.schedulers.testing) over kubernetes (plain Jobs) on the real test
cluster, over kubernetes in Volcano mode and over kubernetes_mcad, with the test playing
Volcano's and MCAD's controllers.

Each job is a pod of the Python test image running CommandScripts' program on the test's
files, mounted from this host at the same path (hostPath: the kubelet runs pods on this
machine), on the host network; a blocking job waits for its release file there. Volcano's and
MCAD's controllers are not installed: for those two the harness runs the test's own
(k8s_controller.PlayedController), which makes the pods, sets the running phase, and ends the
object when its pods have. The backend is taken down by stopping the apiserver.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_testing import PYTHON
from k8s_controller import APPWRAPPER, VOLCANO, Kind, PlayedController
from k8s_testing import Cluster
from txd.schedulers.api import Job, Scheduler
from txd.schedulers.kubernetes import kubernetes, kubernetes_mcad
from txd.schedulers.kubernetes.client import Kube
from txd.schedulers.testing import CommandScripts, Harness, SchedulerContract, Script, TaskGroupLike
from txd.v1 import AppDef, BindMount, CfgValue, Mount

pytestmark = pytest.mark.timeout(300)


class KubeHarness(Harness):
    # A pod starts in about a second here; the kubelet reports its end within a few.
    timeout = 120.0
    poll_pause = 0.2
    # The container runtime stamps each line (RFC 3339, nanoseconds) as it reads it.
    clock_resolution = 0.01
    utf8_logs = True  # the kubelet reads them through Docker's json-file log driver
    cfg = {"host_network": CfgValue(bool=True), "image_pull_policy": CfgValue(str="IfNotPresent")}

    def __init__(
        self,
        root: Path,
        cluster: Cluster,
        namespace: str,
        module: Any = kubernetes,
        played: Kind | None = None,
        **cfg: CfgValue,
    ) -> None:
        self.root, self.cluster, self.namespace = root, cluster, namespace
        self.module, self.played = module, played
        self.cfg = {**KubeHarness.cfg, **cfg}
        self.scripts = CommandScripts(root, python="python3")
        self.kube: Kube | None = None
        self.controller: asyncio.Task[None] | None = None

    async def scheduler(self, tasks: TaskGroupLike) -> Scheduler[Any, Any]:
        settings = {"kubeconfig": str(self.cluster.kubeconfig), "namespace": self.namespace}
        sched = self.module.create_scheduler("contract", settings=settings)
        await sched.start(tasks)
        if self.played is not None:
            self.kube = await Kube.connect(str(self.cluster.kubeconfig))
            selector = f"txd.dev/scheduler={sched.name},txd.dev/session=contract"
            controller = PlayedController(self.kube, self.namespace, self.played, selector)
            self.controller = tasks.create_task(controller.run(), name="played controller")
        return sched

    async def explain(self, sched: Scheduler[Any, Any], job: Job) -> str:
        name = str(job.native.get("name", ""))
        kinds = "pods" if self.played is None else f"pods,{self.played.resource}"
        shown = await asyncio.to_thread(
            self.cluster.kubectl,
            "get", kinds, "-n", self.namespace, "-l", f"txd.dev/app-id={name}", "-o", "yaml",
            check=False,
        )  # fmt: skip
        out = f"\n--- the backend's objects:\n{shown.stdout}{shown.stderr}"
        if self.controller is not None:
            out += f"\n--- the played controller: {self.controller!r}"
        return out

    def app(self, script: Script) -> AppDef:
        app = self.scripts.app(script)
        role = app.roles[0]
        role.image = PYTHON
        root = str(self.root)
        role.mounts.append(Mount(bind=BindMount(src_path=root, dst_path=root, read_only=True)))
        return app

    async def release(self, sched: Scheduler[Any, Any], app: AppDef, job: Job) -> None:
        self.scripts.release(app)

    def backend_down(self, sched: Scheduler[Any, Any]) -> contextlib.AbstractContextManager[None]:
        @contextlib.contextmanager
        def down() -> Iterator[None]:
            argv = self.cluster.stop_apiserver()
            try:
                yield
            finally:
                self.cluster.start_apiserver(argv)

        return down()

    async def close(self) -> None:
        if self.kube is not None:
            await self.kube.aclose()
        gc.collect()  # a connection left unclosed fails this test, not a later one


@pytest.fixture
def ns(k8s_namespace: str) -> str:
    return k8s_namespace


class TestKubernetes(SchedulerContract):
    @pytest.fixture
    def harness(self, tmp_path: Path, k8s_cluster: Cluster, ns: str) -> Harness:
        return KubeHarness(tmp_path, k8s_cluster, ns)


class TestKubernetesVolcano(SchedulerContract):
    @pytest.fixture
    def harness(self, tmp_path: Path, k8s_cluster: Cluster, ns: str, crds: list[str]) -> Harness:
        return KubeHarness(tmp_path, k8s_cluster, ns, played=VOLCANO, queue=CfgValue(str="default"))


class TestKubernetesMcad(SchedulerContract):
    @pytest.fixture
    def harness(self, tmp_path: Path, k8s_cluster: Cluster, ns: str, crds: list[str]) -> Harness:
        return KubeHarness(tmp_path, k8s_cluster, ns, module=kubernetes_mcad, played=APPWRAPPER)
