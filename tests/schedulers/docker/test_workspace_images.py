"""Workspace images built by a real Docker engine (schedulers/workspace/images.py): what lands in
the image, the content-keyed cache, .dockerignore, Dockerfile.txd, and a push to a real
registry pulled back. The engine's data root outlives a test run, so every workspace holds a
fresh token: its first build is a real one."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import aiodocker
import pytest
from docker_testing import BUSYBOX, Engine, EngineClient, Registry
from txd.schedulers.errors import BackendUnavailable, FailedPrecondition, InvalidArgument
from txd.schedulers.workspace.images import (
    LABEL,
    build_workspace_image,
    prepare_app,
    remove_if_unused,
)
from txd.v1 import AppDef, Role


def make_workspace(root: Path) -> Path:
    root.mkdir()
    (root / "token").write_text(uuid.uuid4().hex)
    (root / "main.sh").write_text("echo main v1\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "lib.sh").write_text("echo lib\n")
    return root


async def run_in(docker: aiodocker.Docker, image: str, script: str) -> str:
    """The output of `sh -c script` in a container of image (removed afterwards)."""
    container = await docker.containers.run({"Image": image, "Cmd": ["sh", "-c", script]})
    try:
        result = await container.wait(timeout=60)
        out = "".join(await container.log(stdout=True, stderr=True))
        assert result["StatusCode"] == 0, out
        return out
    finally:
        await container.delete(force=True)


async def all_image_ids(docker: aiodocker.Docker) -> set[str]:
    """Every image id, intermediate ones included: a build adds some, a cache hit none."""
    return {i["Id"] for i in await docker.images.list(all=True)}


async def test_build_then_cache_then_a_change_builds_again(
    engine: EngineClient, tmp_path: Path
) -> None:
    docker = engine.docker
    ws = make_workspace(tmp_path / "ws")
    base_id = (await docker.images.inspect(BUSYBOX))["Id"]

    dry = await build_workspace_image(docker, BUSYBOX, str(ws), dryrun=True)
    assert f"would build {dry.image} FROM {BUSYBOX}" in dry.said
    assert await engine.image(dry.image) is None  # a dry run builds nothing

    first = await build_workspace_image(docker, BUSYBOX, str(ws))
    assert first.built and first.image == dry.image
    assert first.image.startswith("txd-workspace:")
    inspected = await engine.image(first.image)
    assert inspected is not None and inspected["Config"]["Labels"][LABEL] == "1"
    assert inspected["Config"]["Labels"]["torchx.pytorch.org/version"] == "0.7.0"  # TorchX's
    # The busybox image sets no WORKDIR: the workspace lands in /, as TorchX's COPY . . does.
    out = await run_in(docker, first.image, "sh /main.sh; sh /pkg/lib.sh; cat /token")
    assert out == f"main v1\nlib\n{(ws / 'token').read_text()}"

    before = await all_image_ids(docker)
    again = await build_workspace_image(docker, BUSYBOX, str(ws))
    assert not again.built and again.image == first.image
    assert "was built already (unchanged)" in again.said
    assert await all_image_ids(docker) == before  # nothing was built
    cached_dry = await build_workspace_image(docker, BUSYBOX, str(ws), dryrun=True)
    assert "is built already (unchanged)" in cached_dry.said

    (ws / "main.sh").write_text("echo main v2\n")
    changed = await build_workspace_image(docker, BUSYBOX, str(ws))
    assert changed.built and changed.image != first.image
    assert (await docker.images.inspect(BUSYBOX))["Id"] == base_id  # the base is untouched
    assert await run_in(docker, changed.image, "sh /main.sh") == "main v2\n"
    assert await run_in(docker, first.image, "sh /main.sh") == "main v1\n"
    (ws / "main.sh").chmod(0o755)  # a mode is content too
    moded = await build_workspace_image(docker, BUSYBOX, str(ws))
    assert moded.built and moded.image not in (first.image, changed.image)


async def test_workspace_goes_to_the_images_workdir(
    docker_engine: Engine, engine: EngineClient, tmp_path: Path
) -> None:
    base = f"txd-test/workdir-{uuid.uuid4().hex[:8]}:latest"
    docker_engine.docker(
        "build", "-t", base, "-", input=f"FROM {BUSYBOX}\nWORKDIR /srv/app\n", timeout=120
    )
    try:
        ws = make_workspace(tmp_path / "ws")
        built = await build_workspace_image(engine.docker, base, str(ws))
        assert await run_in(engine.docker, built.image, "pwd; sh main.sh") == "/srv/app\nmain v1\n"
    finally:
        docker_engine.docker("rmi", "-f", base, check=False)


async def test_dockerignore_is_honoured(engine: EngineClient, tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    (ws / "secret.env").write_text("KEY=1\n")
    (ws / "data").mkdir()
    (ws / "data" / "big.bin").write_bytes(b"0" * 1000)
    (ws / "data" / "keep.txt").write_text("kept\n")
    (ws / "notes.md").write_text("n\n")
    (ws / ".dockerignore").write_text("# not shipped\nsecret.env\ndata\n!data/keep.txt\n*.md\n")
    built = await build_workspace_image(engine.docker, BUSYBOX, str(ws))
    assert "(5 file(s)" in built.said  # token, main.sh, lib.sh, keep.txt, .dockerignore
    out = await run_in(engine.docker, built.image, "ls -A / /data | sort")
    listed = set(out.split())
    assert {"main.sh", "pkg", "token", "keep.txt", ".dockerignore"} <= listed
    assert not {"secret.env", "big.bin", "notes.md"} & listed

    # An ignored file's change changes nothing: the cache holds.
    (ws / "secret.env").write_text("KEY=2\n")
    again = await build_workspace_image(engine.docker, BUSYBOX, str(ws))
    assert again.image == built.image and not again.built


async def test_the_workspaces_own_dockerfile(engine: EngineClient, tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    (ws / "Dockerfile.torchx").write_text("ARG IMAGE\nFROM $IMAGE\nRUN echo torchx > /which\n")
    (ws / "Dockerfile.txd").write_text(
        "ARG IMAGE\nFROM $IMAGE\nARG WORKSPACE\nCOPY . /code\nWORKDIR /code\n"
        'RUN echo "dockerfile.txd from $WORKSPACE" > /which\n'
    )
    built = await build_workspace_image(engine.docker, BUSYBOX, str(ws))
    assert "its Dockerfile.txd" in built.said
    out = await run_in(engine.docker, built.image, "cat /which; pwd; sh main.sh")
    assert out == f"dockerfile.txd from {ws}\n/code\nmain v1\n"

    (ws / "Dockerfile.txd").unlink()  # TorchX's name is the fallback
    torchx = await build_workspace_image(engine.docker, BUSYBOX, str(ws))
    assert await run_in(engine.docker, torchx.image, "cat /which") == "torchx\n"

    (ws / "Dockerfile.torchx").write_text("ARG IMAGE\nFROM $IMAGE\nRUN echo no >&2; exit 3\n")
    with pytest.raises(FailedPrecondition, match=r"building txd-workspace:\w+ from workspace .*"):
        await build_workspace_image(engine.docker, BUSYBOX, str(ws))


async def test_a_missing_base_image_is_named(engine: EngineClient, tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    missing = "127.0.0.1:9/txd-test/nothing-here:1"
    dry = await build_workspace_image(engine.docker, missing, str(ws), dryrun=True)
    assert f"would pull {missing}, then build an image FROM it" in dry.said
    with pytest.raises(FailedPrecondition, match=f"cannot pull image {missing}: "):
        await build_workspace_image(engine.docker, missing, str(ws))


async def test_push_to_a_registry_and_pull_back(
    engine: EngineClient, docker_registry: Registry, tmp_path: Path
) -> None:
    docker = engine.docker
    ws = make_workspace(tmp_path / "ws")
    repo = f"{docker_registry.address}/txd-test/ws-{uuid.uuid4().hex[:8]}"
    dry = await build_workspace_image(docker, BUSYBOX, str(ws), image_repo=repo, dryrun=True)
    assert dry.said.endswith(f"and push it to {repo}")
    built = await build_workspace_image(docker, BUSYBOX, str(ws), image_repo=repo)
    assert built.image.startswith(f"{repo}:") and built.said.endswith(f"pushed to {repo}")

    await docker.images.delete(built.image)
    assert await engine.image(built.image) is None
    await docker.images.pull(built.image)
    pulled: Any = await engine.image(built.image)
    assert pulled is not None and pulled["Config"]["Labels"][LABEL] == "1"
    assert await run_in(docker, built.image, "sh /main.sh") == "main v1\n"


async def test_prepare_app_replaces_role_0s_image(engine: EngineClient, tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    app = AppDef(
        name="a",
        roles=[Role(name="main", image=BUSYBOX), Role(name="side", image=BUSYBOX)],
    )
    out, said = await prepare_app(engine.docker, app, str(ws), dryrun=True)
    assert out.roles[0].image.startswith("txd-workspace:") and "would build" in said
    assert out.roles[1].image == BUSYBOX and app.roles[0].image == BUSYBOX
    with pytest.raises(InvalidArgument, match=r"app.roles\[0\].image: a workspace is built"):
        await prepare_app(engine.docker, AppDef(roles=[Role(name="r")]), str(ws))
    with pytest.raises(InvalidArgument, match=r"cfg\.image_repo: 'r:tag' is not a repository"):
        await prepare_app(engine.docker, app, str(ws), image_repo="r:tag")


async def test_remove_if_unused_keeps_images_in_use_and_others(
    engine: EngineClient, tmp_path: Path
) -> None:
    docker = engine.docker
    built = await build_workspace_image(docker, BUSYBOX, str(make_workspace(tmp_path / "ws")))
    container = await docker.containers.create({"Image": built.image, "Cmd": ["true"]})
    try:
        assert not await remove_if_unused(docker, built.image)  # the engine's 409
        assert await engine.image(built.image) is not None
    finally:
        await container.delete(force=True)
    assert await remove_if_unused(docker, built.image)
    assert await engine.image(built.image) is None
    assert not await remove_if_unused(docker, built.image)  # gone already
    assert not await remove_if_unused(docker, BUSYBOX)  # not a workspace image
    assert await engine.image(BUSYBOX) is not None


async def test_an_engine_that_does_not_answer_is_unavailable(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    async with aiodocker.Docker(url=f"unix://{tmp_path}/no-engine.sock") as docker:
        with pytest.raises(BackendUnavailable, match="the Docker engine does not answer"):
            await build_workspace_image(docker, BUSYBOX, str(ws))
