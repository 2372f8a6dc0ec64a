"""The contract suite (txd.schedulers.testing) over local_docker, on the real test engine.

Each job is a container of the Python test image running CommandScripts' program on the
test's files, bind-mounted at the same path; a blocking job waits for its release file there.
Containers join no network (`network=none`): the suite checks status and logs, and the per-app
network has tests of its own (test_local_docker.py). The backend is taken down by pointing the
scheduler at a socket where no engine listens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_testing import PYTHON, Engine
from txd.schedulers.api import Job, Scheduler
from txd.schedulers.docker.local_docker import DockerScheduler, create_scheduler
from txd.schedulers.testing import CommandScripts, Harness, SchedulerContract, Script, TaskGroupLike
from txd.schedulers.workspace.engine import Engine as SchedEngine
from txd.v1 import AppDef, BindMount, CfgValue, Mount


class DockerHarness(Harness):
    cfg = {"network": CfgValue(str="none")}
    # The engine stamps log lines with nanoseconds as it reads them from the container.
    clock_resolution = 0.01

    def __init__(self, root: Path, engine: Engine) -> None:
        self.root = root
        self.engine = engine
        self.scripts = CommandScripts(root, python="python3")

    async def scheduler(self, tasks: TaskGroupLike) -> Scheduler[Any, Any]:
        sched = create_scheduler("contract", settings={"docker_host": self.engine.host})
        await sched.start(tasks)
        return sched

    def app(self, script: Script) -> AppDef:
        app = self.scripts.app(script)
        role = app.roles[0]
        role.image = PYTHON
        root = str(self.root)
        role.mounts.append(Mount(bind=BindMount(src_path=root, dst_path=root, read_only=True)))
        return app

    async def release(self, sched: Scheduler[Any, Any], app: AppDef, job: Job) -> None:
        self.scripts.release(app)

    def backend_down(self, sched: Scheduler[Any, Any]) -> contextlib.AbstractContextManager[None]:
        assert isinstance(sched, DockerScheduler)

        @contextlib.contextmanager
        def down() -> Iterator[None]:
            real = sched.engine
            sched.engine = SchedEngine(f"unix://{self.root}/no-engine.sock")
            try:
                yield
            finally:
                sched.engine = real

        return down()


class TestLocalDocker(SchedulerContract):
    @pytest.fixture
    def harness(self, tmp_path: Path, docker_engine: Engine) -> Harness:
        return DockerHarness(tmp_path, docker_engine)
