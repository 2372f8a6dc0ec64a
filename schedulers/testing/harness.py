"""What a backend supplies to the contract suite: a `Harness` (how to build a started scheduler,
how to turn a `Script` into an AppDef it runs, how to let a blocking job go on), and
`CommandScripts`, Scripts as commands for backends that run a command where the test's files are.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import itertools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txd.schedulers.api import Job, Scheduler, SubmitContext, TaskGroupLike
from txd.v1 import AppDef, CfgValue, Role

# -- what a backend supplies --------------------------------------------------------------------


@dataclass(frozen=True)
class Output:
    """Bytes a job writes to its stdout and to its stderr, exactly."""

    stdout: bytes = b""
    stderr: bytes = b""


@dataclass(frozen=True)
class Script:
    """What a test job does, in the harness's terms: write `first`; with `block`, wait until the
    harness releases it (or it is cancelled); write `then`; exit with `exit_code` (0: the job
    SUCCEEDS, else it FAILS). One role, one replica unless `replicas` says otherwise."""

    first: Output = Output()
    block: bool = False
    then: Output = Output()
    exit_code: int = 0
    replicas: int = 1

    @property
    def writes(self) -> bool:
        return any((self.first.stdout, self.first.stderr, self.then.stdout, self.then.stderr))


class Harness(abc.ABC):
    """How the suite drives one backend. Override the abstract methods; the attributes have
    defaults that suit a backend on this host."""

    # Bounds every wait of a check (seconds).
    timeout: float = 30.0
    # Between two describe_many calls while waiting for a status to change.
    poll_pause: float = 0.02
    # The precision of the times a backend stamps on log lines (log_since_until): lines written
    # more than this apart are told apart.
    clock_resolution: float = 0.002
    # Run options every submission passes.
    cfg: Mapping[str, CfgValue] = {}
    # Given to shutdown() at the end of every test.
    grace: float = 2.0
    # The backend keeps logs as text, so invalid UTF-8 comes back as U+FFFD (Docker's
    # json-file log driver behind the kubelet does): the byte checks expect that instead.
    utf8_logs: bool = False

    def logged(self, data: bytes) -> bytes:
        """`data` as the backend's logs give it back."""
        return data.decode("utf-8", "replace").encode() if self.utf8_logs else data

    @abc.abstractmethod
    async def scheduler(self, tasks: TaskGroupLike) -> Scheduler[Any, Any]:
        """A new scheduler instance, started with `tasks` (`await sched.start(tasks)`)."""

    @abc.abstractmethod
    def app(self, script: Script) -> AppDef | None:
        """An AppDef the backend runs as `script` says, or None if it cannot (the check that
        needs it is then skipped). A backend without logs may ignore the outputs; with
        `capabilities.logs` it must write them byte for byte."""

    async def release(self, sched: Scheduler[Any, Any], app: AppDef, job: Job) -> None:  # noqa: B027
        """Lets a job of a blocking Script go on (to `then` and its exit). The default does
        nothing: for backends whose jobs end by themselves as time (`advance`) passes."""

    def context(self) -> SubmitContext:
        """The SubmitContext of every submission."""
        import os

        return SubmitContext(cwd=os.getcwd(), env=dict(os.environ))

    async def explain(self, sched: Scheduler[Any, Any], job: Job) -> str:
        """What the backend shows of `job`, added to a failed wait's message ("": nothing)."""
        return ""

    async def advance(self, sched: Scheduler[Any, Any]) -> None:
        """Lets time pass between two status queries of a wait (recorded backends push their
        next recorded answer here)."""
        await asyncio.sleep(self.poll_pause)

    def backend_down(
        self, sched: Scheduler[Any, Any]
    ) -> contextlib.AbstractContextManager[None] | None:
        """A context manager inside which the backend cannot be reached (a login node down, a
        recorded host that refuses every command), or None when the harness cannot do that."""
        return None

    async def close(self) -> None:  # noqa: B027
        """Cleans up after a test (the scheduler is shut down and closed already)."""


class CommandScripts:
    """Scripts as commands, for backends that run a command where it can read the files the
    test writes (this host, a shared filesystem): the job is a Python interpreter running
    JOB_PROGRAM, which copies files of exact bytes to its stdout and stderr and, to block,
    waits for a release file. `python` is the interpreter's path where the job runs."""

    JOB_PROGRAM = """\
import os, signal, sys, time
spec = sys.argv[1]
if os.getpid() == 1:  # a container's first process, which SIGTERM does not end by default
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))

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

    def __init__(self, root: Path, python: str = sys.executable, role: str = "main") -> None:
        self.root = root
        self.python = python
        self.role = role
        self._ids = itertools.count()

    def app(self, script: Script) -> AppDef:
        spec = self.root / f"job{next(self._ids)}"
        spec.mkdir(parents=True)
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
            name=self.role,
            entrypoint=self.python,
            args=["-c", self.JOB_PROGRAM, str(spec)],
            num_replicas=script.replicas,
        )
        return AppDef(name="contract", roles=[role])

    def release(self, app: AppDef) -> None:
        (Path(app.roles[0].args[2]) / "release").touch()
