"""aws_batch end to end: a real txd, moto's Batch in docker mode (each job's containers really
run on the tests' dockerd), CloudWatch Logs in moto.

What moto cannot show is pinned elsewhere: per-node states and exit codes, RUNNABLE/STARTING
and status reasons by recorded describe_jobs answers (test_aws_batch_status.py); a running
job's log stream by the proxy (aws_proxy.running_streams), since moto names it only after the
container exits; the request by golden JSON (test_aws_batch_request.py).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from aws_proxy import AwsProxy
from docker_testing import BUSYBOX
from moto_testing import LOG_GROUP, Moto, Queue, client, make_batch_daemon, put_lines
from txd.v1 import AppDef, AppState, AppStatus, Resource, Role
from txd_testing import Daemon, read_logs, recorded_native, remove_tree, with_name_of

pytestmark = pytest.mark.timeout(120)
SCHED = "aws_batch"


def sh_role(name: str, script: str, replicas: int = 1) -> Role:
    return Role(
        name=name,
        image=BUSYBOX,
        entrypoint="sh",
        args=["-c", script],
        num_replicas=replicas,
        resource=Resource(cpu=1, mem_mb=128),
    )


def sh_app(script: str, name: str = "t", replicas: int = 1) -> AppDef:
    return AppDef(name=name, roles=[sh_role("main", script, replicas)])


def cfg(queue: Queue) -> dict[str, Any]:
    return {"queue": queue.name}


async def wait_running(c: Any, handle: str) -> AppStatus:
    seen = []
    async with asyncio.timeout(60):
        async for status in c.watch(handle):
            seen.append(AppState.Name(status.state))
            if status.state == AppState.RUNNING:
                return status
    raise AssertionError(f"{handle} ended before it ran: {seen}")


async def calls(c: Any, op: str) -> int:
    for s in (await c.schedulers()).schedulers:
        if s.name == SCHED:
            return int(s.backend_calls.get(op, 0))
    raise AssertionError(f"no {SCHED} in the daemon's schedulers")


async def test_a_job_succeeds_and_its_logs_are_read_back(
    batch_client: Any, batch_queue: Queue, moto: Moto
) -> None:
    handle = await batch_client.run(
        sh_app("echo hello; echo to-stderr >&2; echo $TORCHX_ROLE_NAME"), SCHED, cfg(batch_queue)
    )
    assert handle.startswith(f"{SCHED}://") and f"/{batch_queue.name}:t-" in handle
    final = await batch_client.wait(handle, timeout=60)
    assert final.state == AppState.SUCCEEDED, final
    assert [(r.role, r.id, r.state) for r in final.roles[0].replicas] == [
        ("main", 0, AppState.SUCCEEDED)
    ]
    logs = await read_logs(batch_client, handle)
    assert sorted(logs.splitlines()) == [b"hello", b"main", b"to-stderr"]
    assert await read_logs(batch_client, handle, regex="^hel") == b"hello\n"
    # The job carries txd's tags, which list finds it by.
    listed = [s.app_id for s in await batch_client.list(scheduler=SCHED, backend=True)]
    assert final.app_id in listed


async def test_a_job_that_exits_3_fails_with_the_reason(
    batch_client: Any, batch_queue: Queue
) -> None:
    handle = await batch_client.run(sh_app("echo bad; exit 3", "fails"), SCHED, cfg(batch_queue))
    final = await batch_client.wait(handle, timeout=60)
    assert final.state == AppState.FAILED, final
    assert final.roles[0].replicas[0].state == AppState.FAILED
    assert await read_logs(batch_client, handle) == b"bad\n"


async def test_cancel_while_running_is_cancelled(batch_client: Any, batch_queue: Queue) -> None:
    handle = await batch_client.run(sh_app("sleep 60", "cancel"), SCHED, cfg(batch_queue))
    await wait_running(batch_client, handle)
    await batch_client.cancel(handle)
    final = await batch_client.wait(handle, timeout=60)
    assert final.state == AppState.CANCELLED, final
    assert final.roles[0].replicas[0].state == AppState.CANCELLED
    assert "cancelled through txd" in final.msg
    # Cancelling again, or an ended job, changes nothing.
    assert (await batch_client.cancel(handle)).state == AppState.CANCELLED


async def test_a_follow_started_while_running_ends_with_every_line_once(
    batch_client: Any, batch_queue: Queue
) -> None:
    script = "for i in 1 2 3; do echo line $i; sleep 0.5; done"
    handle = await batch_client.run(sh_app(script, "follow"), SCHED, cfg(batch_queue))
    await wait_running(batch_client, handle)
    async with asyncio.timeout(60):
        logs = await read_logs(batch_client, handle, follow=True)
    assert logs == b"line 1\nline 2\nline 3\n"
    assert (await batch_client.status(handle)).state == AppState.SUCCEEDED


async def test_dryrun_prints_the_job_definition_and_the_submit_request(
    batch_client: Any, batch_queue: Queue
) -> None:
    app = AppDef(name="dry", roles=[sh_role("a", "true", 2), sh_role("b", "true")])
    info = await batch_client.dryrun(app, SCHED, {**cfg(batch_queue), "timeout": 120})
    req = json.loads(info.request)
    jobdef, submit = req["register_job_definition"], req["submit_job"]
    assert jobdef["type"] == "multinode"
    assert [g["targetNodes"] for g in jobdef["nodeProperties"]["nodeRangeProperties"]] == [
        "0:1",
        "2:2",
    ]
    assert jobdef["timeout"] == {"attemptDurationSeconds": 120}
    assert submit["jobQueue"] == batch_queue.name
    assert submit["jobDefinition"] == jobdef["jobDefinitionName"] == submit["jobName"]


async def test_throttled_describes_back_off_and_the_job_ends_in_its_true_state_once(
    proxied_daemon: Daemon, proxy: AwsProxy, batch_queue: Queue
) -> None:
    """Batch answers 429 TooManyRequestsException to the next 12 describe_jobs: more than one
    call's retries (aws_api.TRIES), so some polls get no answer at all. The job is never
    UNKNOWN, and its end is seen once."""
    async with proxied_daemon.client() as c:
        handle = await c.run(sh_app("sleep 2; exit 3", "throttled"), SCHED, cfg(batch_queue))
        proxy.throttle("describejobs", 12)
        seen: list[AppStatus] = []
        async with asyncio.timeout(90):
            async for status in c.watch(handle):
                seen.append(status)
        states = [s.state for s in seen]
        assert AppState.UNKNOWN not in states, seen
        assert states[-1] == AppState.FAILED, seen
        assert states.count(AppState.FAILED) == 1
        assert proxy.throttled["describejobs"] == 12
        # Every request counts, the refused ones too.
        assert await calls(c, "describe_jobs") == proxy.calls["describejobs"]


async def test_live_tail_shows_lines_written_while_the_job_runs(
    proxied_daemon: Daemon, proxy: AwsProxy, batch_queue: Queue, moto: Moto
) -> None:
    """The test writes log events into the job's stream while it runs (moto writes a
    container's output only after it exits); a follow shows each batch as it is written, and
    ends, with every line once, after the job is cancelled."""
    proxy.running_streams = True
    async with proxied_daemon.client() as c:
        handle = await c.run(sh_app("sleep 60", "tail"), SCHED, cfg(batch_queue))
        running = await wait_running(c, handle)
        async with client(moto, "batch") as batch:
            job = await batch.describe_jobs(jobs=[recorded_job_id(proxied_daemon, handle)])
        jobdef = job["jobs"][0]["jobDefinition"].rsplit("/", 1)[-1].split(":")[0]
        stream = f"{jobdef}/default/{job['jobs'][0]['jobId']}"
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def follow() -> None:
            async for chunk in c.logs(handle, follow=True):
                chunks.put_nowait(chunk.data)
            chunks.put_nowait(None)

        async def read(n: int) -> bytes:
            out = b""
            while out.count(b"\n") < n:
                data = await chunks.get()
                assert data is not None, f"the follow ended after {out!r}"
                out += data
            return out

        task = asyncio.create_task(follow())
        await put_lines(moto, LOG_GROUP, stream, ["one", "two"])
        assert await asyncio.wait_for(read(2), 30) == b"one\ntwo\n"
        await put_lines(moto, LOG_GROUP, stream, ["three"])
        assert await asyncio.wait_for(read(1), 30) == b"three\n"
        assert running.state == AppState.RUNNING
        await c.cancel(handle)
        await asyncio.wait_for(task, 60)
        assert chunks.get_nowait() is None  # nothing more came: every line once
        assert (await c.status(handle)).state == AppState.CANCELLED


def recorded_job_id(d: Daemon, handle: str) -> str:
    return str(recorded_native(d.state_dir, handle)["job_id"])


async def test_a_multi_node_job_runs_every_node(batch_client: Any, batch_queue: Queue) -> None:
    """Two roles, three nodes: moto runs a container per node (and logs them all into one
    stream, and describes no node on its own: each replica shows the job's state)."""
    app = AppDef(
        name="mnp",
        roles=[sh_role("trainer", "echo trainer $TORCHX_ROLE_IDX", 2), sh_role("ps", "echo ps")],
    )
    handle = await batch_client.run(app, SCHED, cfg(batch_queue))
    final = await batch_client.wait(handle, timeout=60)
    assert final.state == AppState.SUCCEEDED, final
    assert [(r.role, [x.id for x in r.replicas]) for r in final.roles] == [
        ("trainer", [0, 1]),
        ("ps", [0]),
    ]
    logs = await read_logs(batch_client, handle, role="ps")
    assert sorted(logs.splitlines()) == [b"ps", b"trainer 0", b"trainer 0"]


NODE_VARS = (
    "echo node=$AWS_BATCH_JOB_NODE_INDEX num=$AWS_BATCH_JOB_NUM_NODES "
    "main=$AWS_BATCH_JOB_MAIN_NODE_INDEX rank=${replica_id}"
)


@pytest.mark.parametrize(
    ("extra", "printed"),
    [
        # By default a one-node multi-node job, as TorchX submits it: Batch sets the variables.
        ({}, b"node=0 num=1 main=0 rank=0\n"),
        # A container job (for Fargate): Batch sets none; ${replica_id} is 0 all the same.
        ({"job_type": "container"}, b"node= num= main= rank=0\n"),
    ],
)
async def test_a_single_replica_sees_batchs_node_variables(
    batch_client: Any, batch_queue: Queue, extra: dict[str, Any], printed: bytes
) -> None:
    """What a script written for TorchX reads on one node (moto sets the variables as Batch
    does through moto_batch_nodes)."""
    handle = await batch_client.run(
        sh_app(NODE_VARS, "nodevars"), SCHED, {**cfg(batch_queue), **extra}
    )
    final = await batch_client.wait(handle, timeout=60)
    assert final.state == AppState.SUCCEEDED, final
    assert [(r.role, r.id, r.state) for r in final.roles[0].replicas] == [
        ("main", 0, AppState.SUCCEEDED)
    ]
    assert await read_logs(batch_client, handle) == printed


async def test_a_restarted_daemon_follows_its_running_job_to_the_end(
    moto: Moto, batch_queue: Queue
) -> None:
    d = make_batch_daemon(moto.url).start()
    try:
        async with d.client() as c:
            handle = await c.run(sh_app("sleep 3; echo done", "restart"), SCHED, cfg(batch_queue))
            await wait_running(c, handle)
        d.stop()
        d.restart()
        async with d.client() as c:
            final = await c.wait(handle, timeout=60)
            assert final.state == AppState.SUCCEEDED, final
            assert await read_logs(c, handle) == b"done\n"
    finally:
        d.close()
        remove_tree(d.root)


async def test_aws_down_keeps_the_last_state_marked_stale_then_the_end(
    proxied_daemon: Daemon, proxy: AwsProxy, batch_queue: Queue
) -> None:
    async with proxied_daemon.client() as c:
        handle = await c.run(sh_app("sleep 4", "down"), SCHED, cfg(batch_queue))
        await wait_running(c, handle)
        await proxy.down()
        async with asyncio.timeout(30):
            async for status in c.watch(handle):
                if status.stale_msg:
                    break
        assert status.state == AppState.RUNNING
        assert f"cannot reach {proxy.url}" in status.stale_msg, status
        await proxy.up()
        final = await c.wait(handle, timeout=60)
        assert final.state == AppState.SUCCEEDED, final
        assert not final.stale_msg


async def test_delete_deregisters_the_job_definition(
    batch_client: Any, batch_queue: Queue, moto: Moto, batch_daemon: Daemon
) -> None:
    handle = await batch_client.run(sh_app("sleep 60", "delete"), SCHED, cfg(batch_queue))
    native = recorded_native(batch_daemon.state_dir, handle)
    await wait_running(batch_client, handle)
    await batch_client.delete(handle)
    async with client(moto, "batch") as batch:
        defs = await batch.describe_job_definitions(jobDefinitions=[native["job_definition"]])
        job = (await batch.describe_jobs(jobs=[native["job_id"]]))["jobs"][0]
    assert [d["status"] for d in defs["jobDefinitions"]] == ["INACTIVE"]
    assert job["statusReason"] == "cancelled through txd"


async def test_bad_input_is_a_one_line_error_naming_the_field(
    batch_client: Any, batch_queue: Queue
) -> None:
    from txd.client import InvalidArgumentError

    no_memory = AppDef(name="x", roles=[Role(name="r", image=BUSYBOX, entrypoint="true")])
    with pytest.raises(InvalidArgumentError, match=r"resource\.mem_mb: AWS Batch needs"):
        await batch_client.run(no_memory, SCHED, cfg(batch_queue))
    with pytest.raises(InvalidArgumentError, match=r"cfg\.queue: submit_job: .*does not exist"):
        await batch_client.run(sh_app("true"), SCHED, {"queue": "no-such-queue"})
    six = AppDef(name="x", roles=[sh_role(f"r{i}", "true") for i in range(6)])
    with pytest.raises(InvalidArgumentError, match="at most 5 roles"):
        await batch_client.run(six, SCHED, cfg(batch_queue))


async def test_a_workspace_becomes_role_0s_image(
    batch_client: Any, batch_queue: Queue, tmp_path: Path
) -> None:
    """The workspace is built into an image on the daemon's docker_host (here the engine moto
    runs jobs on; with image_repo it would be pushed for Batch's hosts to pull)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "main.sh").write_text(f"echo from workspace {ws.name}\n")
    app = sh_app("sh main.sh", "ws")
    info = await batch_client.dryrun(app, SCHED, cfg(batch_queue), workspace=str(ws))
    assert "txd-workspace:" in info.workspace
    handle = await batch_client.run(app, SCHED, cfg(batch_queue), workspace=str(ws))
    final = await batch_client.wait(handle, timeout=60)
    assert final.state == AppState.SUCCEEDED, final
    assert await read_logs(batch_client, handle) == b"from workspace ws\n"


async def test_a_workspace_with_image_repo_is_pushed_there(
    batch_client: Any, batch_queue: Queue, docker_registry: Any, tmp_path: Path
) -> None:
    """With image_repo, the workspace's image is pushed before the job is submitted (Batch's
    hosts pull it from there): the registry holds it, and the job runs it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "main.sh").write_text("echo pushed\n")
    repo = f"{docker_registry.address}/txd-test/batch-{uuid.uuid4().hex[:8]}"
    app = sh_app("sh main.sh", "ws")
    handle = await batch_client.run(
        app, SCHED, {**cfg(batch_queue), "image_repo": repo}, workspace=str(ws)
    )
    image = (await batch_client.describe(handle)).app.roles[0].image
    assert image.startswith(f"{repo}:"), image
    url = f"http://{docker_registry.address}/v2/{repo.partition('/')[2]}/tags/list"
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(url).read())
    tags = json.loads(body)["tags"]
    assert tags == [image.rpartition(":")[2]]
    final = await batch_client.wait(handle, timeout=60)
    assert final.state == AppState.SUCCEEDED, final
    assert await read_logs(batch_client, handle) == b"pushed\n"


async def test_one_stream_alone_is_unimplemented(batch_client: Any, batch_queue: Queue) -> None:
    from txd.client import UnimplementedError

    handle = await batch_client.run(sh_app("echo x", "streams"), SCHED, cfg(batch_queue))
    await batch_client.wait(handle, timeout=60)
    with pytest.raises(UnimplementedError, match="stdout"):
        await read_logs(batch_client, handle, streams="stdout")


async def test_describe_native_is_the_submitted_request(
    batch_daemon: Daemon, batch_client: Any, batch_queue: Queue
) -> None:
    """txd keeps the job definition and submit request it sent (issue 21), equal to DryRun's
    but for the drawn name."""
    app = sh_app("echo up", "kept", replicas=2)
    handle = await batch_client.run(app, SCHED, cfg(batch_queue))
    dry = await batch_client.dryrun(app, SCHED, cfg(batch_queue))
    assert (await batch_client.wait(handle, timeout=60)).state == AppState.SUCCEEDED
    out = batch_daemon.txctl("describe", "--native", handle, check=True).stdout
    assert out == with_name_of(dry.request, out, "kept")
    assert batch_queue.name in out
