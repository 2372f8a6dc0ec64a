"""A frozen login node whose ssh master dies under a waiting connection (issue 33, item 5).

The tunnel used to start a new `remote-socket` while it shut down, then hang in that
shutdown holding tunnel.lock: every later command to the host, the host healthy again, waited
180 s and failed, SIGTERM did not end the tunnel, and a `remote-socket` was left running."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from ssh_testing import SshCluster, laptop_commands, master_dies_while_frozen
from txd_testing import PidWatch

HOST = ("--host", "ssh://login1")
HANDLE = re.compile(r"local_cwd://txd/\S+")
TIMEOUT = 60.0  # a third of the 180 s a command used to wait for a wedged tunnel
# Whether the old tunnel wedged was a race (the master's death seen while a connection's query
# started): 7 of 16 single rounds here, and 4 of 4 runs of three rounds.
ROUNDS = 3


def test_a_master_dying_while_the_node_is_frozen_leaves_nothing_behind(
    ssh_cluster: SshCluster,
) -> None:
    login1 = ssh_cluster.node("login1")
    run = ssh_cluster.laptop_txctl(*HOST, "run", "utils.sh", "sleep", "600")
    assert run.returncode == 0, run
    handle = HANDLE.search(run.stdout).group(0)  # type: ignore[union-attr]
    (folder,) = (ssh_cluster.laptop / "run" / "txd" / "tunnels").iterdir()
    sessions = []
    for _ in range(ROUNDS):
        with PidWatch(ssh_cluster.tunnel_pids()) as old_tunnel:
            sessions += master_dies_while_frozen(ssh_cluster, login1, handle)
            # The node is back: the next command answers, through a new tunnel.
            status = ssh_cluster.laptop_txctl(*HOST, "status", handle, timeout=TIMEOUT)
            assert status.returncode == 0 and "RUNNING" in status.stdout, status
            assert old_tunnel.wait(TIMEOUT) == []  # the old tunnel exited by itself
    with PidWatch(sessions) as watch:  # each frozen session found its connection gone, and ended
        assert watch.wait(TIMEOUT) == []
    # Stopped, the tunnel leaves nothing of its own running here (its ssh children name its
    # folder in their control path), nor a remote-socket on the node.
    (last,) = ssh_cluster.tunnel_pids()
    ours = laptop_commands(str(folder))
    assert last in ours, ours
    with PidWatch(ours) as watch:
        os.kill(last, signal.SIGTERM)
        assert watch.wait(TIMEOUT) == []
    with PidWatch(login1.commands("remote-socket")) as watch:
        assert watch.wait(TIMEOUT) == []


def test_a_tunnel_wedged_past_its_deadline_is_ended_and_named(ssh_cluster: SshCluster) -> None:
    """A tunnel that holds its folder's lock past the deadline it recorded there (frozen here
    by SIGSTOP while it stops) is ended by the next command, which says so and goes on
    through a new tunnel. Commands used to wait 180 s for it, then fail naming no pid."""
    for _ in range(3):  # the freeze below must come before the tunnel's own SIGKILL (5 s)
        assert ssh_cluster.laptop_txctl(*HOST, "list").returncode == 0
        (folder,) = (ssh_cluster.laptop / "run" / "txd" / "tunnels").iterdir()
        tunnel, master = (int((folder / name).read_text()) for name in ("tunnel.pid", "ssh.pid"))
        with PidWatch([tunnel]) as watch, PidWatch([master]) as master_watch:
            os.kill(master, signal.SIGSTOP)  # holds the stop open: SIGTERM cannot end it yet
            os.kill(tunnel, signal.SIGTERM)
            deadline = time.monotonic() + TIMEOUT
            while (pending := _pending(master, signal.SIGTERM)) is False:  # it began to stop
                assert time.monotonic() < deadline, "the tunnel did not stop"
                time.sleep(0.02)
            if pending is None:  # this test was not scheduled before the tunnel killed its
                assert watch.wait(TIMEOUT) == []  # master: no wedge made; again
                continue
            os.kill(tunnel, signal.SIGSTOP)  # wedged, its own deadline out of its reach
            os.kill(master, signal.SIGCONT)  # ends on the SIGTERM it was sent
            assert master_watch.wait(TIMEOUT) == []
            listed = ssh_cluster.laptop_txctl(*HOST, "list", timeout=TIMEOUT)
            assert listed.returncode == 0, listed
            assert f"txctl: ended tunnel process {tunnel}, which held {folder / 'tunnel.lock'}" in (
                listed.stderr
            ), listed.stderr
            assert watch.wait(TIMEOUT) == []
        break
    else:
        raise AssertionError("the tunnel killed its stopped master before it could be frozen")
    assert ssh_cluster.tunnel_pids() != [tunnel]


def _pending(pid: int, sig: signal.Signals) -> bool | None:
    """Whether `sig` waits to be delivered to the (stopped) process; None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None
    pending = re.search(r"^ShdPnd:\s*([0-9a-f]+)$", status, re.M)
    return bool(pending and int(pending.group(1), 16) & (1 << (sig - 1)))
