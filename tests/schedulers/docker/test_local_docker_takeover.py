"""local_docker across login nodes sharing a state dir (txd.daemon.serving): an engine behind a
Unix socket runs on the host of the daemon that used it, so a daemon taking the state dir over
from a dead host records that host's local_docker jobs as lost and leaves their containers
alone, as it does local_cwd's processes. Each host is a daemon under its own hostname
(tests/cluster_testing.py); both use the session's engine, which stands for login1's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_testing import Host, stale, unshare_works, until
from docker_testing import BUSYBOX, Engine, EngineClient
from txd_testing import remove_tree, short_tmpdir

pytestmark = pytest.mark.skipif(not unshare_works(), reason="needs unshare --uts")


def _hosts(root: Path, engine: Engine) -> tuple[Host, Host]:
    state = root / "home" / "state"
    settings = ["--set", f"local_docker.docker_host={engine.host}"]
    env = {"DOCKER_HOST": engine.host}
    login1, login2 = (Host(root, h, state, args=settings, env=env) for h in ("login1", "login2"))
    return login1, login2


async def test_a_takeover_records_the_dead_hosts_docker_jobs_as_lost(
    docker_engine: Engine, engine: EngineClient
) -> None:
    root = short_tmpdir("txdk-")
    login1, login2 = _hosts(root, docker_engine)
    state = login1.daemon.state_dir
    aid = ""
    try:
        login1.daemon.start()
        run = login1.txctl(
            "run", "-s", "local_docker", "-c", "network=none,pull=missing",
            "utils.sh", "--image", BUSYBOX, "sleep", "600",
        )  # fmt: skip
        assert run.returncode == 0, run
        handle = run.stdout.split()[0]
        aid = handle.rsplit("/", 1)[1]
        status = login1.txctl("status", "--json", handle)
        assert json.loads(status.stdout)["state"] == "RUNNING", status
        login1.daemon.kill()

        until(lambda: stale(state))
        login2.daemon.start()
        lost = json.loads(login2.txctl("status", "--json", handle).stdout)
        assert lost["state"] == "FAILED", lost
        assert "ran on host login1" in lost["msg"], lost
        # login1's container is another host's: neither stopped nor removed from here.
        (container,) = await engine.containers({"txd.app_id": aid})
        assert container["State"]["Running"], container["State"]
        assert "local_docker job(s) of host login1 lost" in login2.daemon.log()
    finally:
        for h in (login1, login2):
            h.daemon.close()
        if aid:
            for c in await engine.containers({"txd.app_id": aid}):
                await (await engine.docker.containers.get(c["Id"])).delete(force=True)
        remove_tree(root)


@pytest.mark.parametrize(
    ("host", "on_host"),
    [("unix:///var/run/docker.sock", True), ("tcp://127.0.0.1:2375", False)],
)
def test_only_a_unix_socket_engine_ties_jobs_to_the_host(host: str, on_host: bool) -> None:
    """An engine at tcp:// may serve every login node: its jobs are followed after a takeover."""
    from txd.schedulers.docker.local_docker import create_scheduler

    sched = create_scheduler("txd", settings={"docker_host": host})
    assert sched.jobs_live_on_host is on_host
