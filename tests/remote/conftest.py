"""The remote tier's fixtures: two SSH login nodes and a laptop (see ssh_testing.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ssh_testing import SshCluster, skip_reason
from txd_testing import short_tmpdir


@pytest.fixture
def ssh_cluster() -> Iterator[SshCluster]:
    """login1 and login2 (real sshd in namespaces of their own) sharing USER's home."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    cluster = SshCluster.start(short_tmpdir("txdssh-"))
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def ssh_cluster_no_forwarding() -> Iterator[SshCluster]:
    """As ssh_cluster, with sshd refusing Unix socket forwarding (the relay's case)."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    cluster = SshCluster.start(short_tmpdir("txdssh-"), {"AllowStreamLocalForwarding": "no"})
    try:
        yield cluster
    finally:
        cluster.close()
