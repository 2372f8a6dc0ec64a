"""The contract suite over third-party schedulers, loaded the way a plugin's own tests would:
fakepoll (tests/plugins/txd_fakepoll.py: polled, jobs end after a few status queries) and
fakepush (tests/plugins/txd_fakepush.py: pushed, jobs move on when their file is rewritten,
unreachable while a `down` file exists)."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from txd.schedulers.api import Job, Scheduler
from txd.schedulers.testing import Harness, SchedulerContract, Script, TaskGroupLike
from txd.v1 import AppDef, Role

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


def load_plugin(name: str) -> ModuleType:
    """tests/plugins/<name>.py as the module <name> (once per test session)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, PLUGINS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class FakePollHarness(Harness):
    """fakepoll can neither fail a job nor hold one: every job succeeds once the scheduler has
    answered FINISH_AFTER status queries, which the suite's waits make (so no pause between)."""

    poll_pause = 0.0

    def __init__(self, root: Path) -> None:
        self.root = root

    async def scheduler(self, tasks: TaskGroupLike) -> Scheduler[Any, Any]:
        sched: Scheduler[Any, Any] = load_plugin("txd_fakepoll").create_scheduler(
            "contract", state_dir=self.root
        )
        await sched.start(tasks)
        return sched

    def app(self, script: Script) -> AppDef | None:
        if script.exit_code != 0 or script.writes:
            return None
        return AppDef(name="contract", roles=[Role(name="r", entrypoint="anything")])


class FakePushHarness(Harness):
    def __init__(self, root: Path) -> None:
        self.root = root

    async def scheduler(self, tasks: TaskGroupLike) -> Scheduler[Any, Any]:
        sched: Scheduler[Any, Any] = load_plugin("txd_fakepush").create_scheduler(
            "contract", state_dir=self.root
        )
        await sched.start(tasks)
        return sched

    def app(self, script: Script) -> AppDef | None:
        if script.writes:
            return None
        args = ["block"] if script.block else ["exit", str(script.exit_code)]
        return AppDef(name="contract", roles=[Role(name="r", entrypoint="x", args=args)])

    async def release(self, sched: Scheduler[Any, Any], app: AppDef, job: Job) -> None:
        (self.root / "jobs" / job.app_id).write_text("SUCCEEDED")

    def backend_down(self, sched: Scheduler[Any, Any]) -> contextlib.AbstractContextManager[None]:
        @contextlib.contextmanager
        def down() -> Iterator[None]:
            (self.root / "down").touch()
            try:
                yield
            finally:
                (self.root / "down").unlink()

        return down()


class TestFakePoll(SchedulerContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> Harness:
        return FakePollHarness(tmp_path)


class TestFakePush(SchedulerContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> Harness:
        return FakePushHarness(tmp_path)
