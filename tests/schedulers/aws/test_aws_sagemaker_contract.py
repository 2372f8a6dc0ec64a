"""The contract suite (txd.schedulers.testing) over aws_sagemaker, on moto's SageMaker and
CloudWatch Logs through the stand-in proxy (tests/schedulers/aws/sagemaker_standin.py).

moto runs no training, so the harness plays each job's program (a suite Script) as SageMaker
and its log agent would show it; exactly this is played:

- **creation**: the app's one role carries `CONTRACT_SCRIPT=<n>` (the harness's Script n) and
  the stand-in's STANDIN_EXIT=<exit code>, with STANDIN_BLOCK=1 for a blocking Script. When
  CreateTrainingJob reaches the stand-in and moto made the job, before the answer goes back,
  the harness writes the Script's `first` output, and for a Script that does not block its
  `then` output too, into each instance k's stream `<job>/algo-<k+1>-<epoch s>` of
  `/aws/sagemaker/TrainingJobs` (the same output in every instance's stream).
- **the end**: a Script that does not block ends by the stand-in's STANDIN_EXIT, at the job's
  second describe: Completed for exit code 0, else Failed with SageMaker's AlgorithmError
  reason. A blocking one stays InProgress until `release`, which writes `then` into every
  instance's stream and then ends the job the same way (StandIn.finish); or until the suite
  cancels it (StopTrainingJob: Stopping, then Stopped).
- **the log events**: stdout's lines, then stderr's, one event per line, each write's events
  stamped with the millisecond it was made. CloudWatch keeps messages as UTF-8 text of at
  least one character, and txd gives each event back as its message and "\\n": so invalid
  UTF-8 comes back as U+FFFD (`utf8_logs`), a last line without a newline gets one, and an
  empty line is not an event. `logged` declares exactly that; the byte checks compare with it.

CloudWatch has one stream per instance for stdout and stderr together, so aws_sagemaker does
not claim `log_streams` (the suite checks that asking for one is Unsupported). The backend is
taken down by pointing the scheduler at a port where nothing listens.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from moto_testing import REGION, AwsBackendDown, Moto, aws_env, client
from sagemaker_standin import StandIn
from txd.schedulers.api import Job, Scheduler
from txd.schedulers.aws.aws_sagemaker import LOG_GROUP, create_scheduler
from txd.schedulers.aws.client import Aws
from txd.schedulers.testing import Harness, Output, SchedulerContract, Script, TaskGroupLike
from txd.v1 import AppDef, CfgValue, Resource, Role

pytestmark = pytest.mark.timeout(300)

ROLE_ARN = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1"
SCRIPT_ENV = "CONTRACT_SCRIPT"


def lines(data: bytes) -> list[str]:
    """The log events CloudWatch keeps for `data`: its UTF-8 text (U+FFFD for what is not),
    a message per line, empty lines dropped."""
    return [line for line in data.decode("utf-8", "replace").split("\n") if line]


async def write(moto: Moto, stream: str, output: Output) -> None:
    """Puts `output` (stdout, then stderr) into `stream` as one write's log events."""
    messages = lines(output.stdout) + lines(output.stderr)
    if not messages:
        return
    now = int(time.time() * 1000)
    async with client(moto, "logs") as logs:
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            await logs.create_log_group(logGroupName=LOG_GROUP)
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            await logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        await logs.put_log_events(
            logGroupName=LOG_GROUP,
            logStreamName=stream,
            logEvents=[{"timestamp": now, "message": m} for m in messages],
        )


class SageMakerHarness(AwsBackendDown, Harness):
    # A poll describes each live job once; the stand-in ends a job at its second describe.
    timeout = 60.0
    poll_pause = 0.1
    utf8_logs = True

    def __init__(self, moto: Moto, standin: StandIn) -> None:
        self.moto, self.standin = moto, standin
        self.cfg = {
            "role": CfgValue(str=ROLE_ARN),
            "output_path": CfgValue(str="s3://b/out"),
            "mode": CfgValue(str="container"),
        }
        self.scripts: dict[str, Script] = {}
        self.streams: dict[str, list[str]] = {}  # job name -> its instances' log streams
        self._ids = itertools.count()
        self.unreachable: list[Aws] = []
        standin.on_create = self._train

    def logged(self, data: bytes) -> bytes:
        return "".join(f"{line}\n" for line in lines(data)).encode()

    async def scheduler(self, tasks: TaskGroupLike) -> Scheduler[Any, Any]:
        settings = {"endpoint_url": self.standin.url, "region": REGION, "poll_interval": 0.1}
        sched = create_scheduler("contract", settings=settings)
        await sched.start(tasks)
        return sched

    def app(self, script: Script) -> AppDef | None:
        n = str(next(self._ids))
        self.scripts[n] = script
        env = {SCRIPT_ENV: n, "STANDIN_EXIT": str(script.exit_code)}
        if script.block:
            env["STANDIN_BLOCK"] = "1"
        role = Role(
            name="trainer",
            image=IMAGE,
            entrypoint="python",
            args=["-m", "train"],
            env=env,
            num_replicas=script.replicas,
            resource=Resource(capabilities={"node.kubernetes.io/instance-type": "m5.large"}),
        )
        return AppDef(name="contract", roles=[role])

    async def _train(self, name: str, request: dict[str, Any]) -> None:
        """The stand-in's on_create (on its event loop): the job starts writing."""
        script = self.scripts.get(str((request.get("Environment") or {}).get(SCRIPT_ENV)))
        if script is None:
            return  # not a job of this harness's
        started = int(time.time())
        count = int(request["ResourceConfig"]["InstanceCount"])
        self.streams[name] = [f"{name}/algo-{k + 1}-{started}" for k in range(count)]
        for stream in self.streams[name]:
            await write(self.moto, stream, script.first)
            if not script.block:
                await write(self.moto, stream, script.then)

    async def release(self, sched: Scheduler[Any, Any], app: AppDef, job: Job) -> None:
        script = self.scripts[app.roles[0].env[SCRIPT_ENV]]
        for stream in self.streams[job.app_id]:
            await write(self.moto, stream, script.then)
        self.standin.finish(job.app_id, script.exit_code)


class TestAwsSageMaker(SchedulerContract):
    @pytest.fixture
    def harness(
        self, sm_moto: Moto, standin: StandIn, monkeypatch: pytest.MonkeyPatch
    ) -> Iterator[Harness]:
        for key, value in aws_env().items():
            monkeypatch.setenv(key, value)
        try:
            yield SageMakerHarness(sm_moto, standin)
        finally:
            standin.on_create = None
