"""TorchX 0.7's tags on aws_batch's job definitions and jobs, beside txd's own: in the request
(against TorchX's own dryrun of the same app, with the app's metadata over TorchX's tags as in
TorchX), Batch's tag limits named, and on moto's Batch: the job and its definition carry them,
and TorchX's own `list` (its AWSBatchScheduler on moto) finds txd's job by them.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import boto3
import pytest
from docker_testing import BUSYBOX
from moto_testing import REGION, Moto, Queue, client
from torchx import specs
from torchx.schedulers.aws_batch_scheduler import AWSBatchScheduler
from txd.schedulers.aws import batch_request
from txd.schedulers.errors import InvalidArgument
from txd.v1 import AppDef, AppState, Resource, Role
from txd_testing import Daemon, recorded_native, unique

SCHED = "aws_batch"
TORCHX_TAGS = (
    "torchx.pytorch.org/version",
    "torchx.pytorch.org/app-name",
    "torchx.pytorch.org/user",
)

pytestmark = pytest.mark.timeout(120)


def app_of(name: str, metadata: dict[str, str] | None = None, replicas: int = 1) -> AppDef:
    role = Role(
        name="main",
        image=BUSYBOX,
        entrypoint="true",
        num_replicas=replicas,
        resource=Resource(cpu=1, mem_mb=128),
    )
    return AppDef(name=name, roles=[role], metadata=metadata or {})


def torchx_tags(app: AppDef, user: str) -> dict[str, str]:
    """TorchX's tags of the same app, from TorchX's own dryrun."""
    roles = [
        specs.Role(
            name=r.name,
            image=r.image,
            entrypoint=r.entrypoint,
            num_replicas=r.num_replicas,
            resource=specs.Resource(
                cpu=r.resource.cpu,
                gpu=0,
                memMB=r.resource.mem_mb,
                # else TorchX warns (an error here) that it cannot tell the instance type
                capabilities={"node.kubernetes.io/instance-type": "m5.large"},
            ),
        )
        for r in app.roles
    ]
    tapp = specs.AppDef(name=app.name, roles=roles, metadata=dict(app.metadata))
    info = AWSBatchScheduler("torchx").submit_dryrun(tapp, {"queue": "q", "user": user})
    return dict(info.request.job_def["tags"])


@pytest.mark.parametrize(
    "metadata",
    [{}, {"team": "ml", "cost-center": "42"}, {"torchx.pytorch.org/app-name": "billed-as"}],
)
def test_the_request_carries_torchxs_tags_and_txds(metadata: dict[str, str]) -> None:
    app = app_of("train.v1", metadata, replicas=2)
    req = batch_request.build(
        app, batch_request.BatchOpts(queue="q", user="alice"), session="s", user="daemon"
    )
    want = torchx_tags(app, "alice")
    assert set(TORCHX_TAGS) <= want.keys()
    for tags in (req.job_definition["tags"], req.submit["tags"]):
        assert {k: tags.get(k) for k in want} == want
        assert tags["txd.dev/scheduler"] == SCHED and tags["txd.dev/user"] == "alice"


def test_txds_own_tags_are_not_replaced_by_metadata() -> None:
    """txd finds and reads its jobs by them (list, status): the app's metadata may replace
    TorchX's tags, as in TorchX, never txd's."""
    app = app_of("t", {"txd.dev/scheduler": "other", "txd.dev/roles": "x=9"})
    req = batch_request.build(app, batch_request.BatchOpts(queue="q"), session="s", user="u")
    tags = req.submit["tags"]
    assert (tags["txd.dev/scheduler"], tags["txd.dev/roles"]) == (SCHED, "main=1")
    assert tags["torchx.pytorch.org/user"] == "u"  # the daemon's user when cfg.user is unset


@pytest.mark.parametrize(
    ("metadata", "name", "field", "wanted"),
    [
        ({f"k{i}": "v" for i in range(43)}, "t", "app.metadata", "at most 50 tags, got 51"),
        ({"x" * 129: "v"}, "t", "app.metadata['" + "x" * 129 + "']", "is not a Batch tag key"),
        ({"aws:owner": "v"}, "t", "app.metadata['aws:owner']", "not aws:"),
        ({"team": "v" * 257}, "t", "app.metadata['team']", "at most 256 characters, got 257"),
        ({}, "n" * 300, "app.name", "at most 256 characters, got 300"),
    ],
)
def test_batch_tag_limits_are_named(
    metadata: dict[str, str], name: str, field: str, wanted: str
) -> None:
    with pytest.raises(InvalidArgument) as e:
        batch_request.build(
            app_of(name, metadata), batch_request.BatchOpts(queue="q"), session="s", user="u"
        )
    assert e.value.field == field and wanted in e.value.reason, e.value


async def test_the_job_and_its_definition_carry_torchxs_tags_on_batch(
    batch_client: Any, batch_daemon: Daemon, batch_queue: Queue, moto: Moto
) -> None:
    app = app_of(unique("tags"), {"team": "ml"})
    handle = await batch_client.run(app, SCHED, {"queue": batch_queue.name, "user": "alice"})
    assert (await batch_client.wait(handle, timeout=60)).state == AppState.SUCCEEDED
    job_id = str(recorded_native(batch_daemon.state_dir, handle)["job_id"])
    want = torchx_tags(app, "alice")
    async with client(moto, "batch") as batch:
        (job,) = (await batch.describe_jobs(jobs=[job_id]))["jobs"]
        listed = (await batch.list_tags_for_resource(resourceArn=job["jobArn"]))["tags"]
        defs = (await batch.describe_job_definitions(jobDefinitionName=job["jobName"]))[
            "jobDefinitions"
        ]
    assert len(defs) == 1
    for tags in (job["tags"], listed, defs[0]["tags"]):
        assert {k: tags.get(k) for k in want} == want, json.dumps(tags)
        assert tags["txd.dev/scheduler"] == SCHED

    # TorchX itself on the same moto: `torchx list -s aws_batch` keeps the jobs that carry its
    # version tag, and lists txd's.
    torchx = AWSBatchScheduler(
        "torchx",
        client=boto3.client(
            "batch",
            endpoint_url=moto.url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ),
    )
    apps = await asyncio.to_thread(torchx.list)
    found = [a for a in apps if a.app_id == f"{batch_queue.name}:{job['jobName']}"]
    assert [a.state for a in found] == [specs.AppState.SUCCEEDED]
