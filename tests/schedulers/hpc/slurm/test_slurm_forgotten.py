"""slurmctld forgets running jobs (restarted with its state save location wiped): a job that
then ends is settled from the exit code its batch output ends with, not recorded UNKNOWN at
the first poll that misses it (issue 18, item 9).

The nodes' slurmd are frozen (SIGSTOP) across the restart, their job steps running on: a
slurmd that registers with the new slurmctld has it kill the jobs it no longer knows ("Orphan
StepId"), which would race the test's release of the jobs (seen once in a full tier run:
the job killed first, its batch output then said exit code 1)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from txd.v1 import AppDef, AppState
from txd_testing import is_stale, watching

from .test_slurm_job_id_reuse import _start_ctld, _stop_ctld, _until
from .test_slurm_jobs import held, role, until_state

TORCHX_NAME = re.compile(r"slurm-\d+-main-0\.out")


def _terminal(s: Any) -> bool:
    return s.state in (AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED, AppState.UNKNOWN)


def _pause_slurmds(cluster: Any) -> list[int]:
    """Freezes every slurmd (SIGSTOP; by its pid file): the job steps they started run on."""
    pids = [int(f.read_text()) for f in sorted(cluster.root.glob("slurmd-*.pid"))]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    return pids


def _resume_slurmds(cluster: Any, pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGCONT)

    def idle() -> bool:
        sinfo = ["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"]
        out = subprocess.run(sinfo, env=cluster.env(), capture_output=True, text=True).stdout
        return len(set(out.split())) >= len(pids)

    _until(idle, "the nodes to be idle again", timeout=60)


@pytest.mark.restarts_slurmctld
async def test_a_job_slurmctld_forgot_is_settled_from_its_batch_output(
    own_slurm_daemon: Any, slurm_cluster: Any, jobdir: Path
) -> None:
    release = jobdir / "release"
    apps = {
        "works": AppDef(name="works", roles=[role("main", held(release, "echo up", "exit 0"))]),
        "fails": AppDef(name="fails", roles=[role("main", held(release, "echo up", "exit 3"))]),
    }
    async with own_slurm_daemon.client() as c:
        handles = {
            n: await c.run(app, "slurm", {"job_dir": str(jobdir)}) for n, app in apps.items()
        }
        for handle in handles.values():
            await until_state(c, handle, AppState.RUNNING)
        # The batch script runs before its srun step has started, and an srun that asks the
        # new slurmctld for its step fails ("Invalid job id"): wait for the replicas to run.
        async with asyncio.timeout(30):
            while True:  # paces the look at files the nodes write; no event tells
                # TorchX's names: one per job (the tagged names are the same files).
                outs = [f for f in jobdir.glob("slurm-*-main-0.out") if TORCHX_NAME.match(f.name)]
                if len([f for f in outs if f.read_text()]) == 2:
                    break
                await asyncio.sleep(0.05)
        slurmds = _pause_slurmds(slurm_cluster)
        try:
            async with (
                watching(c, handles["works"]) as works,
                watching(c, handles["fails"]) as fails,
            ):
                # slurmctld comes back with no state: it no longer knows either job, while
                # their batch scripts still run on the nodes.
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
        finally:
            release.touch()  # never leaves a job waiting
            await asyncio.to_thread(_resume_slurmds, slurm_cluster, slurmds)
        assert ok.state == AppState.SUCCEEDED, ok
        assert ok.msg.endswith("(from its batch output)"), ok.msg
        assert bad.state == AppState.FAILED, bad
        assert bad.msg.endswith("(from its batch output), exit code 3"), bad.msg
        assert (await c.status(handles["works"])).state == AppState.SUCCEEDED
