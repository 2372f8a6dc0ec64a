"""The contract suite over local_cwd: real processes on this host.

A test job is this interpreter running JOB below: it copies files of the exact bytes to write to
its stdout and stderr, and a blocking job waits for its release file to appear (the harness
creates it) before writing the rest.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from suite import Harness, SchedulerContract, Script, TaskGroupLike
from txd.schedulers.api import Job, Scheduler, SubmitContext
from txd.schedulers.local_cwd import create_scheduler
from txd.v1 import AppDef, Role

JOB = """\
import os, sys, time
spec = sys.argv[1]

def write(name, fd):
    with open(os.path.join(spec, name), "rb") as f:
        view = memoryview(f.read())
    while view:
        view = view[os.write(fd, view):]

write("first.out", 1)
write("first.err", 2)
if os.path.exists(os.path.join(spec, "block")):
    release = os.path.join(spec, "release")
    while not os.path.exists(release):
        time.sleep(0.01)
write("then.out", 1)
write("then.err", 2)
sys.exit(int(open(os.path.join(spec, "exit")).read()))
"""


class LocalHarness(Harness):
    def __init__(self, root: Path) -> None:
        self.root = root
        self._ids = itertools.count()

    async def scheduler(self, tasks: TaskGroupLike) -> Scheduler[Any, Any]:
        sched = create_scheduler("contract", state_dir=self.root / "state")
        await sched.start(tasks)
        return sched

    def app(self, script: Script) -> AppDef:
        spec = self.root / f"job{next(self._ids)}"
        spec.mkdir()
        for name, data in (
            ("first.out", script.first.stdout),
            ("first.err", script.first.stderr),
            ("then.out", script.then.stdout),
            ("then.err", script.then.stderr),
            ("exit", str(script.exit_code).encode()),
        ):
            (spec / name).write_bytes(data)
        if script.block:
            (spec / "block").touch()
        role = Role(
            name="main",
            entrypoint=sys.executable,
            args=["-c", JOB, str(spec)],
            num_replicas=script.replicas,
        )
        return AppDef(name="contract", roles=[role])

    async def release(self, sched: Scheduler[Any, Any], app: AppDef, job: Job) -> None:
        (Path(app.roles[0].args[2]) / "release").touch()

    def context(self) -> SubmitContext:
        return SubmitContext(cwd=str(self.root), env=dict(os.environ))


class TestLocalCwd(SchedulerContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> Harness:
        return LocalHarness(tmp_path)
