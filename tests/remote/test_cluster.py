"""One daemon per user per cluster, on the real login nodes (ssh_testing): the daemon of login1
serves the shared state dir; txctl on login2 reaches it over ssh by itself, and takes the state
dir over once login1's daemon is gone."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest
from ssh_testing import REMOTE_TXCTL, USER, SshCluster

STATE = ".local/state/txd"  # the default state dir, in the shared home


def _node_to_node_ssh(cluster: SshCluster) -> None:
    """The test user's own ssh config in the shared home, so that one node reaches the other
    by its name (the serving record's ssh name: the hostname)."""
    ssh_dir = cluster.home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    shutil.copy(cluster.key, ssh_dir / "id_ed25519")
    (ssh_dir / "config").write_text(
        "".join(f"Host {n.name}\n  HostName {n.address}\n  Port {n.port}\n" for n in cluster.nodes)
        + "Host *\n  IdentityFile ~/.ssh/id_ed25519\n  IdentitiesOnly yes\n  BatchMode yes\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
    )
    entry = pwd.getpwnam(USER)
    for path in (ssh_dir, ssh_dir / "id_ed25519", ssh_dir / "config"):
        os.chown(path, entry.pw_uid, entry.pw_gid)
        os.chmod(path, 0o700 if path.is_dir() else 0o600)


def _record(cluster: SshCluster) -> dict[str, object]:
    data: dict[str, object] = json.loads((cluster.home / STATE / "txd.serving").read_bytes())
    return data


def _handle(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc
    return proc.stdout.split()[0]


def test_login2_reaches_login1s_daemon_over_ssh_and_follows_and_cancels(
    ssh_cluster: SshCluster,
) -> None:
    login1, login2 = ssh_cluster.nodes
    _node_to_node_ssh(ssh_cluster)
    # Run from the laptop through login1 (its daemon started there by the first command).
    laptop_run = ssh_cluster.laptop_txctl(
        "--host", login1.url(), "run", "utils.sh", "sh", "-c", "echo ready; exec sleep 600"
    )
    handle = _handle(laptop_run)
    assert _record(ssh_cluster)["host"] == "login1"
    [daemon] = login1.daemon_pids()

    status = login2.txctl("status", "--json", handle)
    assert status.returncode == 0, status
    assert json.loads(status.stdout)["state"] in ("RUNNING", "PENDING", "SUBMITTED")
    assert status.stderr == (
        "txctl: txd serves this state dir on host login1; reaching it over ssh (ssh://login1)\n"
    )
    follow = subprocess.Popen(
        ["ssh", "-F", str(ssh_cluster.ssh_config), f"{USER}@login2",
         f"{REMOTE_TXCTL} logs -f {handle}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline() == "ready\n"  # streamed through login2's tunnel
        cancel = login2.txctl("cancel", handle)
        assert cancel.returncode == 0, cancel
        _, err = follow.communicate(timeout=60)  # the stream ends with the job
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert follow.returncode == 0, err
    final = login1.txctl("status", "--json", handle)
    assert json.loads(final.stdout)["state"] == "CANCELLED", final
    assert login2.daemon_pids() == []  # no second daemon on login2
    assert login1.daemon_pids() == [daemon]


def test_login1s_daemon_killed_then_login2_takes_over_and_lists_every_job(
    ssh_cluster: SshCluster,
) -> None:
    login1, login2 = ssh_cluster.nodes
    _node_to_node_ssh(ssh_cluster)
    run = f"TXD_HEARTBEAT=0.5 {REMOTE_TXCTL} run"  # a dead host is stale after 1.5 s
    done = _handle(login1.ssh(f"{run} --wait utils.echo --msg hello"))
    running = _handle(login1.ssh(f"{run} utils.sh sleep 600"))
    [daemon] = login1.daemon_pids()
    assert _record(ssh_cluster)["pid"] == daemon
    os.kill(daemon, signal.SIGKILL)

    deadline = time.monotonic() + 30
    while time.time() - float(_record(ssh_cluster)["heartbeat"]) <= 1.5:  # type: ignore[arg-type]
        assert time.monotonic() < deadline
        time.sleep(0.1)
    listed = login2.txctl("list", "--json")
    assert listed.returncode == 0, listed
    assert "txctl: the txd of host login1 stopped beating" in listed.stderr, listed.stderr
    jobs = {j["app_handle"]: j["state"] for j in json.loads(listed.stdout)}
    assert jobs[done] == "SUCCEEDED" and jobs[running] == "FAILED", jobs
    lost = json.loads(login2.txctl("status", "--json", running).stdout)
    assert "ran on host login1" in lost["msg"], lost
    assert _record(ssh_cluster)["host"] == "login2"
    assert len(login2.daemon_pids()) == 1
    assert login2.txctl("logs", done).stdout == "hello\n"  # its logs, written on login1
    # And now login1 is the other host: its txctl reaches login2's daemon over ssh.
    again = login1.txctl("status", done)
    assert again.returncode == 0, again
    assert "on host login2; reaching it over ssh (ssh://login2)" in again.stderr


@pytest.mark.parametrize("dies", ["daemon", "host"])
def test_a_wait_on_login2_rides_out_login1s_daemon_lost(ssh_cluster: SshCluster, dies: str) -> None:
    """`txctl wait` on login2, reaching login1's daemon over ssh, across a kill -9 of that
    daemon (it is started again on login1 through the tunnel) or of every process of login1
    (sshd included: login2 takes the state dir over once login1 stops beating). The wait
    reconnects to whichever daemon serves next and prints the job's final status as it holds
    it."""
    login1, login2 = ssh_cluster.nodes
    _node_to_node_ssh(ssh_cluster)
    env = "TXD_HEARTBEAT=0.5"  # a dead host is stale after 1.5 s
    running = _handle(login1.ssh(f"{env} {REMOTE_TXCTL} run utils.sh sleep 600"))
    [daemon] = login1.daemon_pids()
    wait = subprocess.Popen(
        ["ssh", "-F", str(ssh_cluster.ssh_config), f"{USER}@login2",
         f"{env} {REMOTE_TXCTL} wait {running}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert wait.stderr is not None
        seen = []
        while "RUNNING" not in (line := wait.stderr.readline()):  # its Watch is open
            assert line, f"the wait ended early: {''.join(seen)}"
            seen.append(line)
        for pid in [daemon] if dies == "daemon" else login1.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, err = wait.communicate(timeout=90)
    finally:
        if wait.poll() is None:
            wait.kill()
            wait.wait()
    assert "txctl: connection to the daemon lost" in err and "reconnected" in err, err
    final = json.loads(login2.txctl("status", "--json", running).stdout)
    assert f"  state:    {final['state']}\n" in out, (out, err)
    assert err.count("reaching it over ssh") <= 1, err  # said once, however many tries
    if dies == "host":
        assert final["state"] == "FAILED" and "ran on host login1" in final["msg"], final
        assert _record(ssh_cluster)["host"] == "login2"
    else:
        assert final["state"] in ("FAILED", "CANCELLED"), final


_CLIENT_ON_LOGIN2 = """
import sys
from txd.client import Client
from txd.v1 import AppDef, AppState, Role
with Client() as c:
    print(AppState.Name(c.status(sys.argv[1]).state))
    app = AppDef(name="py", roles=[Role(name="echo", image="/", entrypoint="echo", args=["hi"])])
    handle = c.run(app, "local_cwd")
    print(AppState.Name(c.wait(handle, timeout=60).state))
    print(b"".join(chunk.data for chunk in c.logs(handle)).decode(), end="")
"""


def test_the_python_client_on_login2_reaches_login1s_daemon(ssh_cluster: SshCluster) -> None:
    """Client() with no address, on a node whose state dir another node's daemon serves: it
    goes there over ssh, as txctl does (before, it failed: no daemon on its socket)."""
    login1, login2 = ssh_cluster.nodes
    _node_to_node_ssh(ssh_cluster)
    done = _handle(login1.txctl("run", "--wait", "utils.echo", "--msg", "hello"))
    [daemon] = login1.daemon_pids()
    out = login2.ssh(shlex.join([sys.executable, "-c", _CLIENT_ON_LOGIN2, done]))
    assert out.returncode == 0, out
    assert out.stdout.splitlines() == ["SUCCEEDED", "SUCCEEDED", "hi"], out
    assert out.stderr == (
        "txd.client: txd serves this state dir on host login1; reaching it over ssh "
        "(ssh://login1)\n"
    ), out.stderr
    assert login2.daemon_pids() == [] and login1.daemon_pids() == [daemon]


def test_login2_says_that_login1s_stalled_daemon_does_not_answer(ssh_cluster: SshCluster) -> None:
    """Issue 33 item 7, through the real sshd: login1's daemon is stopped (SIGSTOP) while its
    record is fresh. login2's tunnel to login1 comes up (sshd answers), and gRPC waits in vain
    for the daemon's first frame. Before, txctl printed gRPC's words ("connection attempt timed
    out before receiving SETTINGS frame"); now it names the host, says it does not answer, and
    when a takeover becomes possible (a 30 s heartbeat: the record stays fresh throughout)."""
    login1, login2 = ssh_cluster.nodes
    _node_to_node_ssh(ssh_cluster)
    _handle(login1.ssh(f"TXD_HEARTBEAT=30 {REMOTE_TXCTL} run --wait utils.echo --msg hi"))
    [daemon] = login1.daemon_pids()
    os.kill(daemon, signal.SIGSTOP)
    try:
        out = login2.txctl("list")
    finally:
        os.kill(daemon, signal.SIGCONT)
    assert out.returncode == 3, out
    said = out.stderr.splitlines()
    assert said[-1].startswith(
        "txctl: error: txd serves this state dir on host login1 (last heartbeat "
    ), out.stderr
    assert "but it does not answer over ssh (ssh://login1)" in said[-1], out.stderr
    assert "a daemon here can take the state dir over in " in said[-1], out.stderr
    assert "SETTINGS" not in out.stderr and "failed to connect" not in out.stderr, out.stderr
    assert said[:-1] == [
        "txctl: txd serves this state dir on host login1; reaching it over ssh (ssh://login1)"
    ], out.stderr
