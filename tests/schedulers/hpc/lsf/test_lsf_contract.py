"""The contract suite (txd.schedulers.testing) over lsf, on a simulated LSF (lsf_sim.LsfSim)
that answers in the recorded formats: no LSF can be installed on this machine.

Every job is a docker container whose args carry the Script (lsf_sim.script_args); the
simulator reads them back out of the submit script, so what is checked is the script hpc.lsf
submits, its parsing of bjobs / bkill / bsub answers, and its log reads through the Host.
The harness can express every Script, so no check is skipped for its sake; the suite itself
skips three by lsf's capabilities: pushed changes (lsf is polled), unclaimed cancel (cancel is
claimed) and since/until (not claimed; the Unsupported check covers it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from lsf_fakes import FakeHost, FakeHosts
from lsf_sim import ENTRYPOINT, LsfSim, script_args
from txd.schedulers.api import Job, Scheduler
from txd.schedulers.hpc.lsf import LsfScheduler
from txd.schedulers.testing import Harness, SchedulerContract, Script, TaskGroupLike
from txd.v1 import AppDef, CfgValue, Role

# A directory "shared by the cluster's hosts": files of the simulated login node (this host).
JOBDIR = "/shared/txd-contract"


class LsfHarness(Harness):
    # The simulated LSF moves on at each bjobs (its scheduling cycle), not as time passes.
    poll_pause = 0.0
    cfg = {"jobdir": CfgValue(str=JOBDIR)}  # logs need one

    def __init__(self) -> None:
        self.hosts = FakeHosts()
        self.host = self.hosts.put(None, FakeHost("fake login node"))
        self.lsf = LsfSim(self.host)

    async def scheduler(self, tasks: TaskGroupLike) -> Scheduler[Any, Any]:
        sched = LsfScheduler("contract", hosts=self.hosts)
        await sched.start(tasks)
        return sched

    def app(self, script: Script) -> AppDef:
        role = Role(
            name="main",
            image="txd/contract-job:sim",
            entrypoint=ENTRYPOINT,
            args=script_args(script),
            num_replicas=script.replicas,
        )
        return AppDef(name="contract", roles=[role])

    async def release(self, sched: Scheduler[Any, Any], app: AppDef, job: Job) -> None:
        self.lsf.release(job.app_id)  # the app id is the jobs' LSF project

    def backend_down(self, sched: Scheduler[Any, Any]) -> contextlib.AbstractContextManager[None]:
        @contextlib.contextmanager
        def down() -> Iterator[None]:
            self.host.down = True
            try:
                yield
            finally:
                self.host.down = False

        return down()


@pytest.fixture
def fixed_app_ids() -> None:
    """Overrides conftest's: the suite needs make_unique's real, unique ids."""


class TestLsf(SchedulerContract):
    @pytest.fixture
    def harness(self) -> Harness:
        return LsfHarness()
