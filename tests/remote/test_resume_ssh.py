"""A log follow and a wait from the laptop ride out a dropped ssh tunnel: txctl opens a new
tunnel and goes on where it was (every byte once), while the job runs on in login1's daemon."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from ssh_testing import REMOTE_TXCTL, SshCluster
from txd_testing import PidWatch

HOST = ("--host", "ssh://login1")
TIMEOUT = 60.0
LINES = 300
# A few seconds of numbered lines, so the tunnel is killed while they come.
SCRIPT = f"i=0; while [ $i -lt {LINES} ]; do echo line-$i-abcdefghij; i=$((i+1)); sleep 0.01; done"


def _tunnel_pid(cluster: SshCluster) -> int:
    (pid,) = cluster.tunnel_pids()
    return pid


def _tunnel_dir(cluster: SshCluster) -> Path:
    (folder,) = (cluster.laptop / "run" / "txd" / "tunnels").iterdir()
    return folder


def _until_output(path: Path, proc: subprocess.Popen[bytes], size: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while path.stat().st_size < size:
        assert proc.poll() is None, "txctl exited early"
        assert time.monotonic() < deadline, "no output"
        time.sleep(0.01)


@pytest.mark.parametrize("victim", ["ssh.pid", "tunnel.pid"])
def test_logs_follow_rides_out_a_killed_tunnel(
    ssh_cluster: SshCluster, tmp_path: Path, victim: str
) -> None:
    """The tunnel process or its ssh master connection killed mid-follow."""
    env = ssh_cluster.laptop_env()
    run = subprocess.run(
        [REMOTE_TXCTL, *HOST, "run", "utils.sh", "sh", "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
    )
    assert run.returncode == 0, run
    handle = re.search(r"local_cwd://\S+", run.stdout)
    assert handle, run.stdout
    out = tmp_path / "out"
    with open(out, "wb") as f:
        follow = subprocess.Popen(
            [REMOTE_TXCTL, *HOST, "logs", "-f", handle.group(0)],
            stdout=f,
            stderr=subprocess.PIPE,
            env=env,
        )
    try:
        _until_output(out, follow, 20 * len("line-00-abcdefghij\n"))
        tunnel = _tunnel_pid(ssh_cluster)
        victim_pid = int((_tunnel_dir(ssh_cluster) / victim).read_text())
        with PidWatch([victim_pid]) as watch:
            os.kill(victim_pid, signal.SIGKILL)
            assert watch.wait(30) == []
        _, err = follow.communicate(timeout=TIMEOUT)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    stderr = err.decode()
    assert follow.returncode == 0, stderr
    assert "connection to the daemon lost" in stderr and "reconnected" in stderr, stderr
    assert _tunnel_pid(ssh_cluster) != tunnel  # a new tunnel carried the rest
    want = "".join(f"line-{i}-abcdefghij\n" for i in range(LINES))
    assert out.read_text() == want
