"""The job store's file: a file written before schema versions opens, migrated in place; a file
from a newer txd is refused untouched; a migration is all or nothing; a state dir whose file has
its old name (registry.db) opens renamed to jobs.db."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from txd.client import AlreadyExistsError
from txd.daemon import jobstore
from txd.daemon.jobstore import JobRecord, JobStore, JobStoreError
from txd.v1 import TERMINAL_STATES, AppState
from txd.v1.app_pb2 import AppStatus

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _load_fixture_module() -> Any:
    name = "registry_v0_fixture"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, FIXTURES / "registry_v0.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


V0 = _load_fixture_module()


def _user_version(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        version: int = db.execute("PRAGMA user_version").fetchone()[0]
    return version


def _objects(path: Path) -> set[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        return set(rows)


def _v0_copy(tmp_path: Path) -> Path:
    path = tmp_path / "registry.db"
    shutil.copy(V0.DB, path)
    return path


def test_fixture_is_a_version_0_file() -> None:
    """Guards the fixture itself: it must stay what the code before versions wrote."""
    assert _user_version(V0.DB) == 0
    assert _objects(V0.DB) == {
        ("table", "jobs"),
        ("index", "jobs_by_created"),
        ("index", "jobs_by_state"),
    }


def test_version_0_file_migrates_and_every_record_reads_back(tmp_path: Path) -> None:
    path = _v0_copy(tmp_path)
    store = JobStore(path)
    try:
        for fields in V0.RECORDS:
            assert store.get(fields["handle"]) == JobRecord(**fields), fields["handle"]
        for fields in V0.RECORDS:
            if fields["request_id"]:
                assert store.by_request_id(fields["request_id"]) == JobRecord(**fields)
        live = {f["handle"] for f in V0.RECORDS if f["status"].state not in TERMINAL_STATES}
        assert len(live) == 2
        assert {r.handle for r in store.live()} == live
        key = store.page_token_key
        assert len(key) == 32
    finally:
        store.close()
    assert _user_version(path) == jobstore.SCHEMA_VERSION == 6
    assert ("index", "jobs_by_created_handle") in _objects(path)
    assert ("index", "jobs_by_created") not in _objects(path)
    # Opening a current file again changes nothing, the token key included.
    again = JobStore(path)
    try:
        assert again.page_token_key == key
        assert [again.get(f["handle"]) for f in V0.RECORDS] == [JobRecord(**f) for f in V0.RECORDS]
    finally:
        again.close()


def test_page_orders_newest_first_and_breaks_ties_by_handle(tmp_path: Path) -> None:
    store = JobStore(_v0_copy(tmp_path))
    try:
        expected = sorted(V0.RECORDS, key=lambda f: (f["created"], f["handle"]), reverse=True)
        rows = store.page(100)
        assert [c.handle for c, _ in rows] == [f["handle"] for f in expected]
        assert [s for _, s in rows] == [f["status"] for f in expected]
        # Two jobs share a creation time: a page that ends between them loses neither.
        tied = [f["handle"] for f in expected if f["created"] == 1767225700.0]
        assert len(tied) == 2
        first = store.page(2)
        assert [c.handle for c, _ in first] == [expected[0]["handle"], tied[0]]
        rest = store.page(100, after=first[-1][0])
        assert [c.handle for c, _ in rest] == [f["handle"] for f in expected[2:]]
        assert rest[0][0].handle == tied[1]
    finally:
        store.close()


def test_page_created_since_keeps_the_job_whose_reported_time_is_the_bound(
    tmp_path: Path,
) -> None:
    """Statuses report created to the nanosecond from a float of seconds; the bound is
    compared the same way, so no float rounding drops the job at the bound."""
    store = JobStore(_v0_copy(tmp_path))
    try:
        for fields in V0.RECORDS:
            bound = fields["status"].created.ToNanoseconds()
            got = {c.handle for c, _ in store.page(100, created_since_ns=bound)}
            want = {f["handle"] for f in V0.RECORDS if f["created"] >= fields["created"]}
            assert got == want, fields["handle"]
            assert {c.handle for c, _ in store.page(100, created_since_ns=bound + 1)} == {
                f["handle"] for f in V0.RECORDS if f["created"] > fields["created"]
            }
    finally:
        store.close()


def test_app_id_prefix_is_one_index_range(tmp_path: Path) -> None:
    """Short ids: ids with the prefix, exact match first, found through the app id index
    (which a version 0 file gets by migration)."""
    store = JobStore(_v0_copy(tmp_path))
    try:
        ids = sorted(f["app_id"] for f in V0.RECORDS)
        for app_id in ids:
            for n in range(1, len(app_id) + 1):
                want = [i for i in ids if i.startswith(app_id[:n])]
                got = store.by_app_id_prefix(app_id[:n], 100)
                assert [i for _, i in got] == want
                assert store.count_app_id_prefix(app_id[:n]) == len(want)
        assert store.by_app_id_prefix(ids[0], 1) == [
            (f["handle"], f["app_id"]) for f in V0.RECORDS if f["app_id"] == ids[0]
        ]
        assert store.by_app_id_prefix("\U0010ffff", 10) == []
        with contextlib.closing(sqlite3.connect(store.path)) as db:
            plan = " ".join(
                str(row[-1])
                for row in db.execute(
                    "EXPLAIN QUERY PLAN SELECT handle FROM jobs WHERE app_id >= ? AND app_id < ?",
                    ("a", "b"),
                )
            )
        assert "USING INDEX jobs_by_app_id (app_id>? AND app_id<?)" in plan
    finally:
        store.close()


def test_fresh_file_is_created_at_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "registry.db"
    store = JobStore(path)
    try:
        fields = V0.RECORDS[0]
        store.insert(JobRecord(**fields))
        assert store.get(fields["handle"]) == JobRecord(**fields)
    finally:
        store.close()
    assert _user_version(path) == jobstore.SCHEMA_VERSION
    assert _objects(path) >= {("table", "jobs"), ("table", "meta"), ("index", "jobs_by_state")}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_newer_version_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    JobStore(path).close()
    newer = jobstore.SCHEMA_VERSION + 1
    with contextlib.closing(sqlite3.connect(path)) as db:
        # Rollback-journal mode: a store that switched it to WAL before refusing would have
        # written the header.
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute(f"PRAGMA user_version = {newer}")
    before = _digest(path)
    with pytest.raises(JobStoreError) as info:
        JobStore(path)
    message = str(info.value)
    assert str(path) in message
    assert f"version {newer}" in message
    assert f"up to {jobstore.SCHEMA_VERSION}" in message
    assert _digest(path) == before
    assert _user_version(path) == newer


def test_a_failing_migration_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every step runs in one transaction: a step that fails after others did undoes them."""
    path = _v0_copy(tmp_path)
    objects = _objects(path)

    def broken_step(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("step 2 failed")

    steps = [*jobstore._MIGRATIONS, broken_step]
    monkeypatch.setattr(jobstore, "_MIGRATIONS", steps)
    monkeypatch.setattr(jobstore, "SCHEMA_VERSION", len(steps))
    with pytest.raises(RuntimeError, match="step 2 failed"):
        JobStore(path)
    assert _user_version(path) == 0
    assert _objects(path) == objects
    monkeypatch.undo()
    store = JobStore(path)  # and the real migration still works on it
    try:
        assert len(store.page(100)) == len(V0.RECORDS)
    finally:
        store.close()


def test_not_a_database_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    path.write_bytes(b"this is not an SQLite file, not at all" * 100)
    with pytest.raises(JobStoreError, match=f"{path} is not a txd job store"):
        JobStore(path)


# -- a real daemon ------------------------------------------------------------------------------


async def test_daemon_lists_and_serves_the_jobs_of_a_version_0_file(
    unstarted_daemon: Any,
) -> None:
    d = unstarted_daemon
    d.state_dir.mkdir(mode=0o700)
    shutil.copy(V0.DB, d.state_dir / "registry.db")
    d.start()

    listed = json.loads(d.txctl("list", "--json", check=0).stdout)
    expected = sorted(V0.RECORDS, key=lambda f: (f["created"], f["handle"]), reverse=True)
    assert [a["app_handle"] for a in listed] == [f["handle"] for f in expected]
    by_handle = {a["app_handle"]: a for a in listed}
    for fields in V0.RECORDS:
        got = by_handle[fields["handle"]]
        assert got["name"] == fields["app"].name
        assert got["scheduler"] == fields["scheduler"]
        if fields["status"].state in TERMINAL_STATES:
            assert got["state"] == AppState.Name(fields["status"].state)
            assert got["msg"] == fields["status"].msg
        else:  # live when the old daemon stopped; its replicas are not running now
            assert got["state"] == "FAILED"
            assert "stopped unexpectedly" in got["msg"]
    slurm = json.loads(d.txctl("list", "--json", "-s", "slurm", check=0).stdout)
    assert [a["app_handle"] for a in slurm] == ["slurm://txd/train-1234"]
    desc = json.loads(d.txctl("describe", "--json", "local_cwd://txd/fail-f4g5h6", check=0).stdout)
    assert desc["app"]["roles"][0]["args"] == ["-c", "echo fail"]
    assert desc["cfg"]["log_dir"] == {"str": "/tmp/logs"}
    # The old request ids are still honoured: the same request again runs nothing new.
    first = V0.RECORDS[0]
    async with d.client() as c:
        again = await c.run(first["app"], first["scheduler"], request_id=first["request_id"])
        assert again == first["handle"]
        # Its record keeps no digest of cwd and env: those cannot be compared. Its resolved
        # options can: one the request names must have the recorded value.
        rid, app = first["request_id"], first["app"]
        assert await c.run(app, "local_cwd", {"prepend_cwd": False}, request_id=rid) == again
        assert await c.run(app, "local_cwd", request_id=rid, cwd="/", env={"X": "1"}) == again
        with pytest.raises(AlreadyExistsError, match=r"another scheduler options \(cfg\);"):
            await c.run(app, "local_cwd", {"prepend_cwd": True}, request_id=rid)
    d.stop()
    # The file has its new name, migrated in place; the old name is gone.
    assert _user_version(d.state_dir / "jobs.db") == jobstore.SCHEMA_VERSION
    assert not (d.state_dir / "registry.db").exists()


def test_daemon_refuses_a_newer_file_with_a_clear_error(unstarted_daemon: Any) -> None:
    d = unstarted_daemon
    d.state_dir.mkdir(mode=0o700)
    path = d.state_dir / "jobs.db"
    JobStore(path).close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(RuntimeError, match="did not become ready") as info:
        d.start()
    assert f"txd: {path} has job store schema version 99" in str(info.value)
    assert "Traceback" not in d.log()
    assert _user_version(path) == 99


# -- registry.db, the file's old name -----------------------------------------------------------

CRASHED_JOBS = 50


def _crash_image(directory: Path, name: str) -> None:
    """`name` with its -wal and -shm, every job in the -wal: what a killed daemon leaves (the
    files copied while the store is open, between two writes)."""
    live = directory / "live"
    store = JobStore(live / "jobs.db")
    try:
        store._db.execute("PRAGMA wal_autocheckpoint=0")  # every job stays in the -wal
        store.insert_many(
            JobRecord(**{**V0.RECORDS[0], "handle": f"local_cwd://txd/w-{i}", "app_id": f"w-{i}",
                         "request_id": None})
            for i in range(CRASHED_JOBS)
        )  # fmt: skip
        for side in ("", "-wal", "-shm"):
            shutil.copy(live / f"jobs.db{side}", directory / f"{name}{side}")
    finally:
        store.close()
    shutil.rmtree(live)
    assert (directory / f"{name}-wal").stat().st_size > CRASHED_JOBS * 1024


def _files(directory: Path) -> dict[str, str]:
    return {p.name: _digest(p) for p in sorted(directory.iterdir())}


def _count(store: JobStore) -> int:
    try:
        return len(store.page(10 * CRASHED_JOBS))
    finally:
        store.close()


def test_old_name_is_renamed_with_its_wal_and_every_job_opens(tmp_path: Path) -> None:
    _crash_image(tmp_path, "registry.db")
    before = _files(tmp_path)
    assert _count(JobStore.in_state_dir(tmp_path)) == CRASHED_JOBS
    after = _files(tmp_path)
    assert "registry.db" not in after and "registry.db-wal" not in after
    assert before["registry.db-wal"] != after.get("jobs.db-wal")  # SQLite went on with it


def test_rename_cut_short_by_a_crash_is_finished(tmp_path: Path) -> None:
    """A daemon killed after moving the -wal and -shm, before the main file: the -wal is found
    under its new name once the main file follows."""
    _crash_image(tmp_path, "registry.db")
    for side in ("-wal", "-shm"):
        os.rename(tmp_path / f"registry.db{side}", tmp_path / f"jobs.db{side}")
    assert _count(JobStore.in_state_dir(tmp_path)) == CRASHED_JOBS
    assert not (tmp_path / "registry.db").exists()


@pytest.mark.parametrize("clash", ["jobs.db", "jobs.db-wal"])
def test_both_names_are_refused_untouched(tmp_path: Path, clash: str) -> None:
    """A jobs.db (or its -wal) beside a registry.db: which one holds the jobs is the user's
    call. The error names both files; not a byte or a name changes."""
    _crash_image(tmp_path, "registry.db")
    (tmp_path / clash).write_bytes(b"")
    before = _files(tmp_path)
    with pytest.raises(JobStoreError) as info:
        JobStore.in_state_dir(tmp_path)
    old = tmp_path / ("registry.db" if clash == "jobs.db" else "registry.db-wal")
    assert str(info.value).startswith(
        f"both {old} (named by an older txd) and {tmp_path / clash} exist: txd will not choose"
    )
    assert _files(tmp_path) == before


def test_daemon_refuses_a_state_dir_with_both_names(unstarted_daemon: Any) -> None:
    d = unstarted_daemon
    d.state_dir.mkdir(mode=0o700)
    shutil.copy(V0.DB, d.state_dir / "registry.db")
    JobStore(d.state_dir / "jobs.db").close()
    before = _files(d.state_dir)
    with pytest.raises(RuntimeError, match="did not become ready") as info:
        d.start()
    assert (
        f"txd: both {d.state_dir / 'registry.db'} (named by an older txd) and "
        f"{d.state_dir / 'jobs.db'} exist" in str(info.value)
    )
    after = _files(d.state_dir)
    assert after.pop("txd.lock")  # the state dir's lock, taken first; nothing else changes
    assert after.pop("txd.serving")  # the serving record, written before the job store opens
    assert after == before


def test_a_later_claim_fences_every_write_of_the_earlier_one(tmp_path: Path) -> None:
    """Two daemons' connections to one job store (a daemon frozen past a takeover, and the one
    that took over): once the second claims the store, the first writes nothing, whichever
    write it tries, and every write of the second lands."""
    old = JobStore(_v0_copy(tmp_path))
    new = JobStore(tmp_path / "registry.db")
    told: list[str] = []
    old.on_fenced = lambda: told.append(old.fenced or "")
    try:
        assert old.claim() == 1
        handle = V0.RECORDS[0]["handle"]
        done = AppState.SUCCEEDED
        old.update_status(handle, V0.RECORDS[0]["status"])  # ours still: it lands
        assert new.claim() == 2
        before = new.get(handle)
        writes = {
            "update_status": lambda: old.update_status(handle, AppStatus(state=done)),
            "update_native": lambda: old.update_native(handle, {"taken": True}),
            "put_native_request": lambda: old.put_native_request(
                handle, jobstore.NativeRequest.of("x")
            ),
            "delete": lambda: old.delete(handle),
            "drop_events_before": lambda: old.drop_events_before(2e9),
            "ensure_ours": old.ensure_ours,  # before a backend's cancel or delete
        }
        for name, write in writes.items():
            with pytest.raises(jobstore.Fenced, match="its epoch is 2, this daemon's 1"):
                write()
            assert new.get(handle) == before, name
        assert len(told) == 1  # told once
        assert not old.guarded(lambda: told.append("written"))
        assert len(told) == 1
        new.update_status(handle, AppStatus(state=done))
        got = new.get(handle)
        assert got is not None and got.status.state == done
    finally:
        old.close()
        new.close()
