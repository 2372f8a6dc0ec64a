"""The contract suite (txd.schedulers.testing) over aws_batch, on moto's Batch in docker mode.

Each job is a container of the Python test image running CommandScripts' program on the
test's files, bind-mounted at the same path (a Batch host volume), on the host network; a
blocking job waits for its release file there. moto keeps a container's output as text lines
stripped of surrounding blanks, and only after it exits, so the checks of exact log bytes are
skipped (the harness runs no script that writes); logs are tested in test_aws_batch.py and
test_aws_cloudwatch.py. The backend is taken down by pointing the scheduler at a port where nothing
listens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from docker_testing import PYTHON
from moto_testing import REGION, AwsBackendDown, Moto, Queue, aws_env
from txd.schedulers.api import Job, Scheduler
from txd.schedulers.aws.aws_batch import create_scheduler
from txd.schedulers.aws.client import Aws
from txd.schedulers.testing import CommandScripts, Harness, SchedulerContract, Script, TaskGroupLike
from txd.v1 import AppDef, BindMount, CfgValue, Mount, Resource

pytestmark = pytest.mark.timeout(300)


class BatchHarness(AwsBackendDown, Harness):
    # moto moves a job through its states in about 2 s and notices its container's exit
    # within 0.5 s.
    timeout = 60.0
    poll_pause = 0.2

    def __init__(self, root: Path, moto: Moto, queue: Queue) -> None:
        self.root, self.moto = root, moto
        self.cfg = {"queue": CfgValue(str=queue.name)}
        self.scripts = CommandScripts(root, python="python3")
        self.unreachable: list[Aws] = []

    async def scheduler(self, tasks: TaskGroupLike) -> Scheduler[Any, Any]:
        settings = {"endpoint_url": self.moto.url, "region": REGION, "poll_interval": 0.2}
        sched = create_scheduler("contract", settings=settings)
        await sched.start(tasks)
        return sched

    def app(self, script: Script) -> AppDef | None:
        if script.writes:
            return None  # moto keeps text lines, stripped: not the bytes the checks expect
        app = self.scripts.app(script)
        role = app.roles[0]
        role.image = PYTHON
        role.resource.CopyFrom(Resource(cpu=1, mem_mb=128))
        root = str(self.root)
        role.mounts.append(Mount(bind=BindMount(src_path=root, dst_path=root, read_only=True)))
        return app

    async def release(self, sched: Scheduler[Any, Any], app: AppDef, job: Job) -> None:
        self.scripts.release(app)


class TestAwsBatch(SchedulerContract):
    @pytest.fixture
    def harness(
        self, tmp_path: Path, moto: Moto, batch_queue: Queue, monkeypatch: pytest.MonkeyPatch
    ) -> Harness:
        for key, value in aws_env().items():
            monkeypatch.setenv(key, value)
        return BatchHarness(tmp_path, moto, batch_queue)
