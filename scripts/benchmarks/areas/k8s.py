"""k8s: kubernetes on a real single-node cluster of the bench's own (k8s_testing.Cluster, its
kubelet's pods the containers of a docker_testing.Engine): pod end -> client in Wait notified,
submit -> pods Running (`txctl run` against `kubectl create -f`), and in k8s_calls the API
requests while clients watch, next to TorchX's describe polling."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from docker_testing import BUSYBOX, Engine
from k8s_testing import K8S_CFG, Cluster, make_k8s_daemon
from txd.client import AsyncClient
from txd.v1 import AppState
from txd_testing import Daemon

from benchmarks.areas import k8s_calls
from benchmarks.areas.k8s_common import K8S_NS, K8S_SLEEP, K8S_START_TIMEOUT, sleeper
from benchmarks.common import (
    JOB_TIMEOUT,
    fmt_ms,
    fmt_s,
    log,
    median,
    pct,
    txctl_run,
    until_running,
)
from benchmarks.context import Context
from benchmarks.daemons import stop


async def run(ctx: Context) -> None:
    """The engine and cluster are stopped by pid at the end (k8s-down, docker-down)."""
    from txd.schedulers.kubernetes.client import Kube

    res, quick = ctx.res, ctx.quick
    engine = Engine(ctx.base / "docker-run")
    await asyncio.to_thread(engine.start)
    try:
        t0 = time.perf_counter()
        cluster = await asyncio.to_thread(Cluster.start_new, engine.host)
        log(f"k8s: cluster up in {time.perf_counter() - t0:.0f} s at {cluster.server}")
        env = engine.env(KUBECONFIG=str(cluster.kubeconfig))  # txctl's and TorchX's
        try:
            d = ctx.daemons.start(ctx.daemons.adopt(make_k8s_daemon(cluster, K8S_NS)))
            kube = await Kube.connect(str(cluster.kubeconfig))
            try:
                async with AsyncClient(d.socket, timeout=120) as client:
                    with res.section():
                        await _notify(ctx, client, kube, 5 if quick else 20)
                    with res.section():
                        await _latency(ctx, client, kube, cluster, d, env, 3 if quick else 10)
                    with res.section():
                        await k8s_calls.calls(ctx, client, d, cluster, 10.0 if quick else 60.0)
                    with res.section():
                        await k8s_calls.torchx_describe(ctx, client, kube, cluster, env)
            finally:
                await kube.aclose()
                stop(d)
        finally:
            await asyncio.to_thread(cluster.close)
    finally:
        await asyncio.to_thread(engine.stop)


async def _pod_events(kube: Any, name: str) -> AsyncIterator[tuple[str, dict[str, Any], float]]:
    """The app's pods as a watch sees them: (event type, pod, perf_counter when read), the
    current pods first (as ADDED), then each change."""
    path = f"/api/v1/namespaces/{K8S_NS}/pods"
    query = {"watch": "true", "labelSelector": f"txd.dev/app-id={name}"}
    async with kube.stream(path, query, read_timeout=JOB_TIMEOUT) as chunks:
        rest = b""
        async for chunk in chunks:
            seen = time.perf_counter()
            rest += chunk
            *lines, rest = rest.split(b"\n")
            for line in lines:
                if line.strip():
                    event = json.loads(line)
                    yield event["type"], event["object"], seen


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase", ""))


async def _notify(ctx: Context, client: AsyncClient, kube: Any, n: int) -> None:
    """A pod's watch event saying Succeeded (the bench's own watch) -> the client blocked in
    Wait returns: both timed in this process."""
    lags = []
    for i in range(n):
        handle = await client.run(sleeper(f"n{i}", 1), "kubernetes", K8S_CFG, workspace="")
        name = handle.rsplit(":", 1)[1]
        succeeded: asyncio.Future[float | None] = asyncio.get_running_loop().create_future()

        async def watch(name: str = name, fut: asyncio.Future[float | None] = succeeded) -> None:
            first = True
            async for kind, pod, seen in _pod_events(kube, name):
                if kind != "DELETED" and _phase(pod) == "Succeeded":
                    # Succeeded already in the watch's first answer: the moment was missed.
                    fut.set_result(None if first else seen)
                    return
                first = False

        watcher = asyncio.get_running_loop().create_task(watch())
        st = await client.wait(handle, timeout=JOB_TIMEOUT)
        notified = time.perf_counter()
        try:
            event = await asyncio.wait_for(succeeded, 60)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        if st.state != AppState.SUCCEEDED:
            raise RuntimeError(f"{handle} ended {AppState.Name(st.state)}: {st.msg}")
        if event is None:
            raise RuntimeError(f"{handle}: the pod had succeeded before the bench's watch began")
        lags.append(notified - event)
        await client.delete(handle)
    ctx.res.add(
        "kubernetes: pod Succeeded watch event -> client in Wait notified (median)",
        fmt_ms(median(lags) * 1000),
        "<= 20 ms",
        median(lags) <= 0.020,
        note=f"n={n}, p95 {fmt_ms(pct(lags, 95) * 1000)}, max {fmt_ms(max(lags) * 1000)}; "
        "`sleep 1` pods; the event read by the bench's own watch on the pod",
    )


async def _until_pods_running(kube: Any, name: str, count: int) -> float:
    """perf_counter when the bench's watch sees `count` pods of the app all Running."""
    running: set[str] = set()
    async for kind, pod, seen in _pod_events(kube, name):
        pod_name = pod["metadata"]["name"]
        if kind != "DELETED" and _phase(pod) == "Running":
            running.add(pod_name)
        else:
            running.discard(pod_name)
        if len(running) >= count:
            return seen
    raise RuntimeError(f"the watch on {name}'s pods ended before they ran")


async def _latency(
    ctx: Context,
    client: AsyncClient,
    kube: Any,
    cluster: Cluster,
    d: Daemon,
    env: dict[str, str],
    n: int,
) -> None:
    """Submit -> every pod Running: `txctl run` + Watch, against `kubectl create -f` of the
    same objects (txd's DryRun, renamed each time) + the bench's watch on the pods."""
    dry = await client.dryrun(sleeper("kc", 60), "kubernetes", K8S_CFG, workspace="")
    yaml_text = dry.request
    m = re.search(r"txd\.dev/app-id: (\S+)", yaml_text)
    if m is None:
        raise RuntimeError(f"no txd.dev/app-id label in the DryRun:\n{yaml_text}")
    dry_id = m.group(1)
    pods = len(re.findall(r"^kind: Job$", yaml_text, re.MULTILINE))
    txd_times, api_times, kubectl_times = [], [], []
    handles = []
    for i in range(n):
        t0 = time.perf_counter()
        handle = await client.run(sleeper("ka", 60), "kubernetes", K8S_CFG, workspace="")
        await asyncio.wait_for(until_running(client, handle), K8S_START_TIMEOUT)
        api_times.append(time.perf_counter() - t0)
        handles.append(handle)
        await client.cancel(handle)
        await client.wait(handle, timeout=JOB_TIMEOUT)  # every run starts on an idle node

        t0 = time.perf_counter()
        handle = await txctl_run(
            d.socket, env, d.root,
            "-s", "kubernetes", "--workspace", "", "-c",
            "host_network=true,image_pull_policy=IfNotPresent",
            "utils.sh", "--image", BUSYBOX, "--entrypoint", "sh", "--",
            "-c", K8S_SLEEP.format(60),
        )  # fmt: skip
        await asyncio.wait_for(until_running(client, handle), K8S_START_TIMEOUT)
        txd_times.append(time.perf_counter() - t0)
        handles.append(handle)
        await client.cancel(handle)
        await client.wait(handle, timeout=JOB_TIMEOUT)

        # The same objects under a new name (as long as the DryRun's), created by kubectl,
        # and with another scheduler label: txd's watch must not take them for its own apps.
        new_id = f"kc{i}-{os.urandom(8).hex()}"[: len(dry_id)]
        path = d.root / f"kubectl-{i}.yaml"
        path.write_text(
            yaml_text.replace(dry_id, new_id).replace(
                "txd.dev/scheduler: kubernetes", "txd.dev/scheduler: kubectl"
            )
        )
        watcher = asyncio.get_running_loop().create_task(_until_pods_running(kube, new_id, pods))
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        await asyncio.to_thread(cluster.kubectl, "create", "-n", K8S_NS, "-f", str(path))
        running = await asyncio.wait_for(watcher, K8S_START_TIMEOUT)
        kubectl_times.append(running - t0)
        await asyncio.to_thread(
            cluster.kubectl,
            "delete", "-n", K8S_NS, "services,jobs", "-l", f"txd.dev/app-id={new_id}",
            "--wait=false",
        )  # fmt: skip
    for h in handles:
        await client.wait(h, timeout=JOB_TIMEOUT)
        await client.delete(h)
    ratio = median(txd_times) / median(kubectl_times)
    res = ctx.res
    res.add(
        "kubernetes submit -> pods Running, `txctl run` + Watch (median)",
        fmt_s(median(txd_times)),
        note=f"n={n}, p95 {fmt_s(pct(txd_times, 95))}, runs "
        f"{' / '.join(f'{t:.2f}' for t in txd_times)} s; busybox `sleep 60`, plain Job, host "
        "network, image present",
    )
    res.add(
        "`kubectl create -f` (txd's DryRun YAML) + watch until pods Running (median)",
        fmt_s(median(kubectl_times)),
        note=f"n={n}, p95 {fmt_s(pct(kubectl_times, 95))}, runs "
        f"{' / '.join(f'{t:.2f}' for t in kubectl_times)} s; the same Service and Job, renamed",
    )
    res.add(
        "kubernetes submit -> RUNNING seen, AsyncClient.run + Watch (median)",
        fmt_s(median(api_times)),
        note=f"n={n}, runs {' / '.join(f'{t:.2f}' for t in api_times)} s; without the txctl "
        "process",
    )
    res.add(
        "txd / kubectl, submit -> pods Running (medians)",
        f"{ratio:.2f}x",
        "<= 1.15x",
        ratio <= 1.15,
    )
