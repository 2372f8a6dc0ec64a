"""The contract suite (txd.schedulers.testing) over slurm, on the real cluster of conftest.py.

Jobs are CommandScripts: this interpreter, run by slurmd on this host, reading and writing
files the test shares with it. Skipped until SlurmScheduler is a (concrete) BatchScheduler: it is
ported in branch batchports; after that merge this runs by itself, and any
harness detail that differs from the port is to be wired here.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import pytest
from txd.schedulers.api import Job, Scheduler, SubmitContext
from txd.schedulers.testing import CommandScripts, Harness, SchedulerContract, Script, TaskGroupLike
from txd.v1 import AppDef


def _ported() -> bool:
    from txd.schedulers.hpc.base import BatchScheduler
    from txd.schedulers.hpc.slurm import SlurmScheduler

    return issubclass(SlurmScheduler, BatchScheduler) and not inspect.isabstract(SlurmScheduler)


class SlurmHarness(Harness):
    poll_pause = 0.1  # squeue on a real cluster
    timeout = 60.0

    def __init__(self, root: Path) -> None:
        self.root = root
        self.scripts = CommandScripts(root / "jobs")

    async def scheduler(self, tasks: TaskGroupLike) -> Scheduler[Any, Any]:
        from txd.schedulers.hpc.slurm import create_scheduler

        sched: Scheduler[Any, Any] = create_scheduler("contract", state_dir=self.root / "state")
        await sched.start(tasks)
        return sched

    def app(self, script: Script) -> AppDef:
        return self.scripts.app(script)

    async def release(self, sched: Scheduler[Any, Any], app: AppDef, job: Job) -> None:
        self.scripts.release(app)

    def context(self) -> SubmitContext:
        return SubmitContext(cwd=str(self.root), env=dict(os.environ))


@pytest.mark.skipif(not _ported(), reason="ported in branch batchports")
class TestSlurm(SchedulerContract):
    @pytest.fixture
    def harness(
        self, slurm_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> Harness:
        monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))  # the daemon's cluster
        return SlurmHarness(tmp_path)
