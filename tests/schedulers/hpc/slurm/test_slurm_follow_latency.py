"""`txctl logs -f` of a Slurm job delivers each line as it is written (issue 7), whether the
follow began before the job's output file existed (the usual run-then-follow) or after.

GNU `tail -F` of a file that is missing when it starts polls it once a second for good, so lines
came in 1 s batches. The job here stamps each line with the time it writes it and writes the next
one only once the test has received the previous one (release files), so every line's latency is
measured on its own: under 1 s polling each is close to a second.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from txd.v1 import AppDef, AppState, Role
from txd_testing import pids_with_marker, recorded_native

LINES = 5
# Generous for a loaded 2-core machine; 1 s polling puts every line near 1 s.
MEDIAN_BOUND = 0.4


def stamped_lines(releases: Path) -> str:
    """Prints "0 <unix time>" at once, then "i <unix time>" once `releases`/i exists."""
    return (
        'echo "0 $(date +%s.%N)"\n'
        f"for i in $(seq 1 {LINES}); do\n"
        f'  while [ ! -e {releases}/"$i" ]; do sleep 0.01; done\n'
        '  echo "$i $(date +%s.%N)"\n'
        "done\n"
    )


def scontrol(cluster: Any, *args: str, check: bool = True) -> None:
    subprocess.run(["scontrol", *args], env=cluster.env(), check=check, capture_output=True)


async def until_true(what: str, check: Callable[[], bool]) -> None:
    for _ in range(1200):  # 60 s
        if check():
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"gave up waiting for {what}")


async def follow_stamps(client: Any, handle: str, releases: Path) -> dict[int, float]:
    """Follows the job's stdout: the latency of each line, by its number. Receiving line i
    releases line i + 1."""
    latencies: dict[int, float] = {}
    pending = b""
    async for chunk in client.logs(handle, "main", 0, follow=True, streams="stdout"):
        now = time.time()
        pending += chunk.data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            i, stamp = line.split()
            latencies[int(i)] = now - float(stamp)
            if int(i) < LINES:
                (releases / str(int(i) + 1)).touch()
    return latencies


@pytest.mark.parametrize("file_exists", [False, True], ids=["before-file", "after-file"])
async def test_follow_delivers_each_line_as_written(
    slurm_client: Any,
    slurm_daemon: Any,
    slurm_cluster: Any,
    target: Any,
    jobdir: Path,
    file_exists: bool,
) -> None:
    releases = jobdir / "releases"
    releases.mkdir(parents=True)
    app = AppDef(
        name="stamps",
        roles=[Role(name="main", entrypoint="bash", args=["-c", stamped_lines(releases)])],
    )
    cfg = target(jobdir)
    # A partition of this test's own, down, holds the job so that its output file cannot exist
    # before the follow is under way.
    partition = f"held{time.monotonic_ns()}"
    if not file_exists:
        scontrol(slurm_cluster, "create", f"PartitionName={partition}", "Nodes=ALL", "State=DOWN")
        cfg["partition"] = partition
    follow = None
    try:
        handle = await slurm_client.run(app, "slurm", cfg)
        native = recorded_native(slurm_daemon.state_dir, handle)
        out = jobdir / f"slurm-{native['job_id']}-{native['tag']}-main-0.out"
        if file_exists:
            await until_true("the first line", lambda: out.exists() and out.stat().st_size > 0)
        follow = asyncio.ensure_future(follow_stamps(slurm_client, handle, releases))
        if not file_exists:
            # Whatever follows the file names it on its command line (here or on the login node,
            # which is this machine too).
            await until_true("the follow to start", lambda: bool(pids_with_marker(str(out))))
            assert not out.exists()
            scontrol(slurm_cluster, "update", f"PartitionName={partition}", "State=UP")
        latencies = await asyncio.wait_for(follow, 60)
    finally:
        if follow is not None:
            follow.cancel()
        if not file_exists:
            scontrol(slurm_cluster, "update", f"PartitionName={partition}", "State=UP", check=False)
    assert sorted(latencies) == list(range(LINES + 1)), latencies
    # Line 0 was written before the follow began when the file existed: not a latency.
    measured = [latencies[i] for i in range(1, LINES + 1)]
    assert statistics.median(measured) < MEDIAN_BOUND, measured
    assert (await slurm_client.wait(handle, timeout=30)).state == AppState.SUCCEEDED
    if not file_exists:
        scontrol(slurm_cluster, "delete", f"PartitionName={partition}")
