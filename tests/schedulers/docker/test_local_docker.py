"""local_docker through a real txd on the real test engine: what runs, how it ends, its logs,
the per-app network, a missing image, DryRun, and a daemon restart mid-job; and, of the
scheduler itself, the change pushed for a job whose containers were removed behind its back.

Jobs run with `network=none` (or `host` where rank 0 is reached), except the network test,
which only inspects the app's own network: no traffic goes over a private-range network.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from docker_testing import BUSYBOX, Engine, EngineClient
from txd.schedulers.api import SUBSCRIBED, Change, DryRunInfo, Job, NoAnswer, SubmitContext
from txd.schedulers.docker.local_docker import REMOVED, create_scheduler
from txd.v1 import (
    TERMINAL_STATES,
    AppDef,
    AppState,
    AppStatus,
    BindMount,
    CfgValue,
    DeviceMount,
    Mount,
    Resource,
    Role,
    VolumeMount,
)
from txd_testing import Daemon, read_logs, read_logs_by_replica, with_name_of

NONE = {"network": "none"}


def sh_role(name: str, script: str, replicas: int = 1, image: str = BUSYBOX) -> Role:
    return Role(name=name, image=image, entrypoint="sh", args=["-c", script], num_replicas=replicas)


def app_id(handle: str) -> str:
    return handle.rsplit("/", 1)[1]


async def test_a_two_role_three_replica_app_succeeds(
    docker_client: Any, engine: EngineClient
) -> None:
    app = AppDef(
        name="two",
        roles=[
            sh_role("trainer", 'echo "t ${replica_id} $TORCHX_RANK0_HOST"', replicas=2),
            sh_role("ps", 'echo "p ${replica_id} ${app_id}"'),
        ],
    )
    handle = await docker_client.run(app, scheduler="local_docker", cfg=NONE)
    final = await docker_client.wait(handle, timeout=60)
    assert final.state == AppState.SUCCEEDED, final
    assert [(r.role, [x.exit_code for x in r.replicas]) for r in final.roles] == [
        ("trainer", [0, 0]),
        ("ps", [0]),
    ]
    logs = await read_logs_by_replica(docker_client, handle)
    aid = app_id(handle)
    assert logs == {
        "trainer/0": b"t 0 localhost\n",
        "trainer/1": b"t 1 localhost\n",
        "ps/0": f"p 0 {aid}\n".encode(),
    }
    found = await engine.containers({"txd.app_id": aid})
    assert sorted(c["Name"] for c in found) == sorted(
        f"/{aid}-{role}-{k}" for role, k in (("trainer", 0), ("trainer", 1), ("ps", 0))
    )
    assert {c["Config"]["Labels"]["txd.scheduler"] for c in found} == {"local_docker"}
    assert all(c["HostConfig"]["Init"] for c in found)
    # The engine's own list, from the labels.
    listed = {s.app_id: s for s in await docker_client.list("local_docker", backend=True)}
    assert listed[aid].state == AppState.SUCCEEDED
    assert [len(r.replicas) for r in listed[aid].roles] == [2, 1]


async def test_exit_3_fails_with_the_exit_code(docker_client: Any) -> None:
    app = AppDef(name="fails", roles=[sh_role("main", "echo bad >&2; exit 3")])
    handle = await docker_client.run(app, scheduler="local_docker", cfg=NONE)
    final = await docker_client.wait(handle, timeout=60)
    assert final.state == AppState.FAILED, final
    assert final.roles[0].replicas[0].exit_code == 3
    assert "main/0 exited with 3" in final.msg
    assert await read_logs(docker_client, handle, streams="stderr") == b"bad\n"
    assert await read_logs(docker_client, handle, streams="stdout") == b""


async def test_cancel_while_running_is_cancelled(docker_client: Any) -> None:
    app = AppDef(name="cancel", roles=[sh_role("main", "echo up; sleep 600", replicas=2)])
    handle = await docker_client.run(app, scheduler="local_docker", cfg=NONE)
    follow = docker_client.logs(handle, "main", 0, follow=True)
    assert (await anext(aiter(follow))).data == b"up\n"  # running: it wrote
    await docker_client.cancel(handle)
    final = await docker_client.wait(handle, timeout=60)
    assert final.state == AppState.CANCELLED, final
    assert [r.state for r in final.roles[0].replicas] == [AppState.CANCELLED] * 2


async def test_a_missing_image_is_a_clear_error_and_nothing_is_created(
    docker_client: Any, engine: EngineClient
) -> None:
    # A registry address on loopback where nothing listens: the pull fails at once.
    image = "127.0.0.1:9/txd-test/missing:1"
    app = AppDef(name="noimage", roles=[sh_role("main", "true", image=image)])
    before = {c["Name"] for c in await engine.containers({"txd.scheduler": "local_docker"})}
    with pytest.raises(Exception) as e:
        await docker_client.run(app, scheduler="local_docker")
    assert image in str(e.value) and "pulling it failed" in str(e.value), e.value
    after = {c["Name"] for c in await engine.containers({"txd.scheduler": "local_docker"})}
    assert after == before
    assert not [
        n
        for n in await engine.networks({"txd.scheduler": "local_docker"})
        if n["Name"].startswith("noimage-")
    ]


async def test_dryrun_prints_every_create_request_as_json(docker_client: Any) -> None:
    app = AppDef(name="dry", roles=[sh_role("main", "true", replicas=2)])
    info = await docker_client.dryrun(app, scheduler="local_docker", cfg={"env": {"A": "1"}})
    data = json.loads(info.request)
    assert data["network_create"]["Name"] == data["app_id"]
    names = [c["name"] for c in data["container_create"]]
    assert names == [f"{data['app_id']}-main-0", f"{data['app_id']}-main-1"]
    body = data["container_create"][1]["body"]
    assert body["Image"] == BUSYBOX
    assert body["HostConfig"]["NetworkMode"] == data["app_id"]
    assert "A=1" in body["Env"]
    assert f"TORCHX_RANK0_HOST={names[0]}" in body["Env"]


async def test_the_app_network_lives_as_long_as_the_job(
    docker_client: Any, engine: EngineClient
) -> None:
    app = AppDef(name="net", roles=[sh_role("main", "sleep 600", replicas=2)])
    async with engine.events(type="network", event="destroy") as events:
        handle = await docker_client.run(app, scheduler="local_docker")
        aid = app_id(handle)
        net = await engine.network(aid)
        assert net is not None, f"no network {aid}"
        assert (net["Driver"], net["Labels"]["txd.app_id"]) == ("bridge", aid)
        found = await engine.containers({"txd.app_id": aid})
        assert len(found) == 2
        for c in found:
            assert c["HostConfig"]["NetworkMode"] == aid
            assert c["Config"]["Hostname"] == c["Name"].lstrip("/")
            assert f"TORCHX_RANK0_HOST={aid}-main-0" in c["Config"]["Env"]
        await docker_client.cancel(handle)
        assert (await docker_client.wait(handle, timeout=60)).state == AppState.CANCELLED
        await events.wait_for(name=aid)  # freed once the job has ended
    await docker_client.delete(handle)
    assert await engine.containers({"txd.app_id": aid}) == []


async def test_a_single_replica_joins_the_default_network_and_no_network_is_made(
    docker_client: Any, engine: EngineClient
) -> None:
    # Only replicas that must talk get a network of their own (it triples a start's time).
    app = AppDef(name="alone", roles=[sh_role("main", "sleep 600")])
    info = await docker_client.dryrun(app, scheduler="local_docker")
    data = json.loads(info.request)
    assert data["network_create"] is None
    [create] = data["container_create"]
    assert create["body"]["HostConfig"]["NetworkMode"] == "default"
    handle = await docker_client.run(app, scheduler="local_docker")
    aid = app_id(handle)
    [c] = await engine.containers({"txd.app_id": aid})
    assert c["State"]["Running"], c["State"]
    assert c["HostConfig"]["NetworkMode"] == "default"
    assert "TORCHX_RANK0_HOST=localhost" in c["Config"]["Env"]  # rank 0 is itself
    assert await engine.network(aid) is None
    assert await engine.networks({"txd.app_id": aid}) == []
    await docker_client.cancel(handle)
    assert (await docker_client.wait(handle, timeout=60)).state == AppState.CANCELLED
    await docker_client.delete(handle)


async def test_rank1_reaches_rank0_by_torchx_rank0_host_on_the_host_network(
    docker_client: Any,
) -> None:
    # Rank 0 serves one line on a loopback port; rank 1 connects to $TORCHX_RANK0_HOST.
    port = 29000 + os.getpid() % 1000
    script = (
        f'if [ "${{replica_id}}" = 0 ]; then echo hello | nc -l -p {port}; '
        f'else for i in $(seq 100); do nc "$TORCHX_RANK0_HOST" {port} && exit 0; '
        "sleep 0.1; done; exit 1; fi"
    )
    app = AppDef(name="rank0", roles=[sh_role("main", script, replicas=2)])
    handle = await docker_client.run(app, scheduler="local_docker", cfg={"network": "host"})
    final = await docker_client.wait(handle, timeout=60)
    assert final.state == AppState.SUCCEEDED, final
    assert (await read_logs_by_replica(docker_client, handle))["main/1"] == b"hello\n"


async def test_a_restarted_daemon_finds_the_running_job(own_docker_daemon: Daemon) -> None:
    app = AppDef(name="restart", roles=[sh_role("main", "echo a; sleep 600")])
    async with own_docker_daemon.client() as c:
        handle = await c.run(app, scheduler="local_docker", cfg=NONE)
        follow = c.logs(handle, "main", 0, follow=True)
        assert (await anext(aiter(follow))).data == b"a\n"
    own_docker_daemon.stop()
    own_docker_daemon.restart()
    async with own_docker_daemon.client() as c:
        status = await c.status(handle)
        assert status.state == AppState.RUNNING, status
        await c.cancel(handle)
        assert (await c.wait(handle, timeout=60)).state == AppState.CANCELLED


async def test_logs_followed_while_running_then_since_until_and_streams(
    docker_client: Any, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    script = "echo early; echo err >&2; while [ ! -e /gate/go ]; do sleep 0.05; done; echo late"
    role = sh_role("main", script)
    role.mounts.append(Mount(bind=BindMount(src_path=str(gate), dst_path="/gate")))
    handle = await docker_client.run(
        AppDef(name="logs", roles=[role]), scheduler="local_docker", cfg=NONE
    )
    follow = aiter(docker_client.logs(handle, "main", 0, follow=True, streams="stdout"))
    assert (await anext(follow)).data == b"early\n"  # while it runs, before "late" exists
    # "early" was stamped before it reached us; "late" is written only after the gate opens.
    middle = dt.datetime.now(dt.UTC)
    (gate / "go").touch()
    rest = b"".join([chunk.data async for chunk in follow])  # ends with the job
    assert rest == b"late\n"
    assert (await docker_client.status(handle)).state == AppState.SUCCEEDED
    out = {"streams": "stdout"}
    assert await read_logs(docker_client, handle, until=middle, **out) == b"early\n"
    assert await read_logs(docker_client, handle, since=middle, **out) == b"late\n"
    assert await read_logs(docker_client, handle, streams="stderr") == b"err\n"
    both = await read_logs(docker_client, handle)
    assert sorted(both.splitlines()) == [b"early", b"err", b"late"]


async def test_the_feed_resyncs_after_the_engine_restarts(
    own_docker_daemon: Daemon, docker_engine: Engine, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    role = sh_role("main", "echo up; while [ ! -e /gate/go ]; do sleep 0.05; done")
    role.mounts.append(Mount(bind=BindMount(src_path=str(gate), dst_path="/gate")))
    async with own_docker_daemon.client() as c:
        handle = await c.run(
            AppDef(name="across", roles=[role]), scheduler="local_docker", cfg=NONE
        )
        follow = aiter(c.logs(handle, "main", 0, follow=True))
        assert (await anext(follow)).data == b"up\n"
        # The event stream drops with the engine; the container runs on (live-restore).
        docker_engine.restart()
        (gate / "go").touch()
        # Its end reaches txd only through a new subscription.
        final = await c.wait(handle, timeout=60)
        assert final.state == AppState.SUCCEEDED, final
        assert not final.stale_msg, final


async def test_a_job_removed_behind_txds_back_keeps_its_last_state_marked(
    own_docker_daemon: Daemon, docker_engine: Engine
) -> None:
    app = AppDef(name="removed", roles=[sh_role("main", "echo up; sleep 600")])
    async with own_docker_daemon.client() as c:
        handle = await c.run(app, scheduler="local_docker", cfg=NONE)
        follow = aiter(c.logs(handle, "main", 0, follow=True))
        assert (await anext(follow)).data == b"up\n"
    own_docker_daemon.stop()
    docker_engine.docker("rm", "-f", f"{app_id(handle)}-main-0")
    own_docker_daemon.restart()
    async with own_docker_daemon.client() as c:
        async with asyncio.timeout(30):  # until the restarted daemon's feed has asked
            async for status in c.watch(handle):
                if status.stale_msg:
                    break
        assert status.state == AppState.RUNNING, status
        assert "removed outside txd" in status.stale_msg, status
        await c.delete(handle)


@contextlib.asynccontextmanager
async def own_scheduler(
    engine: Engine, tmp_path: Path, name: str
) -> AsyncIterator[tuple[Any, DryRunInfo[Any]]]:
    """A local_docker scheduler of the test's own on `engine`, started, and the dry run of an
    app `name` whose one container sleeps for 600 s."""
    sched = create_scheduler(name, settings={"docker_host": engine.host})
    try:
        async with asyncio.TaskGroup() as tasks:
            await sched.start(tasks)
            app = AppDef(name=name, roles=[sh_role("main", "sleep 600")])
            ctx = SubmitContext(cwd=str(tmp_path), env={})
            yield sched, await sched.submit_dryrun(app, {"network": CfgValue(str="none")}, ctx)
    finally:
        await sched.aclose()


async def test_a_job_removed_behind_txds_back_is_pushed_as_no_answer(
    docker_engine: Engine, tmp_path: Path
) -> None:
    """The destroy event of a job's last container is answered as describe_many would answer:
    NoAnswer (removed outside txd), never a SUBSCRIBED that asks the daemon to ask again."""
    async with own_scheduler(docker_engine, tmp_path, "removed-live") as (sched, info):
        async with contextlib.aclosing(sched.changes()) as changes:
            assert await anext(changes) is SUBSCRIBED
            job = await sched.schedule(info)
            docker_engine.docker("rm", "-f", job.native["containers"][0]["name"])
            async with asyncio.timeout(30):
                async for item in changes:
                    assert isinstance(item, Change), "SUBSCRIBED again, to be asked"
                    if item.app_id == job.app_id and not isinstance(item.status, AppStatus):
                        break
        assert item.status == NoAnswer(REMOVED), item
        await sched.delete(Job(job.app_id, job.native))


async def test_an_exit_between_two_change_streams_is_pushed_by_the_second(
    docker_engine: Engine, tmp_path: Path
) -> None:
    """A change stream ends (the engine restarts, say) and a container exits before the next
    one opens: the next stream pushes that end, though no event comes after it opened (the
    engine replays what it holds since the last event the first stream saw). The daemon's
    resync cannot be trusted with it: the engine's listing shows an exit a while after."""
    async with own_scheduler(docker_engine, tmp_path, "between") as (sched, info):
        async with contextlib.aclosing(sched.changes()) as first:
            assert await anext(first) is SUBSCRIBED
            job = await sched.schedule(info)
            async with asyncio.timeout(30):
                async for item in first:
                    status = item.status
                    if isinstance(status, AppStatus) and status.state == AppState.RUNNING:
                        break
        name = job.native["containers"][0]["name"]
        docker_engine.docker("kill", name)
        docker_engine.docker("wait", name)  # the exit is recorded: its die event was sent
        async with contextlib.aclosing(sched.changes()) as second:
            assert await anext(second) is SUBSCRIBED
            async with asyncio.timeout(30):
                async for item in second:
                    status = item.status
                    if isinstance(status, AppStatus) and status.state in TERMINAL_STATES:
                        break
        assert item.app_id == job.app_id and status.state == AppState.FAILED, item
        await sched.delete(Job(job.app_id, job.native))


async def test_a_start_is_pushed_as_running_from_its_events_without_asking_the_engine(
    docker_engine: Engine, tmp_path: Path
) -> None:
    """The create and start events of an app's every container tell its status in full: they
    are pushed as SUBMITTED and RUNNING with no listing or inspect of the engine's."""
    async with own_scheduler(docker_engine, tmp_path, "told") as (sched, info):
        async with contextlib.aclosing(sched.changes()) as changes:
            assert await anext(changes) is SUBSCRIBED
            asked = sched.engine.calls.copy()
            job = await sched.schedule(info)
            pushed = []
            async with asyncio.timeout(30):
                async for item in changes:
                    assert isinstance(item, Change) and isinstance(item.status, AppStatus)
                    if item.app_id == job.app_id:
                        pushed.append(item.status.state)
                        if item.status.state == AppState.RUNNING:
                            break
            calls = sched.engine.calls
            assert (calls["containers.list"], calls["containers.inspect"]) == (
                asked["containers.list"],
                asked["containers.inspect"],
            ), dict(calls)
            assert pushed in ([AppState.SUBMITTED, AppState.RUNNING], [AppState.RUNNING])
        await sched.delete(Job(job.app_id, job.native))


async def test_dryrun_maps_resources_mounts_retries_ports_and_options(
    docker_client: Any, tmp_path: Path
) -> None:
    role = sh_role("main", "true")
    role.resource.CopyFrom(Resource(cpu=2, gpu=1, mem_mb=512))
    role.max_retries = 3
    role.port_map["http"] = 8080
    role.mounts.extend(
        [
            Mount(bind=BindMount(src_path="data", dst_path="/data", read_only=True)),
            Mount(volume=VolumeMount(src="cache", dst_path="/cache")),
            Mount(device=DeviceMount(src_path="/dev/fuse", dst_path="/dev/fuse")),
        ]
    )
    cfg = {"privileged": True, "copy_env": ["TXDT_*"], "shm_size": "64m"}
    env = {"TXDT_A": "a", "OTHER": "o"}
    info = await docker_client.dryrun(
        AppDef(name="opts", roles=[role]),
        scheduler="local_docker",
        cfg=cfg,
        cwd=str(tmp_path),
        env=env,
    )
    [create] = json.loads(info.request)["container_create"]
    body, host = create["body"], create["body"]["HostConfig"]
    assert "TXDT_A=a" in body["Env"] and not [e for e in body["Env"] if e.startswith("OTHER=")]
    assert body["ExposedPorts"] == {"8080/tcp": {}}
    assert (host["NanoCpus"], host["Memory"], host["ShmSize"]) == (2 * 10**9, 512 << 20, 64 << 20)
    assert host["DeviceRequests"][0]["Count"] == 1
    assert host["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    assert host["Privileged"] is True and host["Init"] is True
    assert host["Mounts"] == [
        {"Type": "bind", "Source": str(tmp_path / "data"), "Target": "/data", "ReadOnly": True},
        {"Type": "volume", "Source": "cache", "Target": "/cache", "ReadOnly": False},
    ]
    assert host["Devices"] == [
        {"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse", "CgroupPermissions": "rwm"}
    ]


@pytest.mark.parametrize(
    ("cfg", "role_image", "wanted"),
    [
        ({"shm_size": "lots"}, BUSYBOX, "cfg.shm_size: expected a size"),
        ({"stop_timeout": -1}, BUSYBOX, "cfg.stop_timeout: must be >= 0"),
        ({}, "", "app.roles[0].image: local_docker runs images"),
    ],
)
async def test_bad_input_is_a_one_line_error_naming_it(
    docker_client: Any, cfg: dict[str, Any], role_image: str, wanted: str
) -> None:
    app = AppDef(name="bad", roles=[sh_role("main", "true", image=role_image)])
    with pytest.raises(Exception) as e:
        await docker_client.dryrun(app, scheduler="local_docker", cfg=cfg)
    assert wanted in str(e.value), e.value


async def test_describe_native_is_the_create_bodies_sent(
    docker_daemon: Daemon, docker_client: Any, engine: EngineClient
) -> None:
    """txd keeps the create requests it sent (issue 21), equal to DryRun's but for the drawn
    name."""
    app = AppDef(name="kept", roles=[sh_role("main", "echo up", replicas=2)])
    handle = await docker_client.run(app, scheduler="local_docker", cfg=NONE)
    dry = await docker_client.dryrun(app, scheduler="local_docker", cfg=NONE)
    assert (await docker_client.wait(handle, timeout=60)).state == AppState.SUCCEEDED
    kept = (await docker_client.describe(handle, native=True)).native
    assert kept.recorded
    assert kept.text == with_name_of(dry.request, kept.text, "kept")
    assert kept.text.count('"Image"') == 2, kept.text
    out = docker_daemon.txctl("describe", "--native", app_id(handle), check=True).stdout
    assert out == kept.text
