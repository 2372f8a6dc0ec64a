"""A Kubernetes API server that hangs under a running txd: SIGSTOP to the test cluster's
kube-apiserver mid-watch, so that its connections stay open and nothing answers (resumed with
SIGCONT whatever happens, within seconds: the node's lease lasts 40 s).

A running job must go stale with a reason naming the API server within a bound (not after the
watch's own read timeout of timeoutSeconds + 30 = 330 s), a local_cwd job run meanwhile through
the same daemon is unaffected, and once the apiserver is resumed the job is fresh again by
itself and its real end is seen once, never UNKNOWN.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_testing import K8S_CFG, Cluster, gated_role, make_k8s_daemon
from txd.v1 import AppDef, AppState
from txd_testing import (
    Daemon,
    is_fresh_running,
    is_stale,
    own_daemon,
    repeated_statuses,
    sh_app,
    watching,
)

API_TIMEOUT = 2  # the daemon's kubernetes.api_timeout here
STALE_WITHIN = 2 * API_TIMEOUT  # one probe interval plus one probe's timeout

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def hang_daemon(
    k8s_cluster: Cluster, k8s_namespace: str, request: pytest.FixtureRequest
) -> Iterator[Daemon]:
    d = make_k8s_daemon(
        k8s_cluster,
        k8s_namespace,
        args=[
            "--set",
            f"kubernetes.api_timeout={API_TIMEOUT}",
            "--set",
            "kubernetes.poll_interval=0.5",
        ],
    )
    with own_daemon(d, request) as started:
        yield started


def _proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


async def test_a_hung_apiserver_leaves_the_job_running_stale_until_it_answers(
    hang_daemon: Daemon, k8s_cluster: Cluster, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    app = AppDef(name="hung", roles=[gated_role("main", gate)])
    apiserver = int((k8s_cluster.run_dir / "kube-apiserver.pid").read_text())
    async with hang_daemon.client() as c:
        handle = await c.run(app, scheduler="kubernetes", cfg=K8S_CFG)
        async with watching(c, handle) as w:
            await w.next("RUNNING", is_fresh_running, timeout=120)
            os.kill(apiserver, signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                stale = await w.next("stale", is_stale)
                noticed = time.monotonic() - t0
                assert stale.state == AppState.RUNNING, stale
                assert stale.stale_msg.startswith("kubernetes has not answered since "), stale
                said = (
                    f"GET /version: the Kubernetes API server at {k8s_cluster.server} did not "
                    f"answer within {API_TIMEOUT} s"
                )
                assert stale.stale_msg.endswith(said), stale.stale_msg
                text = hang_daemon.txctl("status", handle, check=0).stdout
                assert "STALE:    kubernetes has not answered since " in text, text

                # Meanwhile a local_cwd job runs, is watched to its end and its logs read.
                latencies = []
                local = await c.run(sh_app("echo hi", name="beside"))
                async for _ in c.watch(local):
                    t1 = time.monotonic()
                    now = await c.status(local)
                    latencies.append(time.monotonic() - t1)
                assert now.state == AppState.SUCCEEDED, now
                assert b"".join([ch.data async for ch in c.logs(local)]) == b"hi\n"
                assert _proc_state(apiserver) == "T", "the apiserver was resumed too early"
            finally:
                os.kill(apiserver, signal.SIGCONT)
            print(
                f"stale after {noticed:.1f} s (at most ~{STALE_WITHIN} s expected); local_cwd "
                f"status latency during the hang: max {max(latencies) * 1000:.1f} ms"
            )
            t0 = time.monotonic()
            await w.next("fresh after the hang", is_fresh_running, timeout=60)
            print(f"fresh {time.monotonic() - t0:.1f} s after SIGCONT")

            # The job's real end, seen once.
            (gate / "go").touch()
            final = await w.next("the end", lambda s: s.state != AppState.RUNNING, timeout=120)
        sent = w.sent
    assert final.state == AppState.SUCCEEDED and not is_stale(final), final
    assert [s for s in sent if s.state == AppState.UNKNOWN] == []
    assert [s.state for s in sent if s.state == AppState.SUCCEEDED] == [AppState.SUCCEEDED]
    assert repeated_statuses(sent) == [], sent
