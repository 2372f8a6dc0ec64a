"""The kubernetes area's request counts: API requests per minute while 1, 10 and 100 clients
watch 10 and 100 jobs (txd's own count and the apiserver's /metrics), and what one TorchX
KubernetesScheduler.describe costs the apiserver."""

from __future__ import annotations

import asyncio
import contextlib
import math
import ssl
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
from k8s_testing import K8S_CFG, Cluster
from txd.client import AsyncClient
from txd_testing import Daemon

from benchmarks.areas.k8s_common import K8S_NS, K8S_START_TIMEOUT, sleeper, until_running_all
from benchmarks.common import CLI_TIMEOUT, JOB_TIMEOUT, log
from benchmarks.context import Context
from benchmarks.torchx import TORCHX_WAIT_INTERVAL, ensure_torchx_kubernetes, torchx_version
from benchmarks.watching import watch_window

K8S_INFORMERS = 2  # pods and batch/v1 jobs of the namespace
K8S_PROBE_SECONDS = 10.0  # the scheduler's api_timeout: its liveness probe's period
K8S_WATCH_SECONDS = 300  # the informers' watch timeoutSeconds: one new WATCH each per round
K8S_PARK_TIMEOUT = 180.0  # for every Watch stream of a window to have its first status
TORCHX_DESCRIBES = 20
# apiserver_request_total series that only txd's informers make here.
K8S_INFORMER_REQUESTS: dict[str, str | tuple[str, ...]] = {
    "verb": ("LIST", "WATCH"),
    "scope": "namespace",
    "resource": ("pods", "jobs"),
}

Metrics = dict[tuple[tuple[str, str], ...], float]


async def metrics(cluster: Cluster) -> Metrics:
    """The apiserver's `apiserver_request_total` and `apiserver_longrunning_gauge` series
    (its own counters: not txd's word), by their labels (the metric's name as "__name__")."""
    ctx = ssl.create_default_context(cafile=str(cluster.ca))
    headers = {"Authorization": f"Bearer {cluster.token}"}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        session.get(f"{cluster.server}/metrics", headers=headers, ssl=ctx) as resp,
    ):
        resp.raise_for_status()
        text = await resp.text()
    out = {}
    for line in text.splitlines():
        name, brace, rest = line.partition("{")
        if not brace or name not in ("apiserver_request_total", "apiserver_longrunning_gauge"):
            continue
        labels, _, value = rest.rpartition("} ")
        pairs = [("__name__", name)]
        for item in labels.split('",'):
            k, _, v = item.partition('="')
            pairs.append((k.strip(","), v.rstrip('"')))
        out[tuple(sorted(pairs))] = float(value)
    return out


def requests(
    m: Mapping[tuple[tuple[str, str], ...], float], **want: str | tuple[str, ...]
) -> float:
    """apiserver_request_total summed over the series whose labels match `want` (a value, or a
    tuple of accepted values)."""
    total = 0.0
    for key, value in m.items():
        labels = dict(key)
        if labels["__name__"] != "apiserver_request_total":
            continue
        if all(labels.get(k) in (v if isinstance(v, tuple) else (v,)) for k, v in want.items()):
            total += value
    return total


def open_watches(m: Mapping[tuple[tuple[str, str], ...], float]) -> str:
    """The namespaced watches open on the apiserver (apiserver_longrunning_gauge), by resource:
    "pods 1, jobs 1"."""
    out: dict[str, int] = {}
    for key, v in m.items():
        labels = dict(key)
        if (labels["__name__"], labels.get("verb"), labels.get("scope")) == (
            "apiserver_longrunning_gauge",
            "WATCH",
            "namespace",
        ) and v:
            res = labels.get("resource", "?")
            out[res] = out.get(res, 0) + int(v)
    return ", ".join(f"{k} {v}" for k, v in sorted(out.items())) or "none"


async def calls(
    ctx: Context, client: AsyncClient, d: Daemon, cluster: Cluster, span: float
) -> None:
    """API requests per minute while 1, 10 and 100 clients each watch every one of 10, then
    100, running jobs: txd's own count and the apiserver's."""
    res = ctx.res
    handles: list[str] = []

    async def txd_calls() -> int:
        infos = (await client.schedulers()).schedulers
        return sum(next(i for i in infos if i.name == "kubernetes").backend_calls.values())

    async def snapshot() -> tuple[Metrics, int]:
        return await metrics(cluster), await txd_calls()

    for jobs in (10, 100):
        log(f"k8s: {jobs} running `sleep 600` jobs")
        while len(handles) < jobs:
            app = sleeper(f"c{len(handles)}", 600)
            handles.append(await client.run(app, "kubernetes", K8S_CFG, workspace=""))
        await until_running_all(client, handles)
        for n in (1, 10, 100):
            w = await watch_window(d, handles, n, span, snapshot, K8S_PARK_TIMEOUT)
            torchx = n * jobs * 60 / TORCHX_WAIT_INTERVAL
            name = f"kubernetes API requests per minute, {n} client(s) watching {jobs} jobs"
            if w.before is None or w.after is None:
                res.add(
                    name,
                    "not measured",
                    "watch + resyncs",
                    None,
                    note=f"only {w.parked:,} of {w.streams:,} Watch streams had their "
                    f"first status within {K8S_PARK_TIMEOUT:.0f} s",
                )
                continue
            (m0, c0), (m1, c1) = w.before, w.after
            txd = c1 - c0
            informers = requests(m1, **K8S_INFORMER_REQUESTS) - requests(
                m0, **K8S_INFORMER_REQUESTS
            )
            expected = K8S_INFORMERS * math.ceil(span / K8S_WATCH_SECONDS) + math.ceil(
                span / K8S_PROBE_SECONDS
            )
            res.add(
                name,
                f"{txd * 60 / w.span:.1f}/min",
                "watch + resyncs",
                txd <= expected,
                note=f"txd's backend_calls, {txd:.0f} in {w.span:.0f} s (at most "
                f"{expected} expected: {K8S_INFORMERS} watches renewed every "
                f"{K8S_WATCH_SECONDS} s, a GET /version every {K8S_PROBE_SECONDS:g} s); "
                "apiserver_request_total: namespaced LIST/WATCH of "
                f"pods and jobs (txd's informers) {informers:.0f}, whole cluster "
                f"{(requests(m1) - requests(m0)) * 60 / w.span:.0f}/min (kubelet and "
                f"controllers included); namespaced watches open: {open_watches(m1)}; "
                f"{w.streams:,} Watch streams (all had their first status in "
                f"{w.opened:.1f} s); TorchX's runner.wait: {n} x {jobs} x 60 / "
                f"{TORCHX_WAIT_INTERVAL:.0f} s = {torchx:,.0f} describes/min",
            )
    for h in handles:
        await client.cancel(h)
    async with asyncio.timeout(K8S_START_TIMEOUT):
        await asyncio.gather(*(client.wait(h) for h in handles))
    for h in handles:
        await client.delete(h)


# TorchX's scheduler, made and warmed up, then `describe` n times at the bench's word.
DESCRIBE = (
    "import sys\n"
    "from torchx.schedulers.kubernetes_scheduler import create_scheduler\n"
    "s = create_scheduler('bench')\n"
    "s.describe(sys.argv[1])  # warm-up: configuration loaded, connection open\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "for _ in range(int(sys.argv[2])):\n"
    "    r = s.describe(sys.argv[1])\n"
    "print(r.state, flush=True)\n"
)


async def torchx_describe(
    ctx: Context, client: AsyncClient, kube: Any, cluster: Cluster, env: dict[str, str]
) -> None:
    """One real TorchX KubernetesScheduler.describe of a Volcano Job (made by txd with a queue;
    the bench plays Volcano's controller: phase Running), counted by the apiserver."""
    res = ctx.res
    venv = Path(ctx.args.torchx_venv)
    torchx, why = await asyncio.to_thread(ensure_torchx_kubernetes, venv)
    python = venv / "bin" / "python"
    if torchx is None:
        res.add("TorchX KubernetesScheduler.describe: apiserver requests each", "not measured",
                note=why)  # fmt: skip
        return
    await asyncio.to_thread(cluster.install_crds)
    handle = await client.run(
        sleeper("vc", 600), "kubernetes", {**K8S_CFG, "queue": "default"}, workspace=""
    )
    app_id = handle.rsplit("/", 1)[1]
    name = app_id.partition(":")[2]
    await kube.request(
        "PATCH",
        f"/apis/batch.volcano.sh/v1alpha1/namespaces/{K8S_NS}/jobs/{name}/status",
        body={"status": {"state": {"phase": "Running"}}},
        content_type="application/merge-patch+json",
    )
    proc = await asyncio.create_subprocess_exec(
        str(python), "-c", DESCRIBE, app_id, str(TORCHX_DESCRIBES),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        ready = await asyncio.wait_for(proc.stdout.readline(), CLI_TIMEOUT)
        if ready.strip() != b"ready":
            err = (await proc.stderr.read()).decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"TorchX describe failed: {err.strip()[-500:]}")
        volcano = {"group": "batch.volcano.sh", "resource": "jobs"}
        m0 = await metrics(cluster)
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        state = (await asyncio.wait_for(proc.stdout.readline(), CLI_TIMEOUT)).decode().strip()
        m1 = await metrics(cluster)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
    per = (requests(m1, **volcano) - requests(m0, **volcano)) / TORCHX_DESCRIBES
    kinds: dict[str, float] = {}  # the delta by verb and subresource, as the apiserver labels it
    for key, v in m1.items():
        labels = dict(key)
        if all(labels.get(k) == x for k, x in volcano.items()) and v - m0.get(key, 0.0):
            what = f"{labels.get('verb')} {labels.get('subresource') or 'jobs'}".strip()
            kinds[what] = kinds.get(what, 0.0) + v - m0.get(key, 0.0)
    seen = ", ".join(f"{v:.0f} {k}" for k, v in sorted(kinds.items())) or "none"
    res.add(
        "TorchX KubernetesScheduler.describe: apiserver requests each",
        f"{per:.2f}",
        note=f"torchx {torchx_version(torchx)}, {TORCHX_DESCRIBES} describes of one Volcano Job "
        f"(batch.volcano.sh jobs requests: {seen}), seen {state}; runner.wait polls it "
        f"every {TORCHX_WAIT_INTERVAL:.0f} s per job and per client",
    )
    await client.cancel(handle)
    await client.wait(handle, timeout=JOB_TIMEOUT)
    await client.delete(handle)
