"""events, the store: what each status change adds to jobs.db, and what retention does to it.

A store filled offline (through txd's own JobStore, as the daemon writes: each change with its
event) on a daemon started with a retention of RETENTION seconds: its sweep drops the old events
(daemon.events.EventHub.sweep: up to 10,000 per pass, a pass every max(retention / 10, 1 s)).
The file does not shrink: the store never VACUUMs (and auto_vacuum is off), so the pages the
events held go on SQLite's free list, and the next events reuse them."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from txd.daemon.jobstore import FILE_NAME, JobRecord, JobStore
from txd.v1 import AppState
from txd.v1.app_pb2 import AppDef, AppStatus, Role

from benchmarks.common import log
from benchmarks.context import Context
from benchmarks.daemons import stop

STATES = (AppState.PENDING, AppState.RUNNING, AppState.SUCCEEDED)
RETENTION = 1.0  # seconds: every event of the filled store is older once the daemon runs
DROP_LIMIT = 120.0  # seconds the sweep may take to drop them all
MB = 1e6


def insert_jobs(store: JobStore, jobs: int) -> list[str]:
    """`jobs` SUBMITTED local_cwd jobs (one event each), 1,000 per commit; their handles."""
    app = AppDef(name="bench", roles=[Role(name="r", entrypoint="true")])
    now = time.time()
    handles = [f"local_cwd://bench/bench-{i:07d}" for i in range(jobs)]
    for k in range(0, jobs, 1000):
        recs = []
        for handle in handles[k : k + 1000]:
            app_id = handle.rsplit("/", 1)[1]
            st = AppStatus(state=AppState.SUBMITTED, app_handle=handle, app_id=app_id)
            recs.append(JobRecord(handle, "local_cwd", app_id, now, app, st, {}, {}))
        store.insert_many(recs)
    return handles


def change_all(
    store: JobStore, handles: Sequence[str], states: Sequence[AppState] = STATES
) -> None:
    """Each job through `states`: a status change (and its event) per job and state, 1,000
    per commit."""
    for k in range(0, len(handles), 1000):
        part = handles[k : k + 1000]
        for state in states:
            store.update_statuses([(h, AppStatus(state=state, app_handle=h)) for h in part])


def on_disk(state_dir: Path) -> int:
    """What a user sees: jobs.db and its WAL (and shared memory) file, in bytes."""
    return sum(p.stat().st_size for p in state_dir.glob(f"{FILE_NAME}*"))


def _read(state_dir: Path, sql: str) -> int:
    uri = f"file:{state_dir / FILE_NAME}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        return int(db.execute(sql).fetchone()[0])


def free_bytes(state_dir: Path) -> int:
    """Bytes of the file on SQLite's free list (reused by later writes)."""
    return _read(state_dir, "PRAGMA freelist_count") * _read(state_dir, "PRAGMA page_size")


def held(state_dir: Path) -> int:
    return _read(state_dir, "SELECT count(*) FROM events")


def with_store(state_dir: Path, jobs: int = 0, handles: Sequence[str] = ()) -> list[str]:
    """Opens the store offline, inserts `jobs` jobs or changes `handles`, closes it (SQLite
    checkpoints the WAL into the file and removes it on the last close)."""
    store = JobStore.in_state_dir(state_dir)
    try:
        if jobs:
            return insert_jobs(store, jobs)
        change_all(store, handles)
        return list(handles)
    finally:
        store.close()


async def run(ctx: Context) -> None:
    jobs = 2_000 if ctx.quick else 10_000
    d = ctx.daemons.new("events-store", args=["--set", f"events.retention={RETENTION}"])
    sd = d.state_dir
    log(f"events: store growth, {jobs:,} jobs through {len(STATES)} changes each")
    handles = with_store(sd, jobs=jobs)
    s0 = on_disk(sd)
    with_store(sd, handles=handles)
    s1 = on_disk(sd)
    changes = len(STATES) * jobs
    ctx.res.add(
        "job store growth per status change, synthetic statuses (state and handle only; a "
        "real job's: --only eventsize)",
        f"{(s1 - s0) / changes:.0f} B",
        note=f"{changes:,} changes of {jobs:,} jobs: {s0 / MB:.1f} -> {s1 / MB:.1f} MB",
    )
    events = held(sd)
    ctx.daemons.start(d)
    try:
        t0 = time.monotonic()
        while held(sd):  # the daemon's sweep drops a batch a second; bounded
            assert time.monotonic() - t0 < DROP_LIMIT, f"{held(sd)} events still held"
            await asyncio.sleep(0.2)
        took = time.monotonic() - t0
        s2, free = on_disk(sd), free_bytes(sd)
    finally:
        stop(d)
    s3 = on_disk(sd)
    ctx.res.add(
        f"job store after retention ({RETENTION:g} s) dropped all {events:,} events",
        f"{s2 / MB:.1f} MB on disk ({s1 / MB:.1f} MB before), {free / MB:.1f} MB of it free pages",
        note=f"dropped within {took:.1f} s of the start; {s3 / MB:.1f} MB once the daemon "
        "stopped (WAL checkpointed): the file never shrinks (no VACUUM), SQLite reuses the pages",
    )
    with_store(sd, handles=handles)
    s4 = on_disk(sd)
    reused = s4 - s3 < (s1 - s0) / 2
    ctx.res.add(
        f"job store growth, the next {changes:,} changes (after the drop)",
        f"{(s4 - s3) / MB:+.1f} MB (the first {changes:,}: {(s1 - s0) / MB:+.1f} MB)",
        note=f"{s4 / MB:.1f} MB on disk"
        + (": the freed pages were reused" if reused else ": the freed pages were NOT reused"),
    )
