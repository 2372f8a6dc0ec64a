"""eventsize: what a status change of a real local_cwd job costs the job store, and what is
left of it once the job is pruned.

A fresh daemon runs JOBS `true` jobs (through AsyncClient, as txctl would), waits for them,
and reads jobs.db through SQLite's dbstat table (pages of each table and index, and the bytes
of them in use): the events table and its two indexes grown per event, against the empty store
(page-granular, so the count keeps the rounding under 2%); the whole file per event, the jobs'
rows (AppDef, options, native request) included; the status each event carries. Then it prunes
every job and reads the bytes in use per removed event (kept without its status, so a replay
can count it in a GAP, until the retention drops it). The synthetic statuses of `events`
(events_store: state and handle only) understate a real job's, whose status names its roles,
replicas, times and log paths."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from txd.client import AsyncClient
from txd.daemon.jobstore import FILE_NAME

from benchmarks.common import log, submit_many, trivial_app, wait_all
from benchmarks.context import Context
from benchmarks.daemons import stop

EVENT_OBJECTS = ("events", "events_by_handle", "events_by_at")
MAX_PRUNE_CALLS = 100  # Prune removes up to 1,000 jobs a call


@dataclass(frozen=True)
class Pages:
    """The events as dbstat reads them: bytes of pages of the events table and its indexes
    (`size`) and of them in use (`used`), of the whole file; rows; a status's mean bytes."""

    size: int
    used: int
    file_size: int
    events: int
    status_bytes: float  # mean bytes of a status event's AppStatus


def _pages(db: sqlite3.Connection) -> Pages:
    rows = db.execute("SELECT name, sum(pgsize), sum(pgsize - unused) FROM dbstat GROUP BY name")
    by_name = {name: (size, used) for name, size, used in rows}
    events, mean = db.execute(
        "SELECT count(*), avg(length(status)) FILTER (WHERE kind = 1) FROM events"
    ).fetchone()
    return Pages(
        size=sum(by_name.get(n, (0, 0))[0] for n in EVENT_OBJECTS),
        used=sum(by_name.get(n, (0, 0))[1] for n in EVENT_OBJECTS),
        file_size=sum(size for size, _ in by_name.values()),
        events=events,
        status_bytes=mean or 0.0,
    )


@contextlib.contextmanager
def _opened(state_dir: Path) -> Iterator[sqlite3.Connection]:
    """A copy in memory of the daemon's store as committed now (the WAL's pages included)."""
    uri = f"file:{state_dir / FILE_NAME}?mode=ro"
    with (
        contextlib.closing(sqlite3.connect(uri, uri=True)) as src,
        contextlib.closing(sqlite3.connect(":memory:")) as db,
    ):
        src.backup(db)
        yield db


def read(state_dir: Path) -> Pages:
    with _opened(state_dir) as db:
        return _pages(db)


def removed_only(state_dir: Path) -> tuple[Pages, int]:
    """The events of pruned jobs alone (the deletions' own events left out of a copy), and
    how many there are."""
    with _opened(state_dir) as db:
        removed = db.execute("SELECT count(*) FROM events WHERE kind = 3").fetchone()[0]
        db.execute("DELETE FROM events WHERE kind = 2")
        return _pages(db), removed


async def run(ctx: Context) -> None:
    jobs = 100 if ctx.quick else 400
    d = ctx.daemons.start(ctx.daemons.new("eventsize"))
    try:
        log(f"eventsize: {jobs} local_cwd `true` jobs, then prune them")
        empty = read(d.state_dir)
        async with AsyncClient(d.socket, own_connection=True) as c:
            handles, _ = await submit_many(c, trivial_app("eventsize"), jobs, callers=4)
            ended = await wait_all(c, handles)
            ran = read(d.state_dir)
            n = ran.events - empty.events
            grown = ran.size - empty.size
            ctx.res.add(
                "job store growth per status change, real local_cwd jobs",
                f"{grown / n:.0f} B",
                note=f"the events table and its 2 indexes, {n:,} events of {jobs} jobs "
                f"({', '.join(f'{k} {v}' for k, v in ended.items())}): {grown / 1e3:,.0f} kB; "
                f"their statuses {ran.status_bytes:.0f} B each, {ran.used / n:.0f} B in use "
                "per event",
            )
            ctx.res.add(
                "job store growth per status change, the jobs' rows included",
                f"{(ran.file_size - empty.file_size) / n:.0f} B",
                note="the whole file (jobs, native requests, events) over the events",
            )
            cutoff = dt.datetime.now(dt.UTC)
            for _ in range(MAX_PRUNE_CALLS):
                if not (await c.prune(cutoff)).more:
                    break
        husks, removed = removed_only(d.state_dir)
        assert removed == n, (removed, n)
        ctx.res.add(
            "bytes in use per event of a pruned job (kept without its status)",
            f"{husks.used / removed:.0f} B",
            note=f"{removed:,} events; {ran.used / n:.0f} B each before the prune; "
            "until the retention drops them",
        )
    finally:
        stop(d)
