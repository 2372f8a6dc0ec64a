"""Load (issue 12): one real daemon on local_cwd under 200 concurrent RPC callers, 100 followed
log streams (20 of them read slowly) and 2,000 jobs (tests/load/load_testing.py): no call
fails, every job's log arrives complete and in order, and slow readers do not make the daemon
hold their logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from load_testing import MiB, Shape, run_load

SHAPE = Shape()
# The daemon's peak RSS above its baseline (after the callers connected). Holding what the slow
# readers have not read yet would take up to slow * slow_bytes (160 MiB); streaming holds a few
# chunks of each.
RSS_GROWTH_BOUND_MIB = 64


@pytest.mark.slow
@pytest.mark.timeout(SHAPE.bound + 60)
async def test_load(daemon: Any, tmp_path: Path) -> None:
    assert SHAPE.slow * SHAPE.slow_bytes > 2 * RSS_GROWTH_BOUND_MIB * MiB
    report = await run_load(daemon.socket, daemon.pid, tmp_path, SHAPE)
    print(report.summary())
    assert report.error_count == 0, report.errors
    assert not report.mismatches, report.mismatches[:10]
    assert report.checked == SHAPE.jobs
    assert report.followed_checked == SHAPE.followed
    assert report.final_states == {"SUCCEEDED": SHAPE.jobs}
    assert all(report.calls.get(kind) for kind in ("status", "list", "watch")), report.calls
    growth = (report.hwm_kib - report.rss_start_kib) / 1024
    assert growth < RSS_GROWTH_BOUND_MIB, (
        f"the daemon's RSS peaked {growth:.0f} MiB above its baseline "
        f"({report.rss_start_kib / 1024:.0f} MiB): {report.summary()}"
    )
