"""kubernetes with no kubeconfig at all: the in-cluster service account, as a txd running in a
pod finds it, on the real test cluster.

The daemon runs in a mount namespace of its own (unshare) in which
/var/run/secrets/kubernetes.io/serviceaccount holds what the kubelet mounts into a pod: a real
token of a service account (from the apiserver's TokenRequest API), the cluster's CA and the
namespace. KUBERNETES_SERVICE_HOST/PORT name the apiserver on 127.0.0.1 (in a pod they name the
`kubernetes` Service, whose cluster IP the tests may not reach). The account may do only what
its Role allows: the rules the README gives for txd, so a missing one fails this test.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from docker_testing import BUSYBOX
from k8s_testing import K8S_CFG, Cluster
from txd.client import InvalidArgumentError
from txd.v1 import AppDef, AppState, Role
from txd_testing import Daemon, read_logs, remove_tree, short_tmpdir

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None,
        reason="needs root and unshare(1) to give the daemon a pod's service account mount",
    ),
]

SECRETS = "/var/run/secrets/kubernetes.io/serviceaccount"
# What txd's kubernetes scheduler does in its namespace (plain Jobs), as the README lists it.
RBAC = """\
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {name}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {name}}}
rules:
- apiGroups: [""]
  resources: [services]
  verbs: [create, get, list, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [create, get, list, watch, patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {name}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}
subjects: [{{kind: ServiceAccount, name: {name}}}]
"""


def _token(cluster: Cluster, ns: str, account: str) -> str:
    """A token of the account, as a pod's projected service account volume holds it."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    body = cluster.run_dir / f"token-request-{account}.json"
    body.write_text(json.dumps(request))
    path = f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token"
    out = cluster.kubectl("create", "--raw", path, "-f", str(body)).stdout
    return str(json.loads(out)["status"]["token"])


@pytest.fixture
def in_cluster_daemon(k8s_cluster: Cluster, k8s_namespace: str) -> Iterator[Daemon]:
    account = f"txd-{uuid.uuid4().hex[:6]}"
    rbac = k8s_cluster.run_dir / f"rbac-{account}.yaml"
    rbac.write_text(RBAC.format(name=account))
    k8s_cluster.kubectl("apply", "-n", k8s_namespace, "-f", str(rbac))
    root = short_tmpdir("txdi-")
    mount = root / "serviceaccount"
    mount.mkdir()
    (mount / "token").write_text(_token(k8s_cluster, k8s_namespace, account))
    (mount / "namespace").write_text(k8s_namespace)
    shutil.copy(k8s_cluster.ca, mount / "ca.crt")
    server = urlsplit(k8s_cluster.server)
    # A private mount namespace: SECRETS exists for the daemon only, never on this host.
    wrap = (
        f"mkdir -p {SECRETS} && mount -t tmpfs -o size=1m txd-sa {SECRETS} && "
        f'cp {mount}/* {SECRETS}/ && exec "$@"'
    )
    daemon = Daemon(
        root,
        env={
            "KUBECONFIG": "",
            "HOME": str(root / "home"),  # no ~/.kube/config either
            "KUBERNETES_SERVICE_HOST": str(server.hostname),
            "KUBERNETES_SERVICE_PORT": str(server.port),
        },
        prefix=["unshare", "--mount", "--propagation", "private", "sh", "-c", wrap, "sh"],
    )
    try:
        yield daemon.start()
    finally:
        daemon.close()
        remove_tree(root)
        k8s_cluster.kubectl("delete", "-n", k8s_namespace, "-f", str(rbac), check=False)


async def test_a_job_runs_with_the_pods_service_account_and_namespace(
    in_cluster_daemon: Daemon, k8s_namespace: str, k8s_cluster: Cluster
) -> None:
    assert not Path(SECRETS, "token").exists(), "the host must not see the daemon's mount"
    app = AppDef(
        name="incluster",
        roles=[Role(name="main", image=BUSYBOX, entrypoint="sh", args=["-c", "echo inside"])],
    )
    async with in_cluster_daemon.client() as c:
        # No namespace anywhere: the service account's namespace file decides it.
        handle = await c.run(app, scheduler="kubernetes", cfg=K8S_CFG)
        assert handle.startswith(f"kubernetes://txd/{k8s_namespace}:"), handle
        final = await c.wait(handle, timeout=120)
        assert final.state == AppState.SUCCEEDED, final
        assert await read_logs(c, handle) == b"inside\n"
        # list from the backend: its Jobs and pods, though Volcano Jobs are not the account's
        listed = [s.app_handle for s in await c.list("kubernetes", backend=True)]
        assert handle in listed, listed
        # The account's Role does not cover Volcano Jobs: the refusal names what was denied.
        app.name = "incluster-volcano"
        with pytest.raises(InvalidArgumentError) as denied:
            await c.run(app, scheduler="kubernetes", cfg={**K8S_CFG, "queue": "default"})
    assert "forbidden" in str(denied.value).lower(), denied.value
    assert "jobs.batch.volcano.sh" in str(denied.value), denied.value
