"""The native request kept for good (issue 21): each job's backend request, as its scheduler
rendered it at submit time, is kept in the job store and shown by Describe (native=true) and
`txctl describe --native` until the job is deleted or pruned. local_cwd here, through a real
txd; the backends' own tests show it after the backend forgot the job."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from txd.daemon import jobstore
from txd.daemon.jobstore import JobStore, NativeRequest
from txd.v1 import TERMINAL_STATES, AppState
from txd_testing import native_request_rows, sh_app, with_name_of

from .test_jobstore import V0


# An app of 3 replicas is rendered on the daemon's loop, one of 20 in a thread.
@pytest.mark.parametrize("replicas", [3, 20])
async def test_describe_native_is_the_request_dryrun_shows(daemon: Any, replicas: int) -> None:
    app = sh_app("echo kept", name="kept", replicas=replicas)
    async with daemon.client() as c:
        handle = await c.run(app, "local_cwd")
        dry = await c.dryrun(app, "local_cwd")
        assert (await c.wait(handle, timeout=30)).state == AppState.SUCCEEDED
        plain = await c.describe(handle)
        assert not plain.HasField("native")  # only when asked
        resp = await c.describe(handle, native=True)
    assert resp.native.recorded and not resp.native.missing
    kept = resp.native.text
    app_id = handle.rpartition("/")[2]
    assert f"'app_id': '{app_id}'" in kept
    assert kept.count("'replica_id':") == replicas
    assert kept == with_name_of(dry.request, kept, "kept")
    # txctl prints it as it is, not a character added; --json carries it too.
    out = daemon.txctl("describe", "--native", app_id, check=True)
    assert out.stdout == kept
    data = json.loads(daemon.txctl("describe", "--native", "--json", handle, check=True).stdout)
    assert data["native"] == {"recorded": True, "text": kept, "missing": ""}
    assert "native" not in json.loads(daemon.txctl("describe", "--json", handle).stdout)


async def test_the_request_outlives_a_restart_and_goes_with_delete_and_prune(
    daemon: Any,
) -> None:
    async with daemon.client() as c:
        handles = [await c.run(sh_app("true", name=f"n{i}"), "local_cwd") for i in range(3)]
        for h in handles:
            await c.wait(h, timeout=30)
        before = {h: (await c.describe(h, native=True)).native.text for h in handles}
    assert native_request_rows(daemon.state_dir) == set(handles)
    daemon.kill()
    daemon.restart()
    async with daemon.client() as c:
        for h in handles:
            assert (await c.describe(h, native=True)).native.text == before[h]
        await c.delete(handles[0])
        assert native_request_rows(daemon.state_dir) == set(handles[1:])
        await c.delete(handles[1])
    daemon.txctl("prune", "--older-than", f"{time.time() + 1:.3f}", check=True)
    assert native_request_rows(daemon.state_dir) == set()


def _old_state_dir(state_dir: Path) -> list[str]:
    """A state dir with the jobs a txd before schema versions recorded, migrated (the live
    ones removed: nothing to follow); the handles of those kept."""
    state_dir.mkdir(parents=True)
    path = state_dir / "jobs.db"
    shutil.copy(V0.DB, path)
    store = JobStore(path)
    try:
        kept = []
        for fields in V0.RECORDS:
            if fields["status"].state in TERMINAL_STATES:
                kept.append(fields["handle"])
            else:
                store.delete(fields["handle"])
        assert all(store.native_request(h) is None for h in kept)
    finally:
        store.close()
    return kept


async def test_a_job_recorded_before_has_none_and_says_so(unstarted_daemon: Any) -> None:
    kept = _old_state_dir(unstarted_daemon.state_dir)
    unstarted_daemon.start()
    handle = kept[0]
    async with unstarted_daemon.client() as c:
        resp = await c.describe(handle, native=True)
        assert not resp.native.recorded and resp.native.text == ""
        assert "kept no native request" in resp.native.missing
        assert resp.app.name  # the rest of describe is there
    out = unstarted_daemon.txctl("describe", "--native", handle, check=8)
    assert out.stdout == ""
    assert out.stderr.strip() == f"txctl: error: {handle}: {resp.native.missing}", out.stderr
    out = unstarted_daemon.txctl("describe", "--native", "--json", handle, check=8)
    assert json.loads(out.stdout)["native"]["recorded"] is False
    unstarted_daemon.txctl("describe", handle, check=True)


def test_migration_adds_the_table_and_deleting_a_job_removes_its_request(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    shutil.copy(V0.DB, path)
    store = JobStore(path)
    try:
        fields = V0.RECORDS[0]
        store.delete(fields["handle"])
        text = "#!/bin/sh\n" + "".join(f"srun --het-group={i} 'caf\udce9'\n" for i in range(50))
        store.insert(jobstore.JobRecord(**fields))
        store.put_native_request(fields["handle"], NativeRequest.of(text))
        assert store.native_request(fields["handle"]) == text
        store.delete_many([fields["handle"]])
        assert store.native_request(fields["handle"]) is None
        # A job deleted before its request is kept gets none.
        store.put_native_request(fields["handle"], NativeRequest.of(text))
        assert store.native_request(fields["handle"]) is None
    finally:
        store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT count(*) FROM native_requests").fetchone() == (0,)


def test_a_big_request_is_kept_compressed_and_whole(tmp_path: Path) -> None:
    """A 10,000-replica request (local_cwd's table shape) is megabytes of text: kept whole,
    a fraction of its size on disk."""
    replica = (
        "{'role': 'trainer', 'replica_id': %d, 'args': ['python', '-m', 'train'], "
        "'env': {'TORCHX_RANK0_HOST': 'localhost', 'LOCAL_RANK': '%d'}},\n"
    )
    text = "".join(replica % (i, i) for i in range(10_000))
    assert len(text) > 1_000_000
    kept = NativeRequest.of(text)
    assert len(kept.body) < len(text) / 10
    assert kept.size == len(text) and kept.text == text
