"""TorchX 0.7's container labels on local_docker's containers, beside txd's own: in the request
(against TorchX's own dryrun of the same app), on the real engine (`docker ps --filter label=`),
and as TorchX's own DockerScheduler reads them: its `list` and `describe`, pointed at the test
engine, find a job txd ran.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from docker_testing import BUSYBOX, Engine, EngineClient
from torchx import specs
from torchx.schedulers.docker_scheduler import DockerScheduler
from txd.v1 import AppDef, AppState, Role
from txd_testing import unique

SCHED = "local_docker"
APP_ID_LABEL = "torchx.pytorch.org/app-id"


def two_roles(name: str) -> AppDef:
    def role(r: str, n: int) -> Role:
        return Role(name=r, image=BUSYBOX, entrypoint="true", num_replicas=n)

    return AppDef(name=name, roles=[role("trainer", 2), role("ps", 1)])


def key(labels: dict[str, str]) -> tuple[str, str]:
    return labels["torchx.pytorch.org/role-name"], labels["torchx.pytorch.org/replica-id"]


def torchx_labels_of(app: AppDef, app_id: str) -> dict[tuple[str, str], dict[str, str]]:
    """TorchX's labels per (role, replica), from TorchX's own dryrun of the same app, its
    random app id replaced by txd's."""
    roles = [
        specs.Role(name=r.name, image=r.image, entrypoint=r.entrypoint, num_replicas=r.num_replicas)
        for r in app.roles
    ]
    info = DockerScheduler("torchx").submit_dryrun(specs.AppDef(name=app.name, roles=roles), {})
    theirs = info.request.app_id
    out = {}
    for c in info.request.containers:
        labels = {k: v.replace(theirs, app_id) for k, v in c.kwargs["labels"].items()}
        out[key(labels)] = labels
    return out


async def test_dryrun_labels_every_container_as_torchx_does(docker_client: Any) -> None:
    app = two_roles("dry")
    info = await docker_client.dryrun(app, scheduler=SCHED, cfg={"network": "none"})
    data = json.loads(info.request)
    want = torchx_labels_of(app, data["app_id"])
    got = {key(c["body"]["Labels"]): c["body"]["Labels"] for c in data["container_create"]}
    assert list(got) == list(want) == [("trainer", "0"), ("trainer", "1"), ("ps", "0")]
    for k, labels in got.items():
        assert {name: labels.get(name) for name in want[k]} == want[k]
        assert labels["txd.app_id"] == data["app_id"]  # txd's own beside them


async def test_the_engine_finds_the_containers_by_torchx_labels_and_torchx_reads_them(
    docker_client: Any, engine: EngineClient, docker_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = two_roles(unique("txlabels"))
    handle = await docker_client.run(app, scheduler=SCHED, cfg={"network": "none"})
    aid = handle.rsplit("/", 1)[1]
    assert (await docker_client.wait(handle, timeout=60)).state == AppState.SUCCEEDED
    # docker ps --filter label=torchx.pytorch.org/app-id=<id> [--filter label=...role-name=...]
    found = [c["Config"]["Labels"] for c in await engine.containers({APP_ID_LABEL: aid})]
    want = torchx_labels_of(app, aid)
    assert sorted(key(labels) for labels in found) == sorted(want)
    for labels in found:
        assert {name: labels.get(name) for name in want[key(labels)]} == want[key(labels)]
    ps = await engine.containers({APP_ID_LABEL: aid, "torchx.pytorch.org/role-name": "ps"})
    assert [c["Name"] for c in ps] == [f"/{aid}-ps-0"]
    versions = await engine.containers({APP_ID_LABEL: aid, "torchx.pytorch.org/version": "0.7.0"})
    assert len(versions) == 3

    # TorchX itself, on the same engine: `torchx list` and `torchx status` find txd's job.
    monkeypatch.setenv("DOCKER_HOST", docker_engine.host)
    torchx = DockerScheduler("torchx")
    listed = await asyncio.to_thread(torchx.list)
    assert {(a.app_id, a.state) for a in listed if a.app_id == aid} == {
        (aid, specs.AppState.SUCCEEDED)
    }
    described = await asyncio.to_thread(torchx.describe, aid)
    assert described is not None and described.state == specs.AppState.SUCCEEDED
    assert sorted((r.name, r.num_replicas) for r in described.roles) == [("ps", 1), ("trainer", 2)]
