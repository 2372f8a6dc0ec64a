"""The contract suite over local_cwd: real processes on this host (CommandScripts)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from txd.schedulers.api import Job, Scheduler, SubmitContext
from txd.schedulers.local.local_cwd import create_scheduler
from txd.schedulers.testing import CommandScripts, Harness, SchedulerContract, Script, TaskGroupLike
from txd.v1 import AppDef


class LocalHarness(Harness):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.scripts = CommandScripts(root / "jobs")

    async def scheduler(self, tasks: TaskGroupLike) -> Scheduler[Any, Any]:
        sched = create_scheduler("contract", state_dir=self.root / "state")
        await sched.start(tasks)
        return sched

    def app(self, script: Script) -> AppDef:
        return self.scripts.app(script)

    async def release(self, sched: Scheduler[Any, Any], app: AppDef, job: Job) -> None:
        self.scripts.release(app)

    def context(self) -> SubmitContext:
        return SubmitContext(cwd=str(self.root), env=dict(os.environ))


class TestLocalCwd(SchedulerContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> Harness:
        return LocalHarness(tmp_path)
