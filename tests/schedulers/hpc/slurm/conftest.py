"""A real Slurm cluster (scripts/slurm-up), a txd daemon that uses it, and an SSH login node in
front of it, for the slurm tests.

- `slurm_cluster` (session): the cluster, on free ports, with MinJobAge set low so that "Slurm
  has forgotten the job" happens within a test. Stopped by scripts/slurm-down at the end.
- `login_node` (session): an asyncssh server (login_node.py, beside this file) on 127.0.0.1
  with generated keys; daemons reach it as `ssh_host=login` through the ~/.ssh/config written here.
- `slurm_daemon` (session) and `slurm_client`: a txd polling Slurm every POLL_INTERVAL s;
  `slurm_daemon_with(args)` makes one (not started) with more arguments.
- `target`: parametrizes a test over running on this host and through the login node.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from txd.schedulers.hpc.hosts import import_asyncssh
from txd_testing import REPO, Daemon, remove_tree, short_tmpdir

POLL_INTERVAL = 0.2
MIN_JOB_AGE = 2  # seconds; slurmctld purges such jobs within about 10 s


@dataclass
class Cluster:
    root: Path
    conf: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def squeue_ids(self) -> set[str]:
        """Job ids slurmctld still knows (finished ones included)."""
        out = subprocess.run(
            ["squeue", "--states=all", "--noheader", "--format=%A"],
            env=self.env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return set(out.split())


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    if shutil.which("slurmctld") is None:
        pytest.fail("Slurm is not installed: scripts/install-backends installs it")
    root = short_tmpdir("txds-")
    env = {**os.environ, "SLURM_DIR": str(root), "MIN_JOB_AGE": str(MIN_JOB_AGE)}
    try:
        up = subprocess.run([REPO / "scripts/slurm-up"], env=env, capture_output=True, text=True)
        if up.returncode != 0:
            pytest.fail(f"scripts/slurm-up failed:\n{up.stderr}", pytrace=False)
        yield Cluster(root, root / "slurm.conf")
    finally:
        subprocess.run([REPO / "scripts" / "slurm-down"], env=env, check=False)
        remove_tree(root)


@dataclass
class LoginNode:
    port: int
    home: Path  # a HOME whose ~/.ssh/config names this node `login`


@pytest.fixture(scope="session")
def login_node(slurm_cluster: Cluster) -> Iterator[LoginNode]:
    asyncssh = import_asyncssh()

    root = short_tmpdir("txdssh-")
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    (root / "host_key").write_bytes(host_key.export_private_key())
    (root / "authorized_keys").write_bytes(client_key.export_public_key())
    proc = subprocess.Popen(
        [sys.executable, Path(__file__).with_name("login_node.py"), "host_key", "authorized_keys"],
        cwd=root,
        env={**slurm_cluster.env(), "HOME": str(root)},
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        home = root / "client-home"
        ssh = home / ".ssh"
        ssh.mkdir(parents=True)
        (ssh / "id_ed25519").write_bytes(client_key.export_private_key())
        (ssh / "id_ed25519").chmod(0o600)
        (ssh / "known_hosts").write_bytes(
            f"[127.0.0.1]:{port} ".encode() + host_key.export_public_key()
        )
        (ssh / "config").write_text(
            f"Host login\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
            f"  IdentityFile {ssh / 'id_ed25519'}\n"
        )
        yield LoginNode(port, home)
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
        remove_tree(root)


def make_daemon(cluster: Cluster, login: LoginNode, args: Sequence[str] = ()) -> Daemon:
    root = short_tmpdir("txdsd-")
    return Daemon(
        root,
        env={"SLURM_CONF": str(cluster.conf), "HOME": str(login.home)},
        args=["--poll-interval", f"slurm={POLL_INTERVAL}", *args],
    )


@pytest.fixture(scope="session")
def slurm_daemon(slurm_cluster: Cluster, login_node: LoginNode) -> Iterator[Daemon]:
    d = make_daemon(slurm_cluster, login_node).start()
    try:
        yield d
    finally:
        d.close()
        remove_tree(d.root)


@pytest.fixture
def own_slurm_daemon(slurm_cluster: Cluster, login_node: LoginNode) -> Iterator[Daemon]:
    """A daemon of the test's own, for restarts."""
    d = make_daemon(slurm_cluster, login_node)
    try:
        yield d.start()
    finally:
        d.close()
        remove_tree(d.root)


@pytest.fixture
def slurm_daemon_with(
    slurm_cluster: Cluster, login_node: LoginNode
) -> Callable[[Sequence[str]], Daemon]:
    """Makes a txd (not started) as slurm_daemon's, with more arguments."""
    return functools.partial(make_daemon, slurm_cluster, login_node)


@pytest.fixture
def poll_interval() -> float:
    return POLL_INTERVAL


@pytest.fixture
async def slurm_client(slurm_daemon: Daemon) -> AsyncIterator[Any]:
    async with slurm_daemon.client() as c:
        yield c


@pytest.fixture
def jobdir(slurm_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A job_dir for one test, inside the cluster's tree (visible to every node and to the
    login node alike, like a shared filesystem)."""
    path = slurm_cluster.root / "jobs" / request.node.name.replace("/", "_")
    yield path
    remove_tree(path)


@pytest.fixture(params=["local", "ssh"])
def target(request: pytest.FixtureRequest) -> Callable[..., dict[str, str]]:
    """cfg for this host or for the login node, plus the job_dir given."""

    def cfg(job_dir: Path, **extra: str) -> dict[str, str]:
        out = {"job_dir": str(job_dir), **extra}
        if request.param == "ssh":
            out["ssh_host"] = "login"
        return out

    return cfg


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that restart slurmctld (marked `restarts_slurmctld`) run after every other test of
    the session: a job of another test running across the restart would be disturbed."""
    items.sort(key=lambda item: item.get_closest_marker("restarts_slurmctld") is not None)
