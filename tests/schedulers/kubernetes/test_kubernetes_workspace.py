"""A workspace on kubernetes through a real txd on the real test cluster: the workspace becomes
role 0's image, built on the daemon's `docker_host` (the tests' engine, which is also the
kubelet's), pushed to `image_repo` (the tests' real registry on 127.0.0.1), and pulled from
there by the kubelet (imagePullPolicy Always: a pull from the registry even though the engine
has the image) to run the pod."""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_testing import BUSYBOX
from k8s_testing import K8S_CFG, Cluster, make_k8s_daemon
from txd.v1 import AppDef, AppState, Role
from txd_testing import Daemon, read_logs, remove_tree

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def ws_daemon(k8s_cluster: Cluster, k8s_namespace: str) -> Iterator[Daemon]:
    engine = ["--set", f"kubernetes.docker_host={k8s_cluster.docker_host}"]
    d = make_k8s_daemon(k8s_cluster, k8s_namespace, args=engine)
    try:
        yield d.start()
    finally:
        d.close()
        remove_tree(d.root)


async def test_a_workspace_is_pushed_to_image_repo_and_pulled_by_the_kubelet(
    ws_daemon: Daemon, k8s_cluster: Cluster, docker_registry: Any, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "main.sh").write_text("echo from the workspace\n")
    repo = f"{docker_registry.address}/txd-test/k8s-{uuid.uuid4().hex[:8]}"
    role = Role(name="main", image=BUSYBOX, entrypoint="sh", args=["main.sh"])
    app = AppDef(name="ws", roles=[role])
    cfg = {**K8S_CFG, "image_repo": repo, "image_pull_policy": "Always"}
    async with ws_daemon.client() as c:
        info = await c.dryrun(app, "kubernetes", cfg, workspace=str(ws))
        assert repo in info.workspace, info.workspace
        handle = await c.run(app, "kubernetes", cfg, workspace=str(ws))
        image = (await c.describe(handle)).app.roles[0].image
        assert image.startswith(f"{repo}:"), image
        url = f"http://{docker_registry.address}/v2/{repo.partition('/')[2]}/tags/list"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=30).read())
        assert json.loads(body)["tags"] == [image.rpartition(":")[2]]
        final = await c.wait(handle, timeout=120)
        assert final.state == AppState.SUCCEEDED, final
        assert await read_logs(c, handle) == b"from the workspace\n"
