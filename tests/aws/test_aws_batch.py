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
from typing import Any

import pytest
from docker_testing import BUSYBOX
from moto_testing import Moto, Queue
from txd.v1 import AppDef, AppState, AppStatus, Resource, Role
from txd_testing import read_logs

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
