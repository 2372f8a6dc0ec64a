"""`txctl --host ssh://login1 dashboard` on the laptop serves login1's jobs: the dashboard is a
thin client of the API, so the tunnel carries its events, Describe and log streams as it
carries txctl's other commands. (The page itself is driven by Chromium in tests/dashboard; here
its HTTP API is read directly, so the remote tier needs no browser.)"""

from __future__ import annotations

import re

from dashboard_testing import Dashboard
from ssh_testing import REMOTE_TXCTL, SshCluster

HANDLE = re.compile(r"local_cwd://txd/\S+")


def test_the_dashboard_serves_a_remote_daemon_through_the_tunnel(
    ssh_cluster: SshCluster,
) -> None:
    dash = Dashboard(
        [REMOTE_TXCTL, "--host", "ssh://login1"], ssh_cluster.laptop_env(), start_timeout=60
    )
    try:
        with dash.sse("/api/events", dash.bearer(), timeout=60) as events:
            kind, data = next(events)
            assert (kind, data["rows"]) == ("snapshot", [])
            ran = ssh_cluster.laptop_txctl(
                "--host", "ssh://login1", "run", "utils.sh", "sh", "-c", "echo hello-from-login1"
            )
            assert ran.returncode == 0, ran
            m = HANDLE.search(ran.stdout)
            assert m, ran.stdout
            handle = m.group(0)
            for kind, data in events:  # bounded: the job ends at once (the read timeout else)
                if kind == "changed" and data["handle"] == handle and data["state"] == "SUCCEEDED":
                    break
        # The job ran on login1 (its daemon's job store), and the dashboard describes it.
        assert handle in ssh_cluster.node("login1").txctl("list").stdout
        status, body = dash.request("GET", f"/api/job?handle={handle}", dash.bearer())
        assert status == 200 and b'"state": "SUCCEEDED"' in body
        with dash.sse(f"/api/logs?handle={handle}", dash.bearer(), timeout=60) as logs:
            got = list(logs)
        assert got[0] == ("log", {"role": "sh", "replica": 0, "text": "hello-from-login1\n"})
        assert got[-1] == ("end", {})
    finally:
        dash.close()
