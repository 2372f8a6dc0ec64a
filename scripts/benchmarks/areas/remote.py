"""remote: txctl through an ssh tunnel (tests/remote's login1, a real sshd on loopback in
namespaces of its own) next to txctl on a local daemon, turn by turn: `txctl status` warm
(goal: at most 1.25x local), the first command on a cold connection (a new tunnel and ssh
login; once with the remote daemon to start, once with it running), `txctl logs` of a
finished job's 64 MiB of output, MB/s (goal: at least 0.7x local), and the first command once
a frozen login1 answers again, its ssh master killed under a waiting call meanwhile (issue 33;
goal: within 5 s). Needs root (the login nodes); skipped with its reason otherwise."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

from ssh_testing import REMOTE_TXCTL, SshCluster, master_dies_while_frozen, skip_reason
from txd_testing import PidWatch

from benchmarks.common import fmt_ms, log, median, timed_run
from benchmarks.context import Context
from benchmarks.daemons import stop

LOG_BYTES = 64 << 20
# 64 MiB of 100-byte lines, then the job ends.
LOG_SCRIPT = f"head -c {LOG_BYTES // 100 * 99} /dev/zero | tr '\\0' x | fold -w 99"
HOST = ("--host", "ssh://login1")


async def run(ctx: Context) -> None:
    reason = skip_reason()
    if reason:
        ctx.res.add("remote", "not measured", note=reason)
        return
    await asyncio.to_thread(_run, ctx)


def _run(ctx: Context) -> None:
    root = ctx.base / "ssh"
    root.mkdir()
    cluster = SshCluster.start(root)
    d = ctx.daemons.start(ctx.daemons.new("remote-local"))
    try:
        with ctx.res.section():
            _measure(ctx, cluster, d.socket)
    finally:
        stop(d)
        cluster.close()


def _measure(ctx: Context, cluster: SshCluster, local_socket: Path) -> None:
    remote_env = cluster.laptop_env()
    local_env = {**cluster.laptop_env(), "TXD_SOCKET": str(local_socket)}
    remote_env.pop("TXD_SOCKET", None)
    cwd = ctx.work

    def txctl(env: dict[str, str], *args: str) -> tuple[float, str]:
        prefix = HOST if "TXD_SOCKET" not in env else ("--no-autostart",)
        return timed_run([REMOTE_TXCTL, *prefix, *args], env, cwd)

    cold_daemon, _ = txctl(remote_env, "list")  # tunnel, ssh login and the remote daemon
    _kill_tunnel(cluster)
    cold, _ = txctl(remote_env, "list")  # tunnel and ssh login; the daemon runs
    ctx.res.add(
        "remote: first command, cold connection", fmt_ms(cold * 1000), note="daemon running"
    )
    ctx.res.add(
        "remote: first command, cold connection and daemon", fmt_ms(cold_daemon * 1000), note=""
    )

    job = ("run", "--wait", "utils.sh", "sh", "-c")
    handles = {}
    for side, env in (("local", local_env), ("remote", remote_env)):
        _, out = txctl(env, *job, LOG_SCRIPT)
        handles[side] = out.split()[0]
    n = 5 if ctx.quick else 30
    status: dict[str, list[float]] = {"local": [], "remote": []}
    for _ in range(n):  # interleaved
        for side, env in (("local", local_env), ("remote", remote_env)):
            status[side].append(txctl(env, "status", handles[side])[0])
    local_s, remote_s = median(status["local"]), median(status["remote"])
    ratio = remote_s / local_s
    ctx.res.add(
        "remote: txctl status, warm tunnel / local",
        f"{ratio:.2f}x ({fmt_ms(remote_s * 1000)} vs {fmt_ms(local_s * 1000)})",
        "<= 1.25x",
        ratio <= 1.25,
        note=f"median of {n} each, interleaved",
    )
    rates: dict[str, list[float]] = {"local": [], "remote": []}
    for _ in range(2 if ctx.quick else 3):
        for side, env in (("local", local_env), ("remote", remote_env)):
            prefix = HOST if side == "remote" else ("--no-autostart",)
            t, size = _timed_logs(env, cwd, [REMOTE_TXCTL, *prefix, "logs", handles[side]])
            rates[side].append(size / t / 1e6)
    local_r, remote_r = median(rates["local"]), median(rates["remote"])
    ctx.res.add(
        "remote: txctl logs MB/s, tunnel / local",
        f"{remote_r / local_r:.2f}x ({remote_r:.0f} vs {local_r:.0f} MB/s)",
        ">= 0.7x",
        remote_r / local_r >= 0.7,
        note=f"{LOG_BYTES >> 20} MiB, median of {len(rates['local'])} each, interleaved",
    )
    log(f"remote: status {status}, logs MB/s {rates}")
    master_dies_while_frozen(cluster, cluster.node("login1"), handles["remote"])
    back, _ = txctl(remote_env, "status", handles["remote"])
    ctx.res.add(
        "remote: first command after a frozen node lost its ssh",
        fmt_ms(back * 1000),
        "<= 5 s",
        back <= 5.0,
        note="a new tunnel and ssh login",
    )


def _timed_logs(env: dict[str, str], cwd: Path, cmd: list[str]) -> tuple[float, int]:
    import time

    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, check=True, timeout=300)
    return time.perf_counter() - t0, len(out.stdout)


def _kill_tunnel(cluster: SshCluster) -> None:
    pids = cluster.tunnel_pids()
    with PidWatch(pids) as watch:
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        if watch.wait(30):
            raise RuntimeError("the tunnel did not exit on SIGTERM")
