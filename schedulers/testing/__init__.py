"""The scheduler contract suite: the rules of txd.schedulers.api, checked against any backend.

Modelled on containerd's `SnapshotterSuite(t, name, factory)`: a backend supplies a *harness*
(how to build a started scheduler, how to turn a `Script` into an AppDef it can run, how to let a
blocking job go on) and subclasses `SchedulerContract`; pytest then runs every check on it. A
check that needs what the backend does not claim (`Capabilities`) checks instead that it raises
Unsupported; one that needs what the harness cannot do (a failing job, say) is skipped, and says
why.

It ships with txd and needs nothing but txd, pytest and pytest-asyncio (`pip install
'txd-launcher[testing]'`). A third-party scheduler's tests import it and write, for example:

    import pytest
    from txd.schedulers.testing import Harness, SchedulerContract, Script, TaskGroupLike
    from txd.schedulers.api import Job, Scheduler
    from txd.v1 import AppDef, Role

    class MyHarness(Harness):
        def __init__(self, tmp_path):
            self.tmp = tmp_path

        async def scheduler(self, tasks: TaskGroupLike) -> Scheduler:
            sched = my_plugin.create_scheduler("contract", state_dir=self.tmp / "state")
            await sched.start(tasks)
            return sched

        def app(self, script: Script) -> AppDef | None:
            if script.first.stdout or script.then.stdout:
                return None  # this backend keeps no logs
            args = ["block"] if script.block else ["exit", str(script.exit_code)]
            return AppDef(name="contract", roles=[Role(name="r", entrypoint="x", args=args)])

        async def release(self, sched: Scheduler, app: AppDef, job: Job) -> None:
            my_plugin.finish(job.app_id)

    class TestMyScheduler(SchedulerContract):
        @pytest.fixture
        def harness(self, tmp_path):
            return MyHarness(tmp_path)

(pytest-asyncio in its "auto" mode, or `asyncio_mode = "auto"` in the plugin's pytest config.)

Every scheduler a test builds is fresh, started with a task group of the suite's own, and shut
down and closed after the test; a background task that died with an error fails the test. No
check sleeps to decide its result: waits are loops over `describe_many` (paced by
`Harness.advance`) bounded by `Harness.timeout`.

Modules: `harness` (what a backend supplies: Harness, Script, Output, CommandScripts),
`helpers` (submit, bounded waits and reads, usable on their own), `contract` (the checks).
"""

from __future__ import annotations

from txd.schedulers.api import TaskGroupLike
from txd.schedulers.testing.contract import SchedulerContract
from txd.schedulers.testing.harness import CommandScripts, Harness, Output, Script
from txd.schedulers.testing.helpers import (
    Submission,
    Tasks,
    describe,
    read_all,
    submit,
    wait_for,
    wait_terminal,
)

__all__ = [
    "CommandScripts",
    "Harness",
    "Output",
    "SchedulerContract",
    "Script",
    "Submission",
    "TaskGroupLike",
    "Tasks",
    "describe",
    "read_all",
    "submit",
    "wait_for",
    "wait_terminal",
]
