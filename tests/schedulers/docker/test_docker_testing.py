"""The test infrastructure itself: the real engine, its test images and the local registry."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from docker_testing import BUSYBOX, PYTHON, Engine, EngineClient, Registry
from txd_testing import Daemon


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_a_busybox_container_exits_3_and_the_engine_reports_it(
    docker_engine: Engine, engine: EngineClient
) -> None:
    name = _name("exit3")
    async with engine.events(type="container", container=name) as events:
        docker_engine.docker(
            "run",
            "-d",
            "--name",
            name,
            "--label",
            "txd-test=exit3",
            BUSYBOX,
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        )
        die = await events.wait_for(Action="die")
    assert die["Actor"]["Attributes"]["exitCode"] == "3"
    [info] = await engine.containers({"txd-test": "exit3"})
    assert info["Name"] == f"/{name}"
    assert info["State"]["Status"] == "exited"
    assert info["State"]["ExitCode"] == 3
    logs = docker_engine.docker("logs", name)
    assert (logs.stdout, logs.stderr) == ("out\n", "err\n")
    docker_engine.docker("rm", name)
    assert await engine.container(name) is None


def test_the_python_image_runs_python(docker_engine: Engine) -> None:
    proc = docker_engine.docker(
        "run",
        "--rm",
        "--network",
        "none",
        PYTHON,
        "python3",
        "-c",
        "import asyncio, json, sys; print(json.dumps(sys.version_info[:2]))",
    )
    assert proc.stdout == "[3, 11]\n"


async def test_an_image_pushed_to_the_registry_pulls_back_by_a_fresh_tag(
    docker_engine: Engine, docker_registry: Registry, engine: EngineClient
) -> None:
    repo = f"{docker_registry.address}/txd-test/{_name('push')}"
    docker_engine.docker("tag", BUSYBOX, f"{repo}:v1")
    docker_engine.docker("push", f"{repo}:v1")
    docker_engine.docker("rmi", f"{repo}:v1")
    assert await engine.image(f"{repo}:v1") is None
    docker_engine.docker("pull", f"{repo}:v1")
    pulled = await engine.image(f"{repo}:v1")
    busybox = await engine.image(BUSYBOX)
    assert pulled is not None and busybox is not None
    assert pulled["RootFS"]["Layers"] == busybox["RootFS"]["Layers"]
    proc = docker_engine.docker("run", "--rm", "--network", "none", f"{repo}:v1", "echo", "pulled")
    assert proc.stdout == "pulled\n"
    docker_engine.docker("rmi", f"{repo}:v1")


async def test_restart_comes_back_on_the_same_socket_with_its_containers(
    docker_engine: Engine, engine: EngineClient
) -> None:
    created, running = _name("created"), _name("running")
    docker_engine.docker("create", "--name", created, BUSYBOX, "true")
    docker_engine.docker("run", "-d", "--init", "--name", running, BUSYBOX, "sleep", "300")
    host, pid = docker_engine.host, docker_engine.pid
    docker_engine.restart()
    assert docker_engine.host == host
    assert docker_engine.pid != pid
    info = await engine.container(created)  # the same client: the socket path did not change
    assert info is not None and info["State"]["Status"] == "created"
    info = await engine.container(running)
    assert info is not None and info["State"]["Status"] == "running"  # live-restore
    async with engine.events(type="container", container=running) as events:
        docker_engine.docker("kill", running)
        die = await events.wait_for(Action="die")
    assert die["Actor"]["Attributes"]["exitCode"] == "137"
    docker_engine.docker("rm", created, running)


@pytest.mark.parametrize("fixture", ["docker_daemon", "own_docker_daemon"])
async def test_the_docker_daemons_use_the_engine(
    docker_engine: Engine, fixture: str, request: pytest.FixtureRequest
) -> None:
    daemon: Daemon = request.getfixturevalue(fixture)
    environ = Path(f"/proc/{daemon.pid}/environ").read_bytes().split(b"\0")
    assert f"DOCKER_HOST={docker_engine.host}".encode() in environ
    async with daemon.client() as c:
        infos = {s.name: s for s in (await c.schedulers()).schedulers}
    if "local_docker" in infos:
        assert infos["local_docker"].load_error == ""
        assert f"local_docker.docker_host={docker_engine.host}" in daemon.args


def test_an_engine_stops_with_everything_it_started() -> None:
    """docker-down leaves no process, container or network bridge of the engine behind."""
    other = Engine.start_new()
    try:
        network = other.docker("network", "create", _name("net")).stdout.strip()
        cid = other.docker(
            "run", "-d", "--init", "--network", network, BUSYBOX, "sleep", "300"
        ).stdout.strip()
        other.docker("run", "--rm", "--network", "host", BUSYBOX, "true")
        data_root = Path((other.run_dir / "data-root").read_text().strip())
        assert _mounts_under(other.run_dir)  # the host network namespace, while it runs
        container_pid = int(other.docker("inspect", "-f", "{{.State.Pid}}", cid).stdout)
        containerd = (other.run_dir / "exec" / "containerd" / "containerd.pid").read_text()
        shim = Path(f"/proc/{container_pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        engine_pids = [other.pid, int(containerd), int(shim), container_pid]
        bridge = Path(f"/sys/class/net/br-{network[:12]}")
        assert bridge.exists()
    finally:
        other.close()
    assert [p for p in engine_pids if Path(f"/proc/{p}").exists()] == []
    assert not bridge.exists()
    assert _mounts_under(other.run_dir) == _mounts_under(data_root) == []
    assert not other.run_dir.exists()


def _mounts_under(path: Path) -> list[str]:
    with open("/proc/mounts") as f:
        return [m for m in (line.split()[1] for line in f) if m.startswith(f"{path}/")]
