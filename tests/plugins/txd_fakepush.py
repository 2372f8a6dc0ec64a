"""A third-party scheduler for the tests that PUSHES status, loaded by the daemon through the
`txd.schedulers` entry-point group (or in-process by the contract suite).

Its "backend" is its state dir: a job is the file `jobs/<app_id>` holding its state's name, and
whoever rewrites that file (a test) moves the job on. A role whose args are `["block"]` runs
until then; `["exit", "N"]` ends at once, SUCCEEDED for 0, else FAILED. A job file rewritten
to `CHURN N` stands for a backend streaming a burst of changes: the change stream pushes N
RUNNING statuses (messages `tick 1` to `tick N`) as fast as the daemon takes them, then the
job SUCCEEDS.

The backend is unreachable while a file `down` exists in the state dir: every call raises
BackendUnavailable then, an open change stream ends with it, and so does `shutdown` (as a
backend that must be asked to stop what it runs on this host would).

`changes()` stands in for a backend's event stream by scanning the folder every SCAN seconds.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txd.schedulers.api import (
    SUBSCRIBED,
    Change,
    Described,
    DryRunInfo,
    Job,
    Scheduler,
    SubmitContext,
    Submitted,
    Subscribed,
    is_terminal,
    make_unique,
)
from txd.schedulers.errors import BackendUnavailable, InvalidArgument
from txd.schedulers.options import opt
from txd.v1 import AppDef, AppState, AppStatus, Capabilities

SCAN = 0.02
CHURN = "CHURN"  # a job file's "CHURN N": see above


@dataclass
class PushOpts:
    tag: str = opt("", "a label")


@dataclass
class PushRequest:
    app_id: str
    state: str


class FakePush(Scheduler[PushOpts, PushRequest]):
    name = "fakepush"
    description = "test double: jobs are files, status is pushed"
    capabilities = Capabilities(
        cancel=True, delete=True, list=True, describe=True, push_status=True
    )
    Opts = PushOpts

    def __init__(
        self, session_name: str, settings: Any = None, *, state_dir: str | os.PathLike[str]
    ) -> None:
        super().__init__(session_name, {"poll_interval": 0.1, **(settings or {})})
        self.dir = Path(state_dir)
        self.jobs = self.dir / "jobs"
        self.jobs.mkdir(parents=True, exist_ok=True)

    def _check_up(self) -> None:
        if (self.dir / "down").exists():
            raise BackendUnavailable("fakepush: the backend is down")

    def _states(self) -> dict[str, str]:
        return {p.name: p.read_text() for p in self.jobs.iterdir()}

    @staticmethod
    def _status(app_id: str, state: str, msg: str = "") -> AppStatus:
        if state.startswith(CHURN):
            return AppStatus(app_id=app_id, state=AppState.RUNNING, msg=msg or "churning")
        return AppStatus(app_id=app_id, state=AppState.Value(state), msg=msg)

    async def _submit_dryrun(
        self, app: AppDef, opts: PushOpts, ctx: SubmitContext
    ) -> DryRunInfo[PushRequest]:
        args = list(app.roles[0].args)
        if args == ["block"]:
            state = "RUNNING"
        elif len(args) == 2 and args[0] == "exit" and args[1].isdigit():
            state = "SUCCEEDED" if args[1] == "0" else "FAILED"
        else:
            raise InvalidArgument("app.roles[0].args", "expected [block] or [exit, N]")
        req = PushRequest(make_unique(app.name), state)
        return DryRunInfo(app=app, request=req, opts=opts, render=lambda: f"fakepush {req}")

    async def schedule(self, dryrun: DryRunInfo[PushRequest]) -> Submitted:
        self._check_up()
        req = dryrun.request
        (self.jobs / req.app_id).write_text(req.state)
        return Submitted(req.app_id)

    async def describe_many(self, jobs: Sequence[Job]) -> dict[str, Described]:
        self._check_up()
        states = self._states()
        return {
            j.app_id: self._status(j.app_id, states[j.app_id]) if j.app_id in states else None
            for j in jobs
        }

    async def changes(self) -> AsyncGenerator[Change | Subscribed, None]:
        self._check_up()
        seen = self._states()
        yield SUBSCRIBED
        while True:
            await asyncio.sleep(SCAN)
            self._check_up()
            now = self._states()
            for app_id, state in now.items():
                if seen.get(app_id) == state:
                    continue
                if not state.startswith(CHURN):
                    yield Change(app_id, self._status(app_id, state))
                    continue
                for i in range(1, int(state.split()[1]) + 1):
                    yield Change(app_id, self._status(app_id, state, f"tick {i}"))
                    await asyncio.sleep(0)  # each its own commit, as separate pushes
                (self.jobs / app_id).write_text("SUCCEEDED")
            for app_id in seen.keys() - now.keys():
                yield Change(app_id, None)
            seen = now

    async def list(self) -> list[AppStatus]:
        self._check_up()
        return [self._status(app_id, state) for app_id, state in self._states().items()]

    async def cancel(self, job: Job) -> None:
        self._check_up()
        path = self.jobs / job.app_id
        if path.exists() and not is_terminal(self._status(job.app_id, path.read_text()).state):
            path.write_text("CANCELLED")

    async def delete(self, job: Job) -> None:
        self._check_up()
        (self.jobs / job.app_id).unlink(missing_ok=True)

    async def shutdown(self, grace: float) -> None:
        self._check_up()


def create_scheduler(session_name: str, **kwargs: Any) -> FakePush:
    return FakePush(session_name, kwargs.get("settings"), state_dir=kwargs["state_dir"])
