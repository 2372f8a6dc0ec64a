"""The login nodes themselves: hostnames, private /tmp, shared home, the remote txctl."""

from __future__ import annotations

from ssh_testing import REMOTE_TXCTL, USER, USER2, SshCluster


def test_two_login_nodes_share_the_home_not_tmp(ssh_cluster: SshCluster) -> None:
    login1, login2 = ssh_cluster.nodes
    assert login1.ssh("hostname").stdout.strip() == "login1"
    assert login2.ssh("hostname").stdout.strip() == "login2"
    assert login1.ssh("id -un").stdout.strip() == USER
    assert login1.ssh("id -un", user=USER2).stdout.strip() == USER2
    login1.ssh("echo shared > ~/f; echo own > /tmp/f")
    assert login2.ssh("cat ~/f").stdout == "shared\n"
    assert (ssh_cluster.home / "f").read_text() == "shared\n"
    assert login2.ssh("cat /tmp/f").returncode != 0
    assert login1.ssh("cat /tmp/f").stdout == "own\n"
    version = login1.txctl("--version")
    assert version.returncode == 0 and version.stdout.startswith("txctl "), version
    assert login1.ssh(f"test -x {REMOTE_TXCTL}").returncode == 0
