"""A third-party scheduler for the tests, loaded by the daemon through the `txd.schedulers`
entry-point group. Its jobs are files; it cannot push, so the daemon polls it.

A job reports RUNNING until the scheduler has answered FINISH_AFTER batched status queries in
all, then SUCCEEDED. Every describe_many call appends the ids it was asked about, one line per
call, to <state_dir>/calls.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txd.schedulers.api import DryRunInfo, Scheduler, SubmitContext, make_unique
from txd.schedulers.options import opt
from txd.v1 import AppDef, AppState, AppStatus, Capabilities

FINISH_AFTER = 5


@dataclass
class FakeOpts:
    tag: str = opt("", "a label, to show that options reach third-party schedulers")


class FakePoll(Scheduler[FakeOpts, str]):
    name = "fakepoll"
    description = "test double: jobs are files, status is polled"
    capabilities = Capabilities(cancel=True, describe=True)
    Opts = FakeOpts
    poll_interval = 0.1

    def __init__(self, session_name: str, *, state_dir: str | os.PathLike[str]) -> None:
        super().__init__(session_name)
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.calls = 0

    async def _submit_dryrun(
        self, app: AppDef, opts: FakeOpts, ctx: SubmitContext
    ) -> DryRunInfo[str]:
        app_id = make_unique(app.name)
        return DryRunInfo(app=app, request=app_id, opts=opts, render=lambda: f"fake {app_id}")

    async def schedule(self, dryrun: DryRunInfo[str]) -> str:
        (self.dir / f"{dryrun.request}.job").write_text("RUNNING")
        return dryrun.request

    async def describe(self, app_id: str) -> AppStatus | None:
        path = self.dir / f"{app_id}.job"
        if not path.exists():
            return None
        state = path.read_text()
        if state == "RUNNING" and self.calls >= FINISH_AFTER:
            state = "SUCCEEDED"
        return AppStatus(state=AppState.Value(state))

    async def describe_many(self, app_ids: Any) -> dict[str, AppStatus | None]:
        ids = list(app_ids)
        self.calls += 1
        with (self.dir / "calls").open("a") as f:
            f.write(" ".join(ids) + "\n")
        return {i: await self.describe(i) for i in ids}

    async def _cancel_existing(self, app_id: str) -> None:
        (self.dir / f"{app_id}.job").write_text("CANCELLED")


def create_scheduler(session_name: str, **kwargs: Any) -> FakePoll:
    return FakePoll(session_name, state_dir=kwargs["state_dir"])
