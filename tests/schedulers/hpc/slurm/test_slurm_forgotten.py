"""slurmctld forgets running jobs (restarted with its state save location wiped): a job that
then ends is settled from the exit code its batch output ends with, not recorded UNKNOWN at
the first poll that misses it (issue 18, item 9)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from txd.v1 import AppDef, AppState
from txd_testing import is_stale, watching

from .test_slurm_job_id_reuse import _start_ctld, _stop_ctld
from .test_slurm_jobs import held, role, until_state


def _terminal(s: Any) -> bool:
    return s.state in (AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED, AppState.UNKNOWN)


@pytest.mark.restarts_slurmctld
async def test_a_job_slurmctld_forgot_is_settled_from_its_batch_output(
    own_slurm_daemon: Any, slurm_cluster: Any, jobdir: Path
) -> None:
    release = jobdir / "release"
    apps = {
        "works": AppDef(name="works", roles=[role("main", held(release, "", "exit 0"))]),
        "fails": AppDef(name="fails", roles=[role("main", held(release, "", "exit 3"))]),
    }
    async with own_slurm_daemon.client() as c:
        handles = {
            n: await c.run(app, "slurm", {"job_dir": str(jobdir)}) for n, app in apps.items()
        }
        for handle in handles.values():
            await until_state(c, handle, AppState.RUNNING)
        async with watching(c, handles["works"]) as works, watching(c, handles["fails"]) as fails:
            # slurmctld comes back with no state: it no longer knows either job, while their
            # batch scripts still run on the nodes (until the nodes report them as orphans).
            await asyncio.to_thread(_stop_ctld, slurm_cluster)
            shutil.rmtree(slurm_cluster.root / "ctld")
            (slurm_cluster.root / "ctld").mkdir()
            await asyncio.to_thread(_start_ctld, slurm_cluster)
            for w in (works, fails):
                seen = await w.next(
                    "the daemon finds it forgotten", lambda s: is_stale(s) or _terminal(s)
                )
                # Before the fix: UNKNOWN at once, for good.
                assert seen.state == AppState.RUNNING, seen
                assert "Slurm forgot job " in seen.stale_msg, seen.stale_msg
                assert "waiting up to 60 s" in seen.stale_msg, seen.stale_msg
            release.touch()  # the scripts end and print their exit codes
            ok = await works.next("the end", _terminal)
            bad = await fails.next("the end", _terminal)
        assert ok.state == AppState.SUCCEEDED, ok
        assert ok.msg.endswith("(from its batch output)"), ok.msg
        assert bad.state == AppState.FAILED, bad
        assert bad.msg.endswith("(from its batch output), exit code 3"), bad.msg
        assert (await c.status(handles["works"])).state == AppState.SUCCEEDED
