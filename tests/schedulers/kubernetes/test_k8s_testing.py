"""The test cluster itself: a Job goes through the real apiserver, scheduler, job controller
and kubelet, runs as a container on the session's dockerd, and its log reads back through
the apiserver (apiserver -> kubelet by hostname -> dockershim)."""

from __future__ import annotations

import uuid
from typing import Any

from docker_testing import BUSYBOX
from k8s_testing import Cluster
from kubernetes_asyncio import client, config, watch

NS = "default"


async def test_job_runs_to_completion_and_its_log_reads_back(k8s_cluster: Cluster) -> None:
    name = f"hello-{uuid.uuid4().hex[:8]}"
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "hostNetwork": True,
                    "containers": [
                        {
                            "name": "main",
                            "image": BUSYBOX,
                            "imagePullPolicy": "Never",
                            "env": [{"name": "WHO", "value": name}],
                            "command": ["sh", "-c", 'echo "job $WHO ran"; echo to-stderr >&2'],
                        }
                    ],
                }
            },
        },
    }
    api = await config.new_client_from_config(config_file=str(k8s_cluster.kubeconfig))
    async with api:
        batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
        await batch.create_namespaced_job(NS, job)
        try:
            status = None
            async with watch.Watch() as w:
                async for event in w.stream(
                    batch.list_namespaced_job,
                    NS,
                    field_selector=f"metadata.name={name}",
                    timeout_seconds=90,
                ):
                    status = event["object"].status
                    if status.succeeded or status.failed:
                        break
            assert status is not None and status.succeeded == 1, status
            pods = await core.list_namespaced_pod(NS, label_selector=f"job-name={name}")
            assert [p.status.phase for p in pods.items] == ["Succeeded"]
            pod = pods.items[0]
            assert pod.spec.node_name
            log = await core.read_namespaced_pod_log(pod.metadata.name, NS)
            # Both streams, each line whole; their order is not kept (a copier per stream).
            assert sorted(log.splitlines()) == sorted([f"job {name} ran", "to-stderr"])
        finally:
            await batch.delete_namespaced_job(name, NS, propagation_policy="Background")
