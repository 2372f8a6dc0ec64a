"""`txctl list --state/--since/--limit` and `txctl prune` against a daemon of the test's own
(so the jobs listed and pruned are exactly the test's)."""

from __future__ import annotations

import datetime as dt
import functools
import json
from pathlib import Path
from typing import Any

import pytest
from txd.client._errors import InvalidArgumentError
from txd.v1.runner_pb2 import PruneRequest
from txd_testing import first_line, no_traceback


def _created(txctl: Any, handle: str) -> str:
    return str(json.loads(txctl("status", "--json", handle, check=0).stdout)["created"])


def test_list_filters_by_state_and_creation_time(daemon: Any, workdir: Path) -> None:
    txctl = functools.partial(daemon.txctl, cwd=workdir)
    ok = first_line(txctl("run", "--wait", "utils.echo", check=0).stdout)
    bad = first_line(txctl("run", "--wait", "utils.sh", "exit", "3", check=1).stdout)
    live = first_line(txctl("run", "utils.sh", "sleep", "60", check=0).stdout)

    def listed(*args: str) -> list[str]:
        return [j["app_handle"] for j in json.loads(txctl("list", "--json", *args).stdout)]

    try:
        assert listed("--state", "failed") == [bad]
        assert listed("--state", "Succeeded,FAILED") == [bad, ok]
        assert listed("--state", "running", "--state", "failed") == [live, bad]
        assert listed("--since", _created(txctl, bad)) == [live, bad]
        assert listed("--since", "1d", "--limit", "2") == [live, bad]
        assert listed("--since", "1d", "--state", "succeeded") == [ok]
        # Text output takes the same filters.
        text = txctl("list", "--state", "SUCCEEDED", check=0).stdout
        assert ok in text and bad not in text and live not in text
        proc = txctl("list", "--state", "runing", check=2)
        assert "unknown state 'RUNING'; states: UNSUBMITTED, SUBMITTED, PENDING," in proc.stderr
        assert "usage: txctl list" in proc.stderr
        no_traceback(txctl("list", "--since", "yesterday", check=2))
    finally:
        txctl("cancel", live, check=0)


async def test_prune_removes_finished_jobs_created_before_and_their_logs(
    daemon: Any, workdir: Path
) -> None:
    txctl = functools.partial(daemon.txctl, cwd=workdir)
    old_ok = first_line(txctl("run", "--wait", "utils.echo", "--msg", "x", check=0).stdout)
    old_bad = first_line(txctl("run", "--wait", "utils.sh", "exit", "3", check=1).stdout)
    live = first_line(txctl("run", "utils.sh", "sleep", "60", check=0).stdout)
    new = first_line(txctl("run", "--wait", "utils.echo", check=0).stdout)
    cutoff = _created(txctl, new)  # the jobs before it: old_ok, old_bad and live
    ui_url = json.loads(txctl("status", "--json", old_ok).stdout)["ui_url"]
    log_dir = Path(ui_url.removeprefix("file://").removeprefix("file:"))
    assert (log_dir / "echo.0.log").read_bytes() == b"x\n"
    try:
        dry = json.loads(txctl("prune", "--older-than", cutoff, "--dry-run", "--json").stdout)
        assert [s["app_handle"] for s in dry["pruned"]] == [old_ok, old_bad]
        assert dry["dry_run"] is True and dry["failed"] == {}
        txctl("status", old_ok, check=0)  # nothing removed
        assert log_dir.exists()

        proc = txctl("prune", "--older-than", cutoff, check=0)
        assert [line.split()[0] for line in proc.stdout.splitlines()] == [
            "HANDLE", old_ok, old_bad,
        ]  # fmt: skip
        assert "pruned 2 finished jobs" in proc.stderr
        for gone in (old_ok, old_bad):
            assert "no job" in txctl("status", gone, check=2).stderr
        assert not log_dir.exists()
        assert json.loads(txctl("status", "--json", live).stdout)["state"] == "RUNNING"

        # Everything created until now: the live job stays, whatever its age.
        everything = json.loads(txctl("prune", "--older-than", "0s", "--json", check=0).stdout)
        assert [s["app_handle"] for s in everything["pruned"]] == [new]
        listed = json.loads(txctl("list", "--json").stdout)
        assert [j["app_handle"] for j in listed] == [live]

        async with daemon.client() as c:
            with pytest.raises(InvalidArgumentError, match="created_before"):
                await c._call("Prune", PruneRequest())
            later = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
            assert not (await c.prune(later)).pruned
        no_traceback(txctl("prune", "--older-than", "soon", check=2))
        assert "--older-than" in txctl("prune", check=2).stderr
    finally:
        txctl("cancel", live, check=0)
