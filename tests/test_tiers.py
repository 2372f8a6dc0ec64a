"""tests/tiers.py, which scripts/test runs: each test's tier, the lanes, and the counts read
from each tier's pytest summary (summed into the closing line CI reads)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tiers

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize(
    ("path", "tier"),
    [
        ("client/test_config.py", "unit"),
        ("daemon/test_feeds.py", "unit"),
        ("schedulers/test_logfiles.py", "unit"),
        ("schedulers/hpc/lsf/test_lsf_contract.py", "unit"),
        ("schedulers/hpc/slurm/test_slurm_jobs.py", "slurm"),
        ("schedulers/local/test_local_cwd_contract.py", "daemon"),
        ("integration/test_run_cli.py", "daemon"),
        ("load/test_load.py", "daemon"),
        ("schedulers/docker/test_local_docker.py", "docker"),
        ("schedulers/kubernetes/test_kubernetes_objects.py", "kubernetes"),
        ("schedulers/aws/test_aws_batch.py", "aws"),
    ],
)
def test_a_tests_tier_is_its_folders(path: str, tier: str) -> None:
    assert (HERE / path).exists(), path
    assert tiers.tier_of(HERE / path) == tier


def test_every_tier_runs_in_exactly_one_lane() -> None:
    in_lanes = [tier for lane in tiers.LANES for tier in lane]
    assert sorted(in_lanes) == sorted(tiers.NAMES)
    assert {tier for _, tier in tiers.TIERS} == set(tiers.NAMES)


def test_counts_come_from_the_last_summary_line() -> None:
    log = (
        "tests/x.py ..F.s\n"
        "=========================== short test summary info ============================\n"
        "FAILED tests/x.py::test_b - assert 1 == 2\n"
        "==== 1 failed, 3 passed, 1 skipped, 2 errors, 10 deselected in 4.20s (0:00:04) ====\n"
    )
    assert tiers.counts_of(log) == {"passed": 3, "failed": 3, "skipped": 1}
    assert tiers.counts_of("== 5 passed in 0.10s ==\n") == {"passed": 5, "failed": 0, "skipped": 0}
    # pytest killed before its summary: nothing counted (the tier fails by its exit status).
    assert tiers.counts_of("tests/x.py ...\n") == {"passed": 0, "failed": 0, "skipped": 0}


def _run_tiers(*args: str) -> tuple[int, str, Path]:
    proc = subprocess.run(
        [sys.executable, str(HERE / "tiers.py"), "--tier", "unit", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    found = re.search(r"===== tier unit \(lane 1\): (\S+)/unit\.log =====", proc.stdout)
    assert found, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.returncode, proc.stdout, Path(found[1])


def test_a_passing_run_leaves_no_log_folder_and_a_failing_one_keeps_it() -> None:
    """Each tier's log is printed whole, so a run that passed leaves nothing behind; one that
    did not keeps the logs, and says where."""
    rc, out, logs = _run_tiers("-p", "no:cacheprovider", "-k", "every_tier_runs_in_exactly")
    assert rc == 0, out[-2000:]
    assert not logs.exists()
    assert "logs are kept" not in out
    rc, out, logs = _run_tiers("--no-such-option")
    try:
        assert rc == 1, out[-2000:]
        assert (logs / "unit.log").is_file()
        assert f"the tiers' logs are kept in {logs}\n" in out
    finally:
        shutil.rmtree(logs, ignore_errors=True)
