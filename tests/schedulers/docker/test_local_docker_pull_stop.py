"""local_docker's image pulls (the `pull` option) and stop grace (`stop_timeout`), through a real
txd on the real test engine and the local registry (issue 20, gap 8):

- a tag moved in its registry (`:latest` pushed again) runs anew on the next run by default, as
  TorchX pulls every run; pull=missing runs the engine's copy;
- an image built on the engine and never pushed is not pulled (nothing newer can be anywhere);
- a failed pull of an image the engine has fails the run under `always`, naming the fix;
- pull=never with a missing image is refused;
- a cancelled container gets 10 s after SIGTERM by default: one that needs ~3 s to checkpoint
  finishes it; with stop_timeout=1 it is killed part way.

Jobs run with `network=none`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from docker_testing import BUSYBOX, Engine, EngineClient, Registry
from txd.v1 import AppDef, AppState, Role
from txd_testing import read_logs

NONE = {"network": "none"}


def echo_app(image: str, script: str = "echo $V") -> AppDef:
    role = Role(name="main", image=image, entrypoint="sh", args=["-c", script])
    return AppDef(name="pull", roles=[role])


async def run_output(client: Any, image: str, **cfg: Any) -> bytes:
    handle = await client.run(echo_app(image), scheduler="local_docker", cfg={**NONE, **cfg})
    final = await client.wait(handle, timeout=60)
    assert final.state == AppState.SUCCEEDED, final
    return await read_logs(client, handle)


async def pulls_made(client: Any) -> int:
    infos = (await client.schedulers()).schedulers
    return int(next(i for i in infos if i.name == "local_docker").backend_calls["images.pull"])


def build(docker_engine: Engine, tag: str, value: str) -> None:
    """An image FROM the test busybox whose $V is `value`, tagged `tag` on the engine."""
    dockerfile = f"FROM {BUSYBOX}\nENV V={value}\n"
    docker_engine.docker("build", "-t", tag, "-", input=dockerfile, timeout=120)


@pytest.fixture
def repo(docker_engine: Engine, docker_registry: Registry) -> Iterator[str]:
    """A fresh repository in the local registry; its tags are removed from the engine after."""
    name = f"{docker_registry.address}/txd-test/pull-{uuid.uuid4().hex[:8]}"
    yield name
    ids = docker_engine.docker("images", "-q", name).stdout.split()  # untagged ones too
    if ids:
        docker_engine.docker("rmi", "-f", *sorted(set(ids)), check=False)


async def test_a_moved_latest_tag_runs_anew_by_default(
    docker_client: Any, docker_engine: Engine, repo: str
) -> None:
    latest = f"{repo}:latest"
    build(docker_engine, latest, "v1")
    docker_engine.docker("push", latest)
    assert await run_output(docker_client, latest) == b"v1\n"
    # v2 goes to the registry under the same tag; the engine's :latest is put back on v1, as
    # on a host that pulled v1 before someone else pushed v2.
    v1_id = docker_engine.docker("image", "inspect", "-f", "{{.Id}}", latest).stdout.strip()
    build(docker_engine, latest, "v2")
    docker_engine.docker("push", latest)
    docker_engine.docker("tag", v1_id, latest)

    assert await run_output(docker_client, latest, pull="missing") == b"v1\n"  # stale copy
    assert await run_output(docker_client, latest) == b"v2\n"  # pulled: the registry's


async def test_an_image_built_here_and_never_pushed_runs_unpulled(
    docker_client: Any, docker_engine: Engine, repo: str
) -> None:
    local = f"{repo}:local"  # a registry that has nothing under this name
    build(docker_engine, local, "built-here")
    before = await pulls_made(docker_client)
    assert await run_output(docker_client, local) == b"built-here\n"
    assert await run_output(docker_client, BUSYBOX, pull="always") == b"\n"
    assert await pulls_made(docker_client) == before


async def test_a_failed_pull_of_a_pulled_image_fails_under_always(
    docker_client: Any, docker_engine: Engine, engine: EngineClient, repo: str
) -> None:
    pushed, gone = f"{repo}:pushed", f"{repo}:gone"
    build(docker_engine, pushed, "old")
    docker_engine.docker("push", pushed)
    docker_engine.docker("tag", pushed, gone)  # of this repository, but not in the registry
    before = {c["Id"] for c in await engine.containers({"txd.scheduler": "local_docker"})}
    with pytest.raises(Exception) as e:
        await docker_client.run(echo_app(gone), scheduler="local_docker", cfg=NONE)
    said = str(e.value)
    assert f"pulling image {gone!r} failed" in said and "set pull=missing" in said, said
    after = {c["Id"] for c in await engine.containers({"txd.scheduler": "local_docker"})}
    assert after == before
    assert await run_output(docker_client, gone, pull="missing") == b"old\n"


async def test_pull_never_refuses_a_missing_image(docker_client: Any) -> None:
    image = "127.0.0.1:9/txd-test/missing:1"
    with pytest.raises(Exception) as e:
        await docker_client.run(echo_app(image), scheduler="local_docker", cfg={"pull": "never"})
    assert f"image {image!r} is not on the Docker engine, and pull=never" in str(e.value)


async def test_a_bad_pull_policy_is_named(docker_client: Any) -> None:
    with pytest.raises(Exception) as e:
        await docker_client.dryrun(echo_app(BUSYBOX), scheduler="local_docker", cfg={"pull": "no"})
    assert "cfg.pull: expected one of always, missing, never, got 'no'" in str(e.value)


# Checkpoints on SIGTERM for ~3 s, then exits 0. The shell runs its trap between sleeps.
CHECKPOINTING = (
    "trap 'echo checkpointing; sleep 3; echo saved; exit 0' TERM; echo ready; "
    "while :; do sleep 0.1; done"
)


async def cancel_once_ready(client: Any, engine: EngineClient, **cfg: Any) -> tuple[bytes, int]:
    """Runs CHECKPOINTING, cancels it once it wrote `ready`: its log and its exit code."""
    app = echo_app(BUSYBOX, CHECKPOINTING)
    handle = await client.run(app, scheduler="local_docker", cfg={**NONE, **cfg})
    follow = client.logs(handle, "main", 0, follow=True)
    assert (await anext(aiter(follow))).data == b"ready\n"
    await client.cancel(handle)
    final = await client.wait(handle, timeout=60)
    assert final.state == AppState.CANCELLED, final
    aid = handle.rsplit("/", 1)[1]
    (container,) = await engine.containers({"txd.app_id": aid})
    return await read_logs(client, handle), int(container["State"]["ExitCode"])


async def test_a_cancelled_job_gets_10_s_to_checkpoint(
    docker_client: Any, engine: EngineClient
) -> None:
    logs, code = await cancel_once_ready(docker_client, engine)
    assert (logs, code) == (b"ready\ncheckpointing\nsaved\n", 0)


async def test_stop_timeout_shortens_the_grace(docker_client: Any, engine: EngineClient) -> None:
    logs, code = await cancel_once_ready(docker_client, engine, stop_timeout=1)
    assert (logs, code) == (b"ready\ncheckpointing\n", 137)  # SIGKILL before `saved`
