"""aws_sagemaker through a real txd on moto's SageMaker and CloudWatch Logs.

What moto does is real here: CreateTrainingJob (txd's request, as sent), DescribeTrainingJob, Search
by tag, and CloudWatch Logs. What moto lacks (a job's life: it is Completed at once;
StopTrainingJob, an HTTP 500) comes from the stand-in proxy in front of it
(tests/schedulers/aws/sagemaker_standin.py), which answers as the AWS API Reference documents: jobs
are InProgress until the test (or their STANDIN_EXIT) ends them, and StopTrainingJob stops them.
SageMaker writes logs to `/aws/sagemaker/TrainingJobs`, stream `<job>/algo-<i>-<epoch s>`; moto runs
nothing, so the test writes those events itself. moto's own SageMaker does not need a Docker engine:
the module's moto_server (conftest's `sm_moto`) has none.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from moto_testing import Moto, aws_env, client, put_lines
from sagemaker_standin import StandIn
from txd.v1 import AppState
from txd.v1.app_pb2 import AppDef, Resource, Role
from txd_testing import Daemon, log_alarms, remove_tree, short_tmpdir, with_name_of

pytestmark = pytest.mark.timeout(120)

ROLE_ARN = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1"
# These tests are of container mode (the role's command run as it is); framework mode's are in
# test_aws_sagemaker_framework.py.
CFG = {"role": ROLE_ARN, "output_path": "s3://bucket/out", "mode": "container"}
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
WAIT = 30.0


def _daemon(standin: StandIn, **settings: Any) -> Daemon:
    base = {"endpoint_url": standin.url, "region": "us-east-1", "poll_interval": 0.1}
    base.update(settings)
    args = [a for k, v in base.items() for a in ("--set", f"aws_sagemaker.{k}={v}")]
    return Daemon(short_tmpdir("txd-sm-"), env=aws_env(), args=args)


@pytest.fixture
def sm_daemon(standin: StandIn) -> Iterator[Daemon]:
    d = _daemon(standin).start()
    try:
        yield d
    finally:
        d.close()
        log = d.log()
        remove_tree(d.root)
        assert not log_alarms(log), "the daemon logged errors:\n" + log


@pytest.fixture
async def sm_client(sm_daemon: Daemon) -> AsyncIterator[Any]:
    async with sm_daemon.client() as c:
        yield c


def trainer(exit_code: int | None = 0, *, block: bool = False, replicas: int = 1) -> AppDef:
    env = {"STANDIN_EXIT": str(exit_code)} if exit_code is not None else {}
    if block:
        env["STANDIN_BLOCK"] = "1"
    role = Role(
        name="trainer",
        image=IMAGE,
        entrypoint="python",
        args=["-m", "train", "--run", "${app_id}"],
        env=env,
        num_replicas=replicas,
        resource=Resource(capabilities={"node.kubernetes.io/instance-type": "m5.xlarge"}),
    )
    return AppDef(name="train", roles=[role])


async def _until(c: Any, handle: str, *states: AppState) -> Any:
    async with asyncio.timeout(WAIT):
        async for status in c.watch(handle):
            if status.state in states:
                return status
    raise AssertionError(f"{handle} never reached {states}")


async def test_a_job_runs_until_it_ends_and_succeeds(sm_client: Any, standin: StandIn) -> None:
    h = await sm_client.run(trainer(None, block=True, replicas=2), "aws_sagemaker", CFG)
    name = h.rsplit("/", 1)[1]
    running = await _until(sm_client, h, AppState.RUNNING)
    assert running.msg.startswith("Training: ")
    assert [(r.hostname, r.state) for r in running.roles[0].replicas] == [
        ("algo-1", AppState.RUNNING),
        ("algo-2", AppState.RUNNING),
    ]
    # moto kept the request as txd sent it.
    async with client(standin_moto(standin), "sagemaker") as sm:
        job = await sm.describe_training_job(TrainingJobName=name)
    assert job["RoleArn"] == ROLE_ARN
    assert job["ResourceConfig"]["InstanceType"] == "ml.m5.xlarge"
    assert job["ResourceConfig"]["InstanceCount"] == 2
    assert job["AlgorithmSpecification"]["TrainingImage"] == IMAGE
    standin.finish(name, 0)
    done = await sm_client.wait(h, timeout=WAIT)
    assert done.state == AppState.SUCCEEDED
    assert done.msg == "Completed: Training job completed"


def standin_moto(standin: StandIn) -> Moto:
    """moto itself, behind the stand-in (for the test's own reads)."""
    moto = Moto(docker_host="", log_path=short_tmpdir() / "unused")
    moto.port = int(standin.moto_url.rsplit(":", 1)[1])
    return moto


async def test_torchx_instance_count_is_the_jobs_instance_count(
    sm_client: Any, standin: StandIn
) -> None:
    """TorchX's instance_count (a .torchxconfig string, as the CLI sends it) wins over the
    role's num_replicas: in the dry run, in the job moto keeps, and in the replicas txd shows."""
    cfg = {**CFG, "instance_count": "3"}
    dry = json.loads((await sm_client.dryrun(trainer(0), "aws_sagemaker", cfg)).request)
    assert dry["ResourceConfig"]["InstanceCount"] == 3
    assert dry["Environment"]["TORCHX_RANK0_HOST"] == "algo-1"
    h = await sm_client.run(trainer(0, replicas=2), "aws_sagemaker", cfg)
    done = await sm_client.wait(h, timeout=WAIT)
    assert done.state == AppState.SUCCEEDED, done
    assert [r.hostname for r in done.roles[0].replicas] == ["algo-1", "algo-2", "algo-3"]
    async with client(standin_moto(standin), "sagemaker") as sm:
        job = await sm.describe_training_job(TrainingJobName=h.rsplit("/", 1)[1])
    assert job["ResourceConfig"]["InstanceCount"] == 3


async def test_a_failing_job_is_failed_with_sagemakers_reason(sm_client: Any) -> None:
    h = await sm_client.run(trainer(3), "aws_sagemaker", CFG)
    done = await sm_client.wait(h, timeout=WAIT)
    assert done.state == AppState.FAILED
    assert done.msg == "Failed: Training job failed; AlgorithmError: , exit code: 3"
    assert done.structured_error_msg == "AlgorithmError: , exit code: 3"


async def test_cancel_stops_the_training_job(sm_client: Any, standin: StandIn) -> None:
    h = await sm_client.run(trainer(None, block=True), "aws_sagemaker", CFG)
    await _until(sm_client, h, AppState.RUNNING)
    before = standin.calls["StopTrainingJob"]
    await sm_client.cancel(h)
    done = await sm_client.wait(h, timeout=WAIT)
    assert done.state == AppState.CANCELLED
    assert done.msg == "Stopped: Training job stopped"
    assert standin.calls["StopTrainingJob"] == before + 1
    await sm_client.cancel(h)  # ended: a no-op (SageMaker's ValidationException is ignored)


async def test_logs_per_instance_from_cloudwatch(sm_client: Any, standin: StandIn) -> None:
    h = await sm_client.run(trainer(None, block=True, replicas=2), "aws_sagemaker", CFG)
    name = h.rsplit("/", 1)[1]
    await _until(sm_client, h, AppState.RUNNING)
    moto = standin_moto(standin)
    await put_lines(moto, LOG_GROUP, f"{name}/algo-1-1764000000", ["rank 0 up", "loss=0.5"])
    await put_lines(moto, LOG_GROUP, f"{name}/algo-2-1764000000", ["rank 1 up"])
    got = b""
    async for chunk in sm_client.logs(h, "trainer", 0):
        got += chunk.data
    assert got == b"rank 0 up\nloss=0.5\n"
    got = b""
    async for chunk in sm_client.logs(h, "trainer", 1, regex="rank"):
        got += chunk.data
    assert got == b"rank 1 up\n"
    # A follow started while the job runs gets what is written later, and ends with the job.
    follow: list[bytes] = []

    async def read() -> None:
        async for chunk in sm_client.logs(h, "trainer", 0, follow=True):
            follow.append(chunk.data)

    reader = asyncio.create_task(read())
    await put_lines(moto, LOG_GROUP, f"{name}/algo-1-1764000000", ["loss=0.1"])
    standin.finish(name, 0)
    await asyncio.wait_for(reader, WAIT)
    assert b"".join(follow) == b"rank 0 up\nloss=0.5\nloss=0.1\n"


async def test_list_finds_txds_jobs_by_tag(sm_client: Any, standin: StandIn) -> None:
    h = await sm_client.run(trainer(0), "aws_sagemaker", CFG)
    name = h.rsplit("/", 1)[1]
    # A job of someone else's, without txd's tags, is not listed.
    async with client(standin_moto(standin), "sagemaker") as sm:
        await sm.create_training_job(
            TrainingJobName="not-txds",
            RoleArn=ROLE_ARN,
            AlgorithmSpecification={"TrainingImage": IMAGE, "TrainingInputMode": "File"},
            OutputDataConfig={"S3OutputPath": "s3://b/o"},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
            StoppingCondition={"MaxRuntimeInSeconds": 60},
        )
    listed = await sm_client.list("aws_sagemaker", backend=True)
    ids = {s.app_id for s in listed}
    assert name in ids and "not-txds" not in ids


async def test_dryrun_prints_the_request_and_bad_options_are_named(sm_client: Any) -> None:
    from txd.client import InvalidArgumentError

    info = await sm_client.dryrun(trainer(0), "aws_sagemaker", CFG)
    request = json.loads(info.request)
    assert request["AlgorithmSpecification"]["ContainerEntrypoint"] == ["python"]
    assert request["ResourceConfig"]["InstanceType"] == "ml.m5.xlarge"
    with pytest.raises(InvalidArgumentError) as e:
        await sm_client.dryrun(trainer(0), "aws_sagemaker", {**CFG, "max_wait": 5})
    assert e.value.field == "cfg.max_wait"


async def test_describes_stay_within_the_budget_and_the_concurrency_limit(
    standin: StandIn,
) -> None:
    """40 live jobs, a budget of 10 describes per poll, 4 at a time: describes come no faster
    than 10 a poll, never more than 4 are in flight, and every job gets its turn."""
    d = _daemon(standin, describe_budget=10, describe_concurrency=4, poll_interval=0.5).start()
    try:
        async with d.client() as c:
            handles = [
                await c.run(trainer(None, block=True), "aws_sagemaker", CFG) for _ in range(40)
            ]
            names = {h.rsplit("/", 1)[1] for h in handles}
            standin.describe_delay = 0.02
            standin.reset_counts()
            # 60 describes: at most 10 a poll, polls 0.5 s apart, so they span at least
            # (60 / 10 - 2) intervals (a first and a last poll may be cut); without the
            # budget, 40 a poll, they would take about two polls.
            await asyncio.to_thread(standin.wait_described, 60, WAIT)
            assert standin.max_in_flight <= 4
            at = standin.described_at
            span = at[59] - at[0]
            assert 10 * (span / 0.5 + 2) >= 60, f"60 describes in {span:.2f} s"
            assert set(standin.described[:60]) == names  # every job had its turn
            info = {s.name: s for s in (await c.schedulers()).schedulers}
            calls = info["aws_sagemaker"].backend_calls
            assert calls["describe_training_job"] >= 40
            for h in handles:
                await c.cancel(h)
    finally:
        standin.describe_delay = 0.0
        d.close()
        log = d.log()
        remove_tree(d.root)
    assert not log_alarms(log), log


async def test_the_training_job_carries_torchxs_tags_and_txds(
    sm_client: Any, standin: StandIn
) -> None:
    """TorchX 0.7 tags a training job with its `tags` option, then the app's metadata (and no
    torchx.pytorch.org/* tag of its own, unlike aws_batch); txd's own beside them."""
    app = trainer(0)
    app.metadata.update({"team": "vision", "cost-center": "42"})
    h = await sm_client.run(app, "aws_sagemaker", {**CFG, "tags": {"project": "p1"}})
    name = h.rsplit("/", 1)[1]
    async with client(standin_moto(standin), "sagemaker") as sm:
        arn = (await sm.describe_training_job(TrainingJobName=name))["TrainingJobArn"]
        tags = {t["Key"]: t["Value"] for t in (await sm.list_tags(ResourceArn=arn))["Tags"]}
    assert {k: tags.get(k) for k in ("project", "team", "cost-center")} == {
        "project": "p1",
        "team": "vision",
        "cost-center": "42",
    }
    assert tags["txd.dev/scheduler"] == "aws_sagemaker" and tags["txd.dev/app-name"] == "train"
    assert not [k for k in tags if k.startswith("torchx.pytorch.org/")]
    assert (await sm_client.wait(h, timeout=WAIT)).state == AppState.SUCCEEDED


async def test_describe_native_is_the_create_training_job_request(
    sm_daemon: Daemon, sm_client: Any
) -> None:
    """txd keeps the CreateTrainingJob request it sent (issue 21), equal to DryRun's but for
    the drawn name."""
    app = trainer(0)
    h = await sm_client.run(app, "aws_sagemaker", CFG)
    dry = await sm_client.dryrun(app, "aws_sagemaker", CFG)
    await _until(sm_client, h, AppState.SUCCEEDED)
    out = sm_daemon.txctl("describe", "--native", h, check=True).stdout
    assert out == with_name_of(dry.request, out, "train")
    assert ROLE_ARN in out
