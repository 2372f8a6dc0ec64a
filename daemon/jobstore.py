"""The job registry: every job the daemon submitted, in SQLite (WAL), so status, describe, list
and logs survive a daemon restart and terminal states are remembered.

Calls are synchronous and short (one indexed statement, one commit); WAL with synchronous=NORMAL
keeps a commit off the disk's fsync path while staying safe against a daemon crash.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txd.schedulers.api import TERMINAL
from txd.schedulers.options import CfgVal
from txd.v1.app_pb2 import AppDef, AppStatus

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    handle     TEXT PRIMARY KEY,
    scheduler  TEXT NOT NULL,
    app_id     TEXT NOT NULL,
    request_id TEXT UNIQUE,
    created    REAL NOT NULL,
    state      INTEGER NOT NULL,
    app        BLOB NOT NULL,   -- AppDef, serialized
    status     BLOB NOT NULL,   -- last AppStatus, serialized
    cfg        TEXT NOT NULL,   -- resolved options, JSON
    native     TEXT NOT NULL    -- what the scheduler needs to find the job again, JSON
);
CREATE INDEX IF NOT EXISTS jobs_by_created ON jobs (created);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state);
"""


@dataclass
class JobRecord:
    handle: str
    scheduler: str
    app_id: str
    created: float
    app: AppDef
    status: AppStatus
    cfg: dict[str, CfgVal]
    native: dict[str, Any]
    request_id: str | None = None


class JobStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def insert(self, rec: JobRecord) -> None:
        self._db.execute(
            "INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                rec.handle,
                rec.scheduler,
                rec.app_id,
                rec.request_id,
                rec.created,
                rec.status.state,
                rec.app.SerializeToString(),
                rec.status.SerializeToString(),
                json.dumps(rec.cfg),
                json.dumps(rec.native),
            ),
        )

    def update_status(self, handle: str, status: AppStatus) -> None:
        self._db.execute(
            "UPDATE jobs SET state = ?, status = ? WHERE handle = ?",
            (status.state, status.SerializeToString(), handle),
        )

    def delete(self, handle: str) -> None:
        self._db.execute("DELETE FROM jobs WHERE handle = ?", (handle,))

    def get(self, handle: str) -> JobRecord | None:
        row = self._db.execute("SELECT * FROM jobs WHERE handle = ?", (handle,)).fetchone()
        return _record(row) if row else None

    def by_request_id(self, request_id: str) -> JobRecord | None:
        row = self._db.execute("SELECT * FROM jobs WHERE request_id = ?", (request_id,)).fetchone()
        return _record(row) if row else None

    def live(self) -> list[JobRecord]:
        marks = ",".join("?" * len(TERMINAL))
        rows = self._db.execute(f"SELECT * FROM jobs WHERE state NOT IN ({marks})", tuple(TERMINAL))
        return [_record(r) for r in rows]

    def statuses(self, scheduler: str = "") -> list[AppStatus]:
        """Last recorded statuses, newest job first."""
        if scheduler:
            rows = self._db.execute(
                "SELECT status FROM jobs WHERE scheduler = ? ORDER BY created DESC", (scheduler,)
            )
        else:
            rows = self._db.execute("SELECT status FROM jobs ORDER BY created DESC")
        return [AppStatus.FromString(r[0]) for r in rows]


def _record(row: tuple[Any, ...]) -> JobRecord:
    handle, scheduler, app_id, request_id, created, _state, app, status, cfg, native = row
    return JobRecord(
        handle=handle,
        scheduler=scheduler,
        app_id=app_id,
        request_id=request_id,
        created=created,
        app=AppDef.FromString(app),
        status=AppStatus.FromString(status),
        cfg=json.loads(cfg),
        native=json.loads(native),
    )
