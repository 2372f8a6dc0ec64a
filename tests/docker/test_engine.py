"""The test infrastructure itself: the real engine, its test images and the local registry."""

from __future__ import annotations

import uuid
from pathlib import Path

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
    name = _name("kept")
    docker_engine.docker("create", "--name", name, BUSYBOX, "true")
    host, pid = docker_engine.host, docker_engine.pid
    docker_engine.restart()
    assert docker_engine.host == host
    assert docker_engine.pid != pid
    info = await engine.container(name)  # the same client: the socket path did not change
    assert info is not None and info["State"]["Status"] == "created"
    docker_engine.docker("rm", name)


async def test_the_docker_daemon_uses_the_engine(
    docker_engine: Engine, docker_daemon: Daemon
) -> None:
    environ = Path(f"/proc/{docker_daemon.pid}/environ").read_bytes().split(b"\0")
    assert f"DOCKER_HOST={docker_engine.host}".encode() in environ
    async with docker_daemon.client() as c:
        infos = {s.name: s for s in (await c.schedulers()).schedulers}
    if "local_docker" in infos:
        assert infos["local_docker"].load_error == ""
        assert f"local_docker.docker_host={docker_engine.host}" in docker_daemon.args
