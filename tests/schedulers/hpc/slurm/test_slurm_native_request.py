"""`txctl describe --native` after Slurm forgot the job (MinJobAge): the sbatch script as it
was submitted, kept by txd (issue 21)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from txd.v1 import AppDef, AppState

from .test_slurm_jobs import role

TAG = re.compile(r"(?<=slurm-%j-)[a-z0-9]{6}(?=\.out)")


async def test_describe_native_after_slurm_forgot_the_job(
    slurm_daemon: Any, slurm_client: Any, slurm_cluster: Any, jobdir: Path
) -> None:
    app = AppDef(name="kept", roles=[role("main", "echo up", replicas=2)])
    cfg = {"job_dir": str(jobdir)}
    handle = await slurm_client.run(app, "slurm", cfg)
    dry = await slurm_client.dryrun(app, "slurm", cfg)
    assert (await slurm_client.wait(handle, timeout=60)).state == AppState.SUCCEEDED
    job_id = handle.rpartition("/")[2]
    for _ in range(600):  # slurmctld purges every few seconds; 60 s is far beyond MinJobAge
        if job_id not in slurm_cluster.squeue_ids():
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail(f"Slurm still knows job {job_id}")
    out = slurm_daemon.txctl("describe", "--native", job_id, check=True).stdout
    assert out.startswith("# sbatch --parsable < script\n#!/bin/bash\n"), out
    assert "#SBATCH" in out
    # Each request draws a tag for its files (slurm-%j-<tag>.out): DryRun's drew another.
    ((tag,), (drawn,)) = (set(TAG.findall(out)), set(TAG.findall(dry.request)))
    script, _, checks = out.partition("\n# precheck on ")
    assert script == dry.request.replace(drawn, tag).partition("\n# precheck on ")[0]
    # The checks are those run before queueing (the job_dir created, sbatch --test-only), not
    # the dry run's: what the submission found.
    assert "cfg.job_dir: " in checks and "created, writable" in checks, checks
    assert "sbatch --test-only: Job " in checks and " FAIL " not in checks, checks
    data = json.loads(slurm_daemon.txctl("describe", "--native", "--json", job_id).stdout)
    assert data["native"]["text"] == out
    assert data["status"]["state"] == "SUCCEEDED"
