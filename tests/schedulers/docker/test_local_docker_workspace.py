"""Workspaces through a real txd on local_docker: `txctl run` builds the caller's directory into
the image it runs, picks up a change at the next run without touching the base, builds nothing
for `--workspace ''`, shows the build in --dryrun, removes the image with the last job that
used it, and pushes to a real registry with image_repo."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from docker_testing import BUSYBOX, EngineClient, Registry
from txd_testing import Daemon, first_line

RUN = ["run", "-s", "local_docker", "-c", "network=none"]


def make_workspace(root: Path, version: str = "v1") -> Path:
    root.mkdir()
    (root / "token").write_text(uuid.uuid4().hex)  # a fresh image: the engine outlives runs
    (root / "main.sh").write_text(f"echo main {version}\n")
    return root


def run_to_end(daemon: Daemon, cwd: Path, *args: str) -> tuple[str, str]:
    """Runs `sh -c SCRIPT`-style args in busybox from cwd (the default workspace) until the
    job ends; returns (handle, its output)."""
    proc = daemon.txctl(*RUN, "--wait", *args, cwd=cwd, check=0, timeout=120)
    handle = first_line(proc.stdout)
    logs = daemon.txctl("logs", handle, check=0).stdout
    return handle, logs


def role0_image(daemon: Daemon, handle: str) -> str:
    desc = json.loads(daemon.txctl("describe", "--json", handle, check=0).stdout)
    return str(desc["app"]["roles"][0]["image"])


async def all_image_ids(engine: EngineClient) -> set[str]:
    return {i["Id"] for i in await engine.docker.images.list(all=True)}


async def test_the_workspace_runs_and_a_change_is_picked_up(
    docker_daemon: Daemon, engine: EngineClient, tmp_path: Path
) -> None:
    ws = make_workspace(tmp_path / "ws")
    base_id = (await engine.image(BUSYBOX) or {})["Id"]
    script = ["utils.sh", "--image", BUSYBOX, "sh", "main.sh"]
    first, out = run_to_end(docker_daemon, ws, *script)
    assert out == "main v1\n"
    first_image = role0_image(docker_daemon, first)
    assert first_image.startswith("txd-workspace:")

    (ws / "main.sh").write_text("echo main v2\n")
    second, out = run_to_end(docker_daemon, ws, *script)
    assert out == "main v2\n"
    assert role0_image(docker_daemon, second) != first_image
    assert (await engine.image(BUSYBOX) or {})["Id"] == base_id

    before = await all_image_ids(engine)
    third, out = run_to_end(docker_daemon, ws, *script)  # unchanged: nothing is built
    assert out == "main v2\n" and role0_image(docker_daemon, third) == role0_image(
        docker_daemon, second
    )
    assert await all_image_ids(engine) == before


async def test_dryrun_and_no_workspace(
    docker_daemon: Daemon, engine: EngineClient, tmp_path: Path
) -> None:
    ws = make_workspace(tmp_path / "ws")
    script = [
        *("utils.sh", "--image", BUSYBOX, "--entrypoint", "sh", "--"),
        *("-c", "cat /token 2>/dev/null || echo none"),
    ]
    before = await all_image_ids(engine)
    dry = docker_daemon.txctl(*RUN, "--dryrun", *script, cwd=ws, check=0).stdout
    assert f"=== WORKSPACE ===\nworkspace {ws} (2 file(s), " in dry
    assert "would build txd-workspace:" in dry and f"FROM {BUSYBOX}" in dry
    assert '"Image": "txd-workspace:' in dry  # the create request runs the workspace image
    off = docker_daemon.txctl(*RUN, "--dryrun", "--workspace", "", *script, cwd=ws, check=0)
    assert "WORKSPACE" not in off.stdout and f'"Image": "{BUSYBOX}"' in off.stdout
    _, out = run_to_end(docker_daemon, ws, "--workspace", "", *script)
    assert out == "none\n"
    assert await all_image_ids(engine) == before  # neither the dry run nor '' built anything


async def test_delete_removes_the_image_with_its_last_job(
    docker_daemon: Daemon, engine: EngineClient, tmp_path: Path
) -> None:
    ws = make_workspace(tmp_path / "ws")
    script = ["utils.sh", "--image", BUSYBOX, "sh", "main.sh"]
    a, _ = run_to_end(docker_daemon, ws, *script)
    b, _ = run_to_end(docker_daemon, ws, *script)
    image = role0_image(docker_daemon, a)
    assert role0_image(docker_daemon, b) == image
    docker_daemon.txctl("delete", a, check=0)
    assert await engine.image(image) is not None  # b's container still uses it
    docker_daemon.txctl("delete", b, check=0)
    assert await engine.image(image) is None
    assert await engine.image(BUSYBOX) is not None  # never the base


async def test_image_repo_pushes_to_the_registry(
    docker_daemon: Daemon, engine: EngineClient, docker_registry: Registry, tmp_path: Path
) -> None:
    ws = make_workspace(tmp_path / "ws")
    repo = f"{docker_registry.address}/txd-test/ws-{uuid.uuid4().hex[:8]}"
    script = ["utils.sh", "--image", BUSYBOX, "sh", "main.sh"]
    handle, out = run_to_end(docker_daemon, ws, "-c", f"image_repo={repo}", *script)
    assert out == "main v1\n"
    image = role0_image(docker_daemon, handle)
    assert image.startswith(f"{repo}:")
    docker_daemon.txctl("delete", handle, check=0)
    assert await engine.image(image) is None  # gone here, kept by the registry
    await engine.docker.images.pull(image)
    container: Any = await engine.docker.containers.run({"Image": image, "Cmd": ["sh", "main.sh"]})
    try:
        assert (await container.wait(timeout=60))["StatusCode"] == 0
        assert "".join(await container.log(stdout=True)) == "main v1\n"
    finally:
        await container.delete(force=True)
