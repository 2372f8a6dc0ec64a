"""Fail before queueing (issue 18, item 13), on the real cluster through a real txd, on this host
and through the SSH login node: a Run that would die at once or wait for good is refused with
INVALID_ARGUMENT naming the field, and nothing is queued (squeue, which lists every job
slurmctld knows, finished ones included, shows no new job); --dryrun shows every check; the
option precheck=False submits as before."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txd.client import TxdError
from txd.v1 import AppDef, Resource, Role
from txd_testing import unique

from .test_slurm_jobs import STATE

SHORT = "txdshort"  # a partition of the test's own: 2 nodes, MaxTime 5 minutes


@pytest.fixture(scope="module")
def short_partition(slurm_cluster: Any) -> Iterator[str]:
    scontrol = ["scontrol", "create", f"PartitionName={SHORT}", "Nodes=n[1-2]", "MaxTime=5"]
    subprocess.run(scontrol, env=slurm_cluster.env(), check=True)
    try:
        yield SHORT
    finally:
        subprocess.run(
            ["scontrol", "delete", f"PartitionName={SHORT}"], env=slurm_cluster.env(), check=True
        )


@pytest.fixture
def unwritable(jobdir: Path) -> Iterator[Path]:
    """A directory not even root can create a file in (immutable)."""
    path = jobdir / "immutable"
    path.mkdir(parents=True)
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def app(entrypoint: str = "bash", replicas: int = 1, cpu: int = 1) -> AppDef:
    r = Role(
        name="main",
        entrypoint=entrypoint,
        args=["-c", "echo ran"],
        num_replicas=replicas,
        resource=Resource(cpu=cpu, mem_mb=100),
    )
    return AppDef(name=unique("pre"), roles=[r])


async def _refused(c: Any, cluster: Any, a: AppDef, cfg: dict[str, str], field: str) -> str:
    before = cluster.squeue_ids()
    with pytest.raises(TxdError) as e:
        await c.run(a, "slurm", cfg)
    assert e.value.code == "INVALID_ARGUMENT", e.value
    assert e.value.field == field, (e.value.field, str(e.value))
    assert "nothing was queued" in str(e.value)
    assert cluster.squeue_ids() - before == set(), "a job was queued"
    assert [x for x in await c.list("slurm") if x.name == a.name] == []
    return str(e.value)


async def test_refused_before_anything_queues(
    slurm_client: Any,
    slurm_cluster: Any,
    target: Any,
    jobdir: Path,
    short_partition: str,
    unwritable: Path,
) -> None:
    c, cfg = slurm_client, target(jobdir)
    said = await _refused(c, slurm_cluster, app(), {**cfg, "partition": "nope"}, "cfg.partition")
    assert "no partition nope (there are: " in said
    said = await _refused(c, slurm_cluster, app("./missing.sh"), cfg, "role main: entrypoint")
    assert f"{jobdir}/./missing.sh does not exist" in said
    said = await _refused(c, slurm_cluster, app("nosuchprogram"), cfg, "role main: entrypoint")
    assert "nosuchprogram is not on the job's PATH (" in said
    # Over the partition's limits: Slurm (EnforcePartLimits=NO, its default) would accept
    # these and hold them pending for good.
    over_time = {**cfg, "partition": short_partition, "time": "10"}
    said = await _refused(c, slurm_cluster, app(), over_time, "cfg.time")
    assert f"over partition {short_partition}'s MaxTime=00:05:00" in said
    no_limit = {**cfg, "partition": short_partition, "time": "UNLIMITED"}
    said = await _refused(c, slurm_cluster, app(), no_limit, "cfg.time")
    assert f"UNLIMITED (no limit) is over partition {short_partition}'s MaxTime=00:05:00" in said
    said = await _refused(c, slurm_cluster, app(replicas=5), cfg, "app: replicas")
    assert "5 replicas need 5 nodes" in said
    said = await _refused(c, slurm_cluster, app(cpu=64), cfg, "role main: resource")
    assert "cpu=64 per replica, but debug's nodes have at most 4 CPUs" in said
    into = {**cfg, "job_dir": str(unwritable)}
    said = await _refused(c, slurm_cluster, app(), into, "cfg.job_dir")
    assert f"cannot create a file in {unwritable}" in said

    # A good job still runs.
    handle = await c.run(app(), "slurm", cfg)
    assert STATE((await c.wait(handle, timeout=60)).state) == "SUCCEEDED"


async def test_dryrun_shows_the_checks_and_queues_nothing(
    slurm_client: Any, slurm_cluster: Any, target: Any, jobdir: Path, short_partition: str
) -> None:
    before = slurm_cluster.squeue_ids()
    cfg = {**target(jobdir), "partition": short_partition, "time": "10"}
    dry = await slurm_client.dryrun(app("./missing.sh"), "slurm", cfg)
    text = dry.request
    assert "\n# precheck on " in text, text
    assert "\n#   FAIL  cfg.time: 10 (10 min) is over partition " in text, text
    assert "\n#   FAIL  role main: entrypoint: " in text, text
    assert f"ok    cfg.partition: partition {short_partition} exists" in text
    assert "ok    sbatch --test-only: Job " in text  # Slurm's own checks pass
    assert f"ok    cfg.job_dir: {jobdir}" in text
    assert not jobdir.exists()  # a dry run creates nothing
    off = await slurm_client.dryrun(app(), "slurm", {**cfg, "precheck": "False"})
    assert "# precheck: off (precheck=False)" in off.request
    assert slurm_cluster.squeue_ids() - before == set()


async def test_precheck_false_submits_as_before(
    slurm_client: Any, jobdir: Path, short_partition: str
) -> None:
    """The option turns the checks off: Slurm takes the over-limit job and holds it."""
    cfg = {"job_dir": str(jobdir), "partition": short_partition, "time": "10", "precheck": "0"}
    handle = await slurm_client.run(app(), "slurm", cfg)
    try:
        async with asyncio.timeout(30):  # Slurm gives the reason at a scheduling pass
            async for status in slurm_client.watch(handle):
                assert STATE(status.state) in ("SUBMITTED", "PENDING"), status
                if "PartitionTimeLimit" in status.msg:
                    break
    finally:
        await slurm_client.cancel(handle)
    with pytest.raises(TxdError) as e:
        await slurm_client.run(app(), "slurm", {**cfg, "partition": "nope"})
    assert e.value.code == "FAILED_PRECONDITION"  # sbatch's own refusal, as before
    assert "Invalid partition" in str(e.value)
