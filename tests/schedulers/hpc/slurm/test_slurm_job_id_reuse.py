"""Slurm hands out a job id again (slurmctld restarted without the state it had learnt since,
as after `-i` with lost or restored state files, or ids wrapping at MaxJobId): txd's handles
stay unique for all time, and no record or log of the earlier job is overwritten."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from txd.v1 import AppDef, AppState
from txd_testing import read_logs

from .test_slurm_jobs import role


def _stop_ctld(cluster: Any) -> None:
    pid = int((cluster.root / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)  # slurmctld saves its state and exits
    _until(lambda: not Path(f"/proc/{pid}").exists(), "slurmctld to exit")


def _start_ctld(cluster: Any) -> None:
    subprocess.run(["slurmctld", "-i"], env=cluster.env(), check=True)

    def answers() -> bool:
        ping = subprocess.run(
            ["scontrol", "ping"], env=cluster.env(), capture_output=True, text=True, check=False
        )
        return "is UP" in ping.stdout

    _until(answers, "slurmctld to answer")


def _until(ready: Any, what: str, timeout: float = 30.0) -> None:
    """Waits for an outside process (bounded): the cluster has no event to wait on."""
    import time

    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.restarts_slurmctld
async def test_a_job_id_handed_out_again_gets_a_handle_of_its_own(
    own_slurm_daemon: Any, slurm_cluster: Any, jobdir: Path, tmp_path: Path
) -> None:
    state, snapshot = slurm_cluster.root / "ctld", tmp_path / "ctld"
    await asyncio.to_thread(_stop_ctld, slurm_cluster)
    shutil.copytree(state, snapshot)
    await asyncio.to_thread(_start_ctld, slurm_cluster)
    cfg = {"job_dir": str(jobdir)}
    async with own_slurm_daemon.client() as c:
        first = await c.run(AppDef(name="first", roles=[role("main", "echo first")]), "slurm", cfg)
        assert (await c.wait(first, timeout=60)).state == AppState.SUCCEEDED

        # slurmctld comes back with the state of before the first job: its id is free again.
        await asyncio.to_thread(_stop_ctld, slurm_cluster)
        shutil.rmtree(state)
        shutil.copytree(snapshot, state)
        await asyncio.to_thread(_start_ctld, slurm_cluster)

        second = await c.run(
            AppDef(name="second", roles=[role("main", "echo second")]), "slurm", cfg
        )
        assert second == f"{first}.2", (first, second)
        done = await c.wait(second, timeout=60)
        assert (done.state, done.app_id) == (AppState.SUCCEEDED, second.rpartition("/")[2])
        # The first job's record and logs are its own still.
        before = await c.describe(first)
        assert (before.app.name, before.status.state) == ("first", AppState.SUCCEEDED)
        assert await read_logs(c, first) == b"first\n"
        assert await read_logs(c, second) == b"second\n"
        assert [a.app_handle for a in await c.list()] == [second, first]
