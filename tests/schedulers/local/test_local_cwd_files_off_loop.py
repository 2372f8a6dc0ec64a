"""local_cwd makes a job's log folder and its replicas' log and index files in a worker thread,
before the replicas start, not on the event loop: under a storm of submissions, creating them
took over a third of the daemon's loop time (a file's creation costs 0.1 to over 1 ms of a busy
disk), while every other call waited for the server to take it (issue 18 item 15)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from txd.schedulers.api import SUBSCRIBED, AppStatus, Change, SubmitContext, is_terminal
from txd.schedulers.local.local_cwd import LocalScheduler
from txd_testing import sh_app


async def test_log_folder_and_files_are_made_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "state" / "logs"
    loop_thread = threading.get_ident()
    made: list[tuple[str, bool]] = []  # (path, on the loop's thread)
    real_open, real_mkdir = os.open, os.mkdir

    def spy_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT and str(path).startswith(str(logs)):
            made.append((str(path), threading.get_ident() == loop_thread))
        return real_open(path, flags, *args, **kwargs)

    def spy_mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path).startswith(str(logs)):
            made.append((str(path), threading.get_ident() == loop_thread))
        real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "mkdir", spy_mkdir)
    sched = LocalScheduler("t", state_dir=tmp_path / "state")
    async with asyncio.TaskGroup() as group:
        await sched.start(group)
        try:
            ctx = SubmitContext(cwd=str(tmp_path), env=dict(os.environ))
            info = await sched.submit_dryrun(sh_app("echo hi", replicas=2), {}, ctx)
            changes = sched.changes()
            assert await anext(changes) is SUBSCRIBED
            await sched.schedule(info)
            async with asyncio.timeout(10):  # the job ended: before the fix, made at its output
                async for change in changes:
                    mine = isinstance(change, Change) and change.app_id == info.request.app_id
                    status = change.status if isinstance(change, Change) else None
                    if mine and isinstance(status, AppStatus) and is_terminal(status.state):
                        break
            await changes.aclose()
        finally:
            await sched.shutdown(2.0)
            await sched.aclose()
    names = {Path(p).name for p, _ in made}
    for r in info.request.replicas:
        assert {Path(r.log + ".log").name, Path(r.log + ".idx").name} <= names, made
    assert Path(info.request.app_dir).name in names, made
    assert [p for p, on_loop in made if on_loop] == [], made
