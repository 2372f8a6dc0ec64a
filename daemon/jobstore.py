"""The job store: every job the daemon submitted, in SQLite (WAL), so status, describe, list
and logs survive a daemon restart and terminal states are remembered.

Calls are synchronous and short (one indexed statement, one commit); WAL with synchronous=NORMAL
keeps a commit off the disk's fsync path while staying safe against a daemon crash. On a network
file system the connection holds SQLite's lock exclusively, so WAL needs no shared memory (see
NETWORK_FS).

A file that exists is checked before anything is written to it (see _check_file): one that is
not a readable regular file, is cut short or has damaged pages is refused with what is wrong
and how to recover, never opened over and never rewritten.

The file is <state dir>/jobs.db. Before it was named registry.db: `in_state_dir` renames such a
file (with its -wal and -shm) on open.

Schema versions: the file's `PRAGMA user_version`. Opening a file of an older version migrates
it in place, in one transaction, through every step of _MIGRATIONS from its version on; a file
of a newer version than this code knows is refused before anything is written to it. Every
statement names its columns, so a step may add one without breaking the others.

One writer: a daemon claims the store (`claim`, an epoch in `meta` one more than before) and
every write transaction checks, under SQLite's write lock, that the epoch is still its own; a
daemon that lost the state dir to another is refused (`Fenced`) whatever it had queued.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txd.schedulers.api import Job
from txd.schedulers.options import CfgVal
from txd.v1 import TERMINAL_STATES
from txd.v1.app_pb2 import AppDef, AppStatus

# The write-ahead log's format (sqlite.org/fileformat.html, "WAL file format").
_WAL_HEADER = struct.Struct(">IIIIIIII")  # magic, version, page size, seq, salts, checksums
_WAL_FRAME = struct.Struct(">IIIIII")  # page, size after commit, salts, checksums
_WAL_MAGIC = (0x377F0682, 0x377F0683)  # checksums of little-, big-endian words

# Version 0: the schema before versions existed (user_version 0). Frozen: a fresh file is
# created as version 0 and then takes the same migration steps as a user's old file.
_V0 = (
    """CREATE TABLE IF NOT EXISTS jobs (
        handle     TEXT PRIMARY KEY,
        scheduler  TEXT NOT NULL,
        app_id     TEXT NOT NULL,
        request_id TEXT UNIQUE,
        created    REAL NOT NULL,   -- time.time() at submission
        state      INTEGER NOT NULL,
        app        BLOB NOT NULL,   -- AppDef, serialized
        status     BLOB NOT NULL,   -- last AppStatus, serialized
        cfg        TEXT NOT NULL,   -- resolved options, JSON
        native     TEXT NOT NULL    -- what the scheduler needs to find the job again, JSON
    )""",
    "CREATE INDEX IF NOT EXISTS jobs_by_created ON jobs (created)",
    "CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state)",
)


def _to_v1(db: sqlite3.Connection) -> None:
    """Pages of the job list, newest first, keyed by (created, handle): each order, with or
    without a scheduler, is one index range. A random key signs page tokens, kept here so
    they outlive a daemon restart and are worthless to any other job store."""
    db.execute("CREATE INDEX jobs_by_created_handle ON jobs (created, handle)")
    db.execute("CREATE INDEX jobs_by_scheduler_created ON jobs (scheduler, created, handle)")
    db.execute("DROP INDEX jobs_by_created")  # a prefix of jobs_by_created_handle
    db.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)")
    db.execute(
        "INSERT INTO meta (name, value) VALUES ('page_token_key', ?)", (secrets.token_bytes(32),)
    )


def _to_v2(db: sqlite3.Connection) -> None:
    """Short ids: a job is found by its app id, or any prefix of it, in one index range."""
    db.execute("CREATE INDEX jobs_by_app_id ON jobs (app_id)")


def _to_v3(db: sqlite3.Connection) -> None:
    """A Run's request id is matched on everything that defines the submission: digests of the
    request's fields besides app and scheduler (JobRecord.submission; NULL for a job recorded
    before, or submitted without a request id)."""
    db.execute("ALTER TABLE jobs ADD COLUMN submission TEXT")


def _to_v4(db: sqlite3.Connection) -> None:
    """Events: every status the store takes, and every deletion, is a row written in the same
    transaction, numbered in commit order (AUTOINCREMENT: a number is never used twice, even
    after the newest rows are deleted). A random store id names this file in cursors, so a
    cursor of another state dir is refused. `events_floor` is the newest number retention
    dropped: a cursor before it asks for events no longer held."""
    db.execute(
        """CREATE TABLE events (
            seq       INTEGER PRIMARY KEY AUTOINCREMENT,
            at        REAL NOT NULL,     -- time.time() at commit
            kind      INTEGER NOT NULL,  -- 1: a status, 2: the job was deleted
            handle    TEXT NOT NULL,
            scheduler TEXT NOT NULL,
            state     INTEGER NOT NULL,
            status    BLOB NOT NULL      -- AppStatus, serialized (the last one for a deletion)
        )"""
    )
    db.execute("CREATE INDEX events_by_handle ON events (handle, seq)")
    db.execute("CREATE INDEX events_by_at ON events (at)")
    db.execute("INSERT INTO meta (name, value) VALUES ('store_id', ?)", (secrets.token_hex(8),))
    db.execute("INSERT INTO meta (name, value) VALUES ('events_floor', 0)")
    db.execute("INSERT INTO meta (name, value) VALUES ('events_floor_at', 0.0)")


def _to_v5(db: sqlite3.Connection) -> None:
    """Each job's native request as its scheduler rendered it at submit time (what DryRun
    shows), kept for as long as the job is known. A table of its own, so that list and status,
    which read `jobs`, never read it (a 10,000-replica request is megabytes of text); stored
    zlib-compressed. A job recorded before has no row. The trigger removes a job's request with
    the job, in the same transaction, whichever statement deletes it."""
    db.execute(
        """CREATE TABLE native_requests (
            handle TEXT PRIMARY KEY,  -- jobs.handle
            size   INTEGER NOT NULL,  -- characters of the text
            body   BLOB NOT NULL      -- the text, UTF-8 (surrogatepass), zlib-compressed
        )"""
    )
    db.execute(
        """CREATE TRIGGER jobs_delete_native_request AFTER DELETE ON jobs BEGIN
            DELETE FROM native_requests WHERE handle = OLD.handle;
        END"""
    )


def _to_v6(db: sqlite3.Connection) -> None:
    """A deleted job's status events stay as rows of kind 3 (REMOVED_EVENT) without their
    status, so a replay tells its reader how many it lost where (until retention drops them);
    before, they were deleted outright. What deletions made before this step removed is not
    known: the events floor moves up to the newest of them, so a cursor before it is refused
    (as one older than the retention) rather than resumed past a silent gap."""
    for name, column in (("events_floor", "seq"), ("events_floor_at", "at")):
        newest = f"(SELECT max({column}) FROM events WHERE kind = 2)"
        db.execute(
            f"UPDATE meta SET value = max(value, coalesce({newest}, value)) WHERE name = ?", (name,)
        )


# _MIGRATIONS[v] takes a file from version v to v + 1. Append a step for a new version; never
# edit one that has shipped.
_MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _to_v1, _to_v2, _to_v3, _to_v4, _to_v5, _to_v6,
]  # fmt: skip
SCHEMA_VERSION = len(_MIGRATIONS)

_COLUMNS = (
    "handle",
    "scheduler",
    "app_id",
    "request_id",
    "created",
    "state",
    "app",
    "status",
    "cfg",
    "native",
    "submission",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM jobs"
_INSERT = (
    f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join(':' + c for c in _COLUMNS)})"
)


class Fenced(sqlite3.OperationalError):
    """A write refused: another daemon took the state dir over (a later claim of the job
    store, see JobStore.claim), so this one may never write to it again. An sqlite3 error, so
    every caller handles it as it handles a store that fails writes."""


class JobStoreError(Exception):
    """The file cannot be used as a job store (written by a newer txd, not a database, damaged
    or unreadable)."""


def _recovery(path: Path) -> str:
    return (
        f"txd will not start over it. Move it away (with any {path.name}-wal and "
        f"{path.name}-shm beside it) to start with an empty job store, or rescue its jobs with "
        f"`sqlite3 {path} .recover | sqlite3 {path}.recovered` and move that file in its place"
    )


FILE_NAME = "jobs.db"
OLD_FILE_NAME = "registry.db"  # its name before
_SIDE_FILES = ("-wal", "-shm")  # SQLite finds them by the main file's name


def adopt_old_name(state_dir: Path) -> None:
    """Renames a state dir's registry.db, with its -wal and -shm, to jobs.db, so a state dir an
    older txd made keeps its jobs. The -wal and -shm go first and the main file last: that
    rename is the one that counts, so a crash on the way leaves a state dir this finishes (the
    -wal found beside the main file whichever name it has). Refuses, touching nothing, when a
    file of each name exists: which one holds the jobs is for the user to say."""
    old, new = state_dir / OLD_FILE_NAME, state_dir / FILE_NAME
    if not os.path.lexists(old):
        return
    moves = [(Path(f"{old}{side}"), Path(f"{new}{side}")) for side in _SIDE_FILES]
    moves = [(src, dst) for src, dst in moves if os.path.lexists(src)] + [(old, new)]
    for src, dst in moves:
        if os.path.lexists(dst):
            raise JobStoreError(
                f"both {src} (named by an older txd) and {dst} exist: txd will not choose "
                "between them. Move away the one whose jobs you do not want (with the -wal "
                "and -shm beside it)"
            )
    for src, dst in moves:
        os.rename(src, dst)
    dir_fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)  # the new names outlive a power loss before SQLite writes again
    finally:
        os.close(dir_fd)


# File systems shared over a network. SQLite's WAL keeps its index in shared memory (the -shm
# file, mmap'ed by every connection), which a network file system does not share between
# hosts, so on these the job store holds SQLite's exclusive lock for the daemon's life
# (locking_mode=EXCLUSIVE, set before the first read): WAL then keeps its index in the
# process's own memory and never makes a -shm file, at WAL's speed. The one connection is the
# one reader and writer. Two daemons writing are prevented by the serving record
# (daemon.serving), not by SQLite's locks, which are node-local on Lustre with localflock.
NETWORK_FS = frozenset(
    (
        *("nfs", "nfs4", "lustre", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "gpfs"),
        *("beegfs", "9p", "afs", "ocfs2", "gfs2", "fuse.sshfs", "fuse.glusterfs"),
        *("fuse.cephfs", "fuse.lizardfs", "fuse.moosefs"),
    )
)
STATE_FS_ENV = "TXD_STATE_FS"  # "network" or "local": overrides what /proc/self/mountinfo says
EXCLUSIVE = "PRAGMA locking_mode=EXCLUSIVE"


def fs_type(path: Path) -> str:
    """The type of the file system holding `path`, from /proc/self/mountinfo ("" if unknown)."""
    real = str(path.resolve())
    best, kind = "", ""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if " - " not in line or len(fields) < 5:
                    continue
                mount = fields[4].replace("\\040", " ")
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, kind = mount, line.split(" - ", 1)[1].split()[0]
    except OSError:
        return ""
    return kind


def on_network_fs(path: Path) -> bool:
    forced = os.environ.get(STATE_FS_ENV, "")
    if forced in ("network", "local"):
        return forced == "network"
    return fs_type(path) in NETWORK_FS


def _wal_checksum(data: bytes, big: bool, s0: int, s1: int) -> tuple[int, int]:
    words = struct.unpack(f"{'>' if big else '<'}{len(data) // 4}I", data)
    for x0, x1 in zip(words[0::2], words[1::2], strict=True):
        s0 = (s0 + x0 + s1) & 0xFFFFFFFF
        s1 = (s1 + x1 + s0) & 0xFFFFFFFF
    return s0, s1


def _check_wal(wal: Path, path: Path) -> None:
    """Refuses a write-ahead log with a damaged frame that later frames of the same generation
    follow: SQLite reads a log up to its first bad frame and silently drops the rest, committed
    jobs included, then checkpoints over them. A bad frame with nothing of its generation after
    it is a write cut short by a crash, which SQLite rightly ignores."""
    try:
        data = wal.read_bytes()
    except FileNotFoundError:
        return
    if len(data) < _WAL_HEADER.size:
        return
    magic, _, page_size, _, salt1, salt2, c0, c1 = _WAL_HEADER.unpack_from(data)
    big = magic == _WAL_MAGIC[1]
    frames = (len(data) - _WAL_HEADER.size) // (_WAL_FRAME.size + page_size or 1)
    if magic not in _WAL_MAGIC or _wal_checksum(data[:24], big, 0, 0) != (c0, c1):
        if frames:
            raise JobStoreError(f"{wal} is damaged (its header); {_recovery(path)}")
        return
    s = (c0, c1)
    bad = None
    for k in range(frames):
        at = _WAL_HEADER.size + k * (_WAL_FRAME.size + page_size)
        _, _, f1, f2, fc0, fc1 = _WAL_FRAME.unpack_from(data, at)
        ours = (f1, f2) == (salt1, salt2)
        if bad is not None:
            if ours:  # committed frames may follow the bad one: SQLite would drop them
                raise JobStoreError(
                    f"{wal} is damaged (frame {bad + 1} of {frames} is corrupt, and later "
                    f"changes follow it that SQLite would drop); {_recovery(path)}"
                )
            continue
        page = data[at + _WAL_FRAME.size : at + _WAL_FRAME.size + page_size]
        if not ours:
            bad = k
            continue
        s = _wal_checksum(data[at : at + 8] + page, big, *s)
        if s != (fc0, fc1):
            bad = k


def _check_file(path: Path) -> None:
    """Refuses an existing job store file that cannot be used as it is, before SQLite writes to it:
    not a regular file, not readable and writable, cut short (not a whole number of pages),
    or with damaged pages (PRAGMA quick_check, about 20 ms for 20,000 jobs) or write-ahead
    log (_check_wal)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return  # a first start: created empty
    except IsADirectoryError:
        raise JobStoreError(
            f"{path} is a directory, not a job store file: txd will not start over it; move "
            "it away to start with an empty job store"
        ) from None
    except OSError as e:
        raise JobStoreError(
            f"cannot open {path} for reading and writing ({e.strerror}): give it back to the "
            f"user txd runs as, or move it away to start with an empty job store"
        ) from None
    try:
        size = os.fstat(fd).st_size
        header = os.pread(fd, 100, 0)
    finally:
        os.close(fd)
    if size == 0:
        return  # created, never written: SQLite makes it a database
    magic = b"SQLite format 3\0"
    if not (header.startswith(magic) or magic.startswith(header)):
        raise JobStoreError(f"{path} is not a txd job store (not an SQLite database)")
    if len(header) < 100:
        raise JobStoreError(
            f"{path} is cut short ({size} bytes, not even a header); {_recovery(path)}"
        )
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if header[92:96] != header[24:28]:  # the header's page count is not known valid
        pages = 0
    if page_size < 512 or size % page_size or size < pages * page_size:
        raise JobStoreError(
            f"{path} is cut short ({size} bytes, of {max(pages * page_size, size)} or more in "
            f"whole {page_size}-byte pages); {_recovery(path)}"
        )
    wal = Path(f"{path}-wal")
    _check_wal(wal, path)
    # Without a -wal the file is all there is: `immutable` reads it as it is, making no -wal or
    # -shm; with one, a read-only connection reads both and writes neither on close.
    query = "mode=ro" if wal.exists() else "immutable=1"
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?{query}", uri=True)) as db:
            if on_network_fs(path.parent):
                db.execute(EXCLUSIVE)  # no -shm made (see NETWORK_FS)
            problems = [row[0] for row in db.execute("PRAGMA quick_check(3)")]
    except sqlite3.DatabaseError as e:
        problems = [str(e)]
    if problems != ["ok"]:
        what = "; ".join(" ".join(p.split()) for p in problems)  # one line
        raise JobStoreError(f"{path} is damaged ({what}); {_recovery(path)}")


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
    # With a request id: digests of the Run request's fields that define the job besides app
    # and scheduler (txd.daemon.submission); None for a job recorded before txd kept them.
    submission: dict[str, str] | None = None

    @property
    def job(self) -> Job:
        """The job as its scheduler is handed it."""
        return Job(self.app_id, self.native)


STATUS_EVENT = 1
DELETED_EVENT = 2
REMOVED_EVENT = 3  # a status event of a job since deleted: its status dropped, its place kept


@dataclass(frozen=True)
class StoredEvent:
    """One committed event: its number (the order of commits), commit time, kind, and the
    job's status then (serialized: sent as it is, parsed only to filter)."""

    seq: int
    at: float
    kind: int
    handle: str
    scheduler: str
    state: int
    status: bytes


_EVENT_COLUMNS = "seq, at, kind, handle, scheduler, state, status"


@dataclass(frozen=True)
class NativeRequest:
    """A native request as the store keeps it: compressed (see _to_v5)."""

    size: int
    body: bytes

    @classmethod
    def of(cls, text: str) -> NativeRequest:
        # Level 1: the fastest; rendered requests repeat themselves and shrink well at any level.
        return cls(len(text), zlib.compress(text.encode("utf-8", "surrogatepass"), 1))

    @property
    def text(self) -> str:
        return zlib.decompress(self.body).decode("utf-8", "surrogatepass")


@dataclass(frozen=True, order=True)
class Cursor:
    """A job's place in the list order, newest first: by `created`, then by `handle`."""

    created: float
    handle: str


class StoreReads:
    """The reads a Status needs (a job by handle, by app id or its prefix), on the instance's
    own connection."""

    _db: sqlite3.Connection

    def get(self, handle: str) -> JobRecord | None:
        row = self._db.execute(f"{_SELECT} WHERE handle = ?", (handle,)).fetchone()
        return _record(row) if row else None

    def by_app_id_prefix(self, prefix: str, limit: int) -> list[tuple[str, str]]:
        """(handle, app_id) of up to `limit` jobs whose app id starts with `prefix`, by app id
        (so an app id equal to `prefix` comes first), then handle. One range of the app id
        index: text compares byte by byte, so the ids with a prefix lie in [prefix, end)."""
        sql, args = _prefix_range(prefix)
        rows = self._db.execute(
            f"SELECT handle, app_id FROM jobs WHERE {sql} ORDER BY app_id, handle LIMIT ?",
            (*args, limit),
        )
        return [(r["handle"], r["app_id"]) for r in rows if r["app_id"].startswith(prefix)]

    def count_app_id_prefix(self, prefix: str) -> int:
        sql, args = _prefix_range(prefix)
        count: int = self._db.execute(f"SELECT count(*) FROM jobs WHERE {sql}", args).fetchone()[0]
        return count


class StoreReader(StoreReads):
    """A connection to the job store, read-only, for the read door's process
    (daemon.readserver): in WAL mode it reads what the daemon committed, while the daemon
    writes. Not on a network file system, where the daemon's connection holds the file's lock
    exclusively (see NETWORK_FS)."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, check_same_thread=False)
        self._db.row_factory = sqlite3.Row

    def close(self) -> None:
        self._db.close()


class JobStore(StoreReads):
    @classmethod
    def in_state_dir(cls, state_dir: Path) -> JobStore:
        """The job store of a state dir, <state_dir>/jobs.db (see adopt_old_name)."""
        adopt_old_name(state_dir)
        return cls(state_dir / FILE_NAME)

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # Called with the events of each commit, after it, in commit order (daemon.events).
        self.on_events: Callable[[list[StoredEvent]], None] | None = None
        self._pending: list[StoredEvent] = []  # events of the transaction under way
        # The fence: the epoch this store claimed (None: never claimed, as by a tool), why
        # it is fenced once it is, told to on_fenced once; gate, the daemon's lease (see
        # _transaction). Transactions come from the event loop and the heartbeat's thread.
        self.epoch: int | None = None
        self.fenced: str | None = None
        self.on_fenced: Callable[[], None] | None = None
        self.gate: Callable[[], bool] | None = None
        self._lock = threading.RLock()  # guarded() holds it around a transaction
        self._closed = False
        _check_file(path)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            if on_network_fs(path.parent):
                self._db.execute(EXCLUSIVE)  # before the first read (see NETWORK_FS)
            self._check_version()  # before the first write: WAL mode writes the header
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
            self._db.row_factory = sqlite3.Row
            row = self._db.execute("SELECT value FROM meta WHERE name = 'page_token_key'")
            self.page_token_key: bytes = row.fetchone()["value"]
            row = self._db.execute("SELECT value FROM meta WHERE name = 'store_id'")
            self.store_id: str = row.fetchone()["value"]
        except BaseException:
            self._db.close()
            raise

    def _version(self) -> int:
        try:
            version: int = self._db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as e:
            raise JobStoreError(f"{self.path} is not a txd job store: {e}") from None
        return version

    def _check_version(self) -> int:
        version = self._version()
        if version > SCHEMA_VERSION:
            raise JobStoreError(
                f"{self.path} has job store schema version {version}, but this txd knows "
                f"versions up to {SCHEMA_VERSION}: a newer txd wrote it. Run that txd, or "
                f"move the file away to start with no jobs."
            )
        return version

    def _migrate(self) -> None:
        if self._version() == SCHEMA_VERSION:
            return
        # One transaction for every step: a crash or a failing step leaves the file as it was.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            version = self._check_version()  # read again under the write lock
            if version == 0:
                for statement in _V0:  # a fresh file; a no-op on an existing version 0 file
                    self._db.execute(statement)
            for step in _MIGRATIONS[version:]:
                step(self._db)
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # SQLite rolls back itself on some errors (a full disk)
                self._db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._closed = True

    # -- the fence (see Fenced) ---------------------------------------------------------------

    def claim(self) -> int:
        """Makes this connection the store's one writer: one more than the epoch recorded (the
        fencing token), committed before this daemon reads a job. Every write transaction
        from now on checks that the epoch is still ours; the daemon of a later claim (one that
        took the state dir over) fences this one out."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                epoch = int(
                    self._db.execute(
                        "INSERT INTO meta (name, value) VALUES ('epoch', 1) ON CONFLICT (name) "
                        "DO UPDATE SET value = value + 1 RETURNING value"
                    ).fetchone()[0]
                )
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        self.epoch = epoch
        return epoch

    def fence(self, why: str) -> None:
        """From now on every write raises Fenced with `why`, touching nothing: another daemon
        took the state dir over, and this one must not write to it again."""
        if self.fenced is None:
            self.fenced = why
            if self.on_fenced is not None:
                self.on_fenced()

    def _check_fence(self) -> None:
        """Raises Fenced unless this store may write: inside the write transaction, so another
        daemon's claim cannot come between the check and the commit."""
        if self.fenced is None and self.epoch is not None:
            row = self._db.execute("SELECT value FROM meta WHERE name = 'epoch'").fetchone()
            now = int(row[0]) if row is not None else 0
            if now != self.epoch:
                self.fence(
                    f"another txd claimed the job store {self.path} (its epoch is {now}, this "
                    f"daemon's {self.epoch}): it took the state dir over"
                )
        if self.fenced is not None:
            raise Fenced(self.fenced)

    def ensure_ours(self) -> None:
        """Raises Fenced unless the store is still this daemon's: before a change outside it
        that a daemon that lost the state dir must not make either (a backend's cancel or
        delete, which also removes a local job's files in the state dir)."""
        with self._transaction():
            pass

    def guarded(self, write: Callable[[], None]) -> bool:
        """Runs `write` (a write to a file of the state dir: the serving record) under the
        store's write lock, if the store is still ours; False (nothing written) if it is not.
        Once the store is closed (the daemon's last moments), as the record alone decides."""
        with self._lock:
            if self.fenced is None and self._closed:
                write()
                return True
            try:
                with self._transaction(gated=False):  # the heartbeat: what renews the lease
                    write()
            except Fenced:
                return False
            return True

    @contextlib.contextmanager
    def _transaction(self, *, gated: bool = True) -> Iterator[None]:
        """One write transaction: every change or, if one fails, none; its events handed to
        on_events once committed (never those of a rolled back one). IMMEDIATE: the write lock
        is taken first, and the fence checked under it (_check_fence). `gate` first: the
        daemon's lease on the state dir (daemon.serving), which a daemon frozen past it
        renews, or finds lost, before it writes anything it had queued."""
        if gated and self.gate is not None and not self.gate():
            self.fence("this daemon lost the state dir to another (see the log)")
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._check_fence()
                yield
                self._db.execute("COMMIT")
            except BaseException:
                self._pending = []
                if self._db.in_transaction:  # SQLite rolls back itself on some errors (a full disk)
                    self._db.execute("ROLLBACK")
                raise
            events, self._pending = self._pending, []
        if events and self.on_events is not None:
            self.on_events(events)

    def _event(self, kind: int, handle: str, scheduler: str, status: AppStatus | bytes) -> None:
        blob = status if isinstance(status, bytes) else status.SerializeToString()
        state = AppStatus.FromString(blob).state if isinstance(status, bytes) else status.state
        at = time.time()
        seq = self._db.execute(
            "INSERT INTO events (at, kind, handle, scheduler, state, status) "
            "VALUES (?, ?, ?, ?, ?, ?) RETURNING seq",
            (at, kind, handle, scheduler, state, blob),
        ).fetchone()[0]
        self._pending.append(StoredEvent(seq, at, kind, handle, scheduler, state, blob))

    def insert(self, rec: JobRecord) -> None:
        self.insert_many([rec])

    def put_native_request(self, handle: str, native_request: NativeRequest) -> None:
        """Keeps a job's native request, while the job is recorded (one deleted meanwhile gets
        none)."""
        with self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO native_requests (handle, size, body) "
                "SELECT handle, ?, ? FROM jobs WHERE handle = ?",
                (native_request.size, native_request.body, handle),
            )

    def native_request(self, handle: str) -> str | None:
        """The native request recorded with a job; None if none was (a job recorded before
        txd kept them, or one whose request could not be rendered)."""
        row = self._db.execute(
            "SELECT size, body FROM native_requests WHERE handle = ?", (handle,)
        ).fetchone()
        return None if row is None else NativeRequest(row["size"], row["body"]).text

    def insert_many(self, recs: Iterable[JobRecord]) -> None:
        """Inserts every record or, if one fails, none: one transaction, one commit."""
        with self._transaction():
            for rec in recs:
                self._db.execute(_INSERT, _row(rec))
                self._event(STATUS_EVENT, rec.handle, rec.scheduler, rec.status)

    def update_status(self, handle: str, status: AppStatus) -> None:
        self.update_statuses([(handle, status)])

    def update_statuses(self, statuses: Sequence[tuple[str, AppStatus]]) -> None:
        """Every (handle, status), in one transaction: one commit; none of them if one fails.
        Each is an event (a job the store does not hold is none)."""
        with self._transaction():
            for handle, st in statuses:
                row = self._db.execute(
                    "UPDATE jobs SET state = ?, status = ? WHERE handle = ? RETURNING scheduler",
                    (st.state, st.SerializeToString(), handle),
                ).fetchone()
                if row is not None:
                    self._event(STATUS_EVENT, handle, row[0], st)

    def update_native(self, handle: str, native: dict[str, Any]) -> None:
        with self._transaction():
            self._db.execute(
                "UPDATE jobs SET native = ? WHERE handle = ?", (json.dumps(native), handle)
            )

    def delete(self, handle: str) -> None:
        self.delete_many([handle])

    def delete_many(self, handles: Iterable[str]) -> None:
        """Deletes every one of these jobs or, if one fails, none: one transaction. A job's
        status events lose their statuses (they become REMOVED_EVENT rows, which a replay
        counts in a GAP) and one event says it was deleted (with its last status), so a
        stream's reader learns both."""
        with self._transaction():
            for handle in handles:
                row = self._db.execute(
                    "DELETE FROM jobs WHERE handle = ? RETURNING scheduler, status", (handle,)
                ).fetchone()
                if row is None:
                    continue
                self._db.execute(
                    "UPDATE events SET kind = ?, status = x'' WHERE handle = ? AND kind = ?",
                    (REMOVED_EVENT, handle, STATUS_EVENT),
                )
                self._event(DELETED_EVENT, handle, row[0], bytes(row[1]))

    # -- events -------------------------------------------------------------------------------

    def last_seq(self) -> int:
        """The number of the newest event committed (0: none yet)."""
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
        found = row.fetchone()
        return int(found[0]) if found else 0

    def events_floor(self) -> tuple[int, float]:
        """The newest event retention dropped (or, in a store older than REMOVED_EVENT, the
        newest deletion then), and its commit time ((0, 0.0): none): events after it are all
        held (those of deleted jobs as REMOVED_EVENT rows)."""
        rows = self._db.execute(
            "SELECT name, value FROM meta WHERE name IN ('events_floor', 'events_floor_at')"
        )
        got = {r[0]: r[1] for r in rows}
        return int(got["events_floor"]), float(got["events_floor_at"])

    def events_after(
        self,
        seq: int,
        limit: int,
        *,
        scheduler: str = "",
        states: Collection[int] = (),
        handles: Collection[str] = (),
    ) -> list[StoredEvent]:
        """Up to `limit` events after number `seq`, in commit order, matching the filters
        (REMOVED_EVENT rows among them: the events of jobs since deleted)."""
        where, args = _filters(scheduler, states, handles)
        where.insert(0, "seq > ?")
        args.insert(0, seq)
        rows = self._db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?",
            (*args, limit),
        )
        return [StoredEvent(*r) for r in rows]

    def statuses(
        self, *, scheduler: str = "", states: Collection[int] = (), handles: Collection[str] = ()
    ) -> list[StoredEvent]:
        """Every matching job's current status, oldest job first, as events numbered 0 with
        no time (a snapshot's)."""
        where, args = _filters(scheduler, states, handles)
        rows = self._db.execute(
            f"SELECT handle, scheduler, state, status FROM jobs WHERE {' AND '.join(where) or 1} "
            "ORDER BY created, handle",
            args,
        )
        return [StoredEvent(0, 0.0, STATUS_EVENT, r[0], r[1], r[2], r[3]) for r in rows]

    def first_seq_at(self, at: float) -> int:
        """The number before the first event committed at or after `at` (a cursor from which
        a replay starts at that time)."""
        row = self._db.execute("SELECT min(seq) FROM events WHERE at >= ?", (at,)).fetchone()
        return (row[0] - 1) if row[0] is not None else self.last_seq()

    def drop_events_before(self, at: float, limit: int = 10_000) -> int:
        """Drops up to `limit` of the oldest events committed before `at` (retention), moving
        the floor to the newest dropped; returns how many."""
        with self._transaction():
            row = self._db.execute(
                "SELECT max(seq), max(at), count(*) FROM (SELECT seq, at FROM events "
                "WHERE at < ? ORDER BY seq LIMIT ?)",
                (at, limit),
            ).fetchone()
            if not row[2]:
                return 0
            self._db.execute("DELETE FROM events WHERE seq <= ? AND at < ?", (row[0], at))
            self._db.execute(
                "UPDATE meta SET value = max(value, ?) WHERE name = 'events_floor'", (row[0],)
            )
            self._db.execute(
                "UPDATE meta SET value = max(value, ?) WHERE name = 'events_floor_at'", (row[1],)
            )
        return int(row[2])

    def finished_before(
        self, created_before_ns: int, limit: int, *, scheduler: str = ""
    ) -> list[JobRecord]:
        """Up to `limit` terminal jobs created before `created_before_ns` (nanoseconds since
        the epoch, compared with the `created` time statuses report), oldest first."""
        marks = ",".join("?" * len(TERMINAL_STATES))
        where = f"state IN ({marks}) AND created < ? AND CAST(created * 1e9 AS INTEGER) < ?" + (
            " AND scheduler = ?" if scheduler else ""
        )
        created_before_ns = _int64(created_before_ns)
        args = (*TERMINAL_STATES, created_before_ns / 1e9 + 1e-3, created_before_ns)
        rows = self._db.execute(
            f"{_SELECT} WHERE {where} ORDER BY created, handle LIMIT ?",
            (*args, *([scheduler] if scheduler else []), limit),
        )
        return [_record(r) for r in rows]

    def by_request_id(self, request_id: str) -> JobRecord | None:
        row = self._db.execute(f"{_SELECT} WHERE request_id = ?", (request_id,)).fetchone()
        return _record(row) if row else None

    def counts(self) -> list[tuple[str, int, int]]:
        """(scheduler, state, jobs) for every scheduler and state the store holds jobs of."""
        rows = self._db.execute(
            "SELECT scheduler, state, COUNT(*) FROM jobs GROUP BY scheduler, state"
        ).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def live(self) -> list[JobRecord]:
        marks = ",".join("?" * len(TERMINAL_STATES))
        rows = self._db.execute(f"{_SELECT} WHERE state NOT IN ({marks})", tuple(TERMINAL_STATES))
        return [_record(r) for r in rows]

    def page(
        self,
        limit: int,
        *,
        after: Cursor | None = None,
        scheduler: str = "",
        states: Collection[int] = (),
        created_since_ns: int | None = None,
    ) -> list[tuple[Cursor, AppStatus]]:
        """Up to `limit` last recorded statuses, newest first, each with its place; only those
        after `after` in that order, of `scheduler` (empty: any), in `states` (empty: any) and
        created at or after `created_since_ns` (nanoseconds since the epoch, compared with the
        `created` time the statuses report)."""
        where: list[str] = []
        args: list[object] = []
        if scheduler:
            where.append("scheduler = ?")
            args.append(scheduler)
        if after is not None:
            # Keyset, not OFFSET: a page starts where the last ended, whatever was inserted
            # or deleted before that place since, and costs one index range however deep.
            where.append("(created, handle) < (?, ?)")
            args += [after.created, after.handle]
        if states:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args += list(states)
        if created_since_ns is not None:
            # Statuses report created as int(created * 1e9) ns: the same rounding here keeps
            # a job whose reported time is the bound. The looser first test uses the index.
            where.append("created >= ? AND CAST(created * 1e9 AS INTEGER) >= ?")
            created_since_ns = _int64(created_since_ns)
            args += [created_since_ns / 1e9 - 1e-3, created_since_ns]
        rows = self._db.execute(
            f"SELECT created, handle, status FROM jobs WHERE {' AND '.join(where) or 1} "
            "ORDER BY created DESC, handle DESC LIMIT ?",
            (*args, limit),
        )
        return [
            (Cursor(r["created"], r["handle"]), AppStatus.FromString(r["status"])) for r in rows
        ]


def _prefix_range(prefix: str) -> tuple[str, tuple[str, ...]]:
    """A WHERE clause on app_id, and its arguments, for the ids that start with `prefix`: from
    prefix to the smallest string greater than every such id (its last character plus one;
    none when every character is the largest code point)."""
    head = prefix.rstrip(chr(sys.maxunicode))
    if not head:
        return "app_id >= ?", (prefix,)
    nxt = ord(head[-1]) + 1
    if 0xD800 <= nxt <= 0xDFFF:  # surrogates are no characters: skip them
        nxt = 0xE000
    return "app_id >= ? AND app_id < ?", (prefix, head[:-1] + chr(nxt))


def _row(rec: JobRecord) -> dict[str, Any]:
    return {
        "handle": rec.handle,
        "scheduler": rec.scheduler,
        "app_id": rec.app_id,
        "request_id": rec.request_id,
        "created": rec.created,
        "state": rec.status.state,
        "app": rec.app.SerializeToString(),
        "status": rec.status.SerializeToString(),
        "cfg": json.dumps(rec.cfg),
        "native": json.dumps(rec.native),
        "submission": None if rec.submission is None else json.dumps(rec.submission),
    }


def _record(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        handle=row["handle"],
        scheduler=row["scheduler"],
        app_id=row["app_id"],
        request_id=row["request_id"],
        created=row["created"],
        app=AppDef.FromString(row["app"]),
        status=AppStatus.FromString(row["status"]),
        cfg=json.loads(row["cfg"]),
        native=json.loads(row["native"]),
        submission=json.loads(row["submission"]) if row["submission"] else None,
    )


def _int64(ns: int) -> int:
    """A time bound SQLite can take: its integers are 64-bit, which in nanoseconds ends in
    2262 (the API allows years 1 to 9999; a bound past the ends is the same as the end)."""
    return max(-(2**63), min(ns, 2**63 - 1))


def _filters(
    scheduler: str, states: Collection[int], handles: Collection[str]
) -> tuple[list[str], list[object]]:
    """SQL conditions and their arguments for the events' and snapshots' filters (both tables
    have scheduler, state and handle columns)."""
    where: list[str] = []
    args: list[object] = []
    if scheduler:
        where.append("scheduler = ?")
        args.append(scheduler)
    if states:
        where.append(f"state IN ({','.join('?' * len(states))})")
        args += list(states)
    if handles:
        where.append(f"handle IN ({','.join('?' * len(handles))})")
        args += list(handles)
    return where, args
