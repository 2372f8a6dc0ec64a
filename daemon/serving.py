"""One daemon per state dir across hosts: the serving record, its heartbeat, and takeover.

A state dir in a home directory shared by several login nodes is one job store for all of
them, and exactly one daemon may write it. The flock on <state dir>/txd.lock settles that on
one host, and across hosts where the file system's locks are global (NFS); on Lustre mounted
with `localflock` it is node-local, so another host's lock is invisible. Hence the record,
<state dir>/txd.serving (JSON): which host serves the state dir (its hostname, and the name to
reach it by ssh), on which socket, pid, version, start time, and a heartbeat rewritten every
`period` seconds. Rules:

- A record of another host whose heartbeat is younger than STALE_PERIODS of its periods means
  busy, whatever the flock says: this daemon refuses, naming that host.
- A stale record of another host is taken over: one claim file per record (created with
  O_EXCL, so of several hosts racing one wins), then the record is watched for the staleness
  limit by this host's own clock (a clock skew between hosts cannot fake a dead daemon), and
  only if it did not change is it replaced by ours.
- The record of this host is for the flock to decide (a crash releases it at once).
- Writing over no record, a stopped one or this host's takes the same claim first: hosts
  starting at once do not see each other's flock on node-local locks, and one must win.
- The daemon re-reads the record before each heartbeat; finding another daemon's record
  there (this one stalled past the limit and was taken over), it stops (see `lost`).
- Each record's epoch is one more than that of the record it replaced. A stalled daemon may
  read its own record, stall past a takeover, and then write its beat over the new record: the
  new daemon, finding a record of a lower epoch than its own, writes its own again instead of
  stopping, and the stalled one stops at its next beat.

Every write is a write to a file of our own and a rename over the record, so a reader sees the
old record or the new one, never half of one.

The fence (`fence_store`): the job store's epoch, claimed by each daemon once it opens the store,
is checked in every write transaction; the record is written under the same lock and check; the
store's transactions and the log files also wait on a lease, which a beat renews, so a daemon
frozen past a takeover checks before the first write it had queued (docs/cluster.md, fencing).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from txd.daemon.atomicfile import write_atomic
from txd.daemon.jobstore import JobStore
from txd.schedulers import logfiles

log = logging.getLogger(__name__)

RECORD = "txd.serving"
LOCK = "txd.lock"
CLAIM_PREFIX = "txd.takeover."
PERIOD = 5.0  # seconds between heartbeats
STALE_PERIODS = 3  # a heartbeat older than this many of its writer's periods is stale
# A beat that found the state dir ours lets the daemon write without checking again for this
# many periods: a takeover takes at least STALE_PERIODS of watching after the last beat.
LEASE_PERIODS = 2
SSH_NAME_ENV = "TXD_SSH_NAME"
_CLAIM_DEPTH = 3  # claims of claims left by claimants that died half-way
START_WAIT = 5.0  # seconds a host that lost a start race waits for the winner's record


class Busy(Exception):
    """Another daemon serves this state dir (or is about to). `host`: the other host, or ""
    for one of this host."""

    def __init__(self, message: str, *, host: str = "", socket_path: str = "") -> None:
        super().__init__(message)
        self.host = host
        self.socket_path = socket_path


def this_host() -> str:
    return socket.gethostname()


@dataclasses.dataclass(frozen=True)
class Record:
    host: str
    ssh: str  # the name to reach the host by with ssh
    socket: str
    pid: int
    version: str
    started: float  # time.time() on the writer's clock
    heartbeat: float
    period: float
    state: str  # "serving", or "stopped" once the daemon exited cleanly
    id: str  # one per daemon start: tells a taken-over record from our own
    python: str = ""  # the daemon's interpreter: another host's txctl runs its txctl by ssh
    # One more than the record it replaced: the fence. A stalled daemon's beat that lands
    # after a takeover's record (it read its own record, then stalled) carries a lower epoch
    # than the record it overwrote, and the daemon that wrote that one writes it again.
    epoch: int = 0

    @property
    def stale_after(self) -> float:
        return STALE_PERIODS * self.period

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.heartbeat

    def fresh(self, now: float | None = None) -> bool:
        return self.state == "serving" and self.age(now) <= self.stale_after

    def describe(self) -> str:
        return (
            f"host {self.host}{f' (ssh {self.ssh})' if self.ssh != self.host else ''}, socket "
            f"{self.socket}, pid {self.pid}, last heartbeat {max(self.age(), 0):.0f}s ago"
        )


def read_record(state_dir: Path) -> Record | None:
    """The state dir's record; None when there is none, or it cannot be read as one (a
    damaged record names nobody: the flock still guards this host)."""
    try:
        data = json.loads((state_dir / RECORD).read_bytes())
        kinds = {"pid": int, "started": float, "heartbeat": float, "period": float, "epoch": int}
        data.setdefault("python", "")  # records written before these fields existed
        data.setdefault("epoch", 0)
        fields = dataclasses.fields(Record)
        return Record(**{f.name: kinds.get(f.name, str)(data[f.name]) for f in fields})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError

    from txd.install import version

    try:
        return version()
    except PackageNotFoundError:
        return "?"


class Serving:
    """This daemon's hold on a state dir: the flock and the record (see the module's doc).
    `previous` is the record found at start (None if there was none): the host whose jobs
    this daemon inherits. `lost` is set once another daemon's record replaced ours."""

    def __init__(self, state_dir: Path, lock_fd: int, record: Record, previous: Record | None):
        self.state_dir = state_dir
        self.lock_fd = lock_fd
        self.record = record
        self.previous = previous
        self.lost = asyncio.Event()
        self.on_lost: Callable[[], None] | None = None
        self.taken_by: Record | None = None
        self._write_failed = False
        # A beat runs in a worker thread, which a cancelled heartbeat task does not stop:
        # close() waits for it, and no beat writes after close() (a "serving" record over the
        # "stopped" one would keep other hosts waiting for the staleness limit).
        self._writing = threading.Lock()
        self._closed = False
        # A thread of the heartbeat's own, not driven by the event loop: on the loop's shared
        # pool a queue of other blocking work (module imports, a slow file system under job
        # folders), or the loop itself held (the job store's opening checks every page of it),
        # would delay beats until another host took a live daemon's state dir over.
        self._stop_beating = threading.Event()
        # The fence (see fence_store): the job store's guard for the record's writes once it
        # is claimed; when a beat last found the state dir ours (the lease); whether it is
        # lost, as any thread sees it (`lost` is the event loop's).
        self._guard: Callable[[Callable[[], None]], bool] | None = None
        self._confirmed = time.monotonic()
        self._gone = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def took_over_from(self) -> str | None:
        """The other host whose daemon served the state dir before this one and died there
        (a clean exit, which ends its local jobs, does not count), if any."""
        prev = self.previous
        if prev is None or prev.host == self.record.host or prev.state != "serving":
            return None
        return prev.host

    @property
    def gone(self) -> bool:
        """The state dir is lost to another daemon (as any thread sees it)."""
        return self._gone

    def fence_store(self, store: JobStore) -> None:
        """Claims the job store (its epoch, the fencing token: JobStore.claim) and fences
        every write of this daemon to the state dir from now on: the store's transactions and
        the log files by the lease (`current`), the record by the store's write lock and
        epoch (each beat writes it under them)."""
        store.claim()
        store.gate = self.current
        store.on_fenced = self._fenced
        self._guard = store.guarded
        logfiles.FENCE.allows = self.current

    def current(self) -> bool:
        """Whether this daemon may write to the state dir now: it holds it, as a beat found
        less than LEASE_PERIODS periods ago (a takeover takes twice that at least: the record
        goes stale, then the taker watches it), or else as a beat now finds. So a daemon
        frozen past a takeover checks before the first write it had queued."""
        if self._gone:
            return False
        if time.monotonic() - self._confirmed < LEASE_PERIODS * self.record.period:
            return True
        return self.beat()

    def beat(self) -> bool:
        """One heartbeat (run in a worker thread: the file system may be slow); False when
        the record is no longer ours. Once the job store is claimed, the beat (reading the
        record, writing ours) is made under the store's write lock, if its epoch is ours."""
        with self._writing:
            if self._closed:
                return True
            if self._gone:
                return False
            ours = False

            def check_and_write() -> None:
                nonlocal ours
                ours = self._beat()

            if self._guard is None:
                check_and_write()
            elif not self._guard(check_and_write):
                self._fenced()
            if not ours:
                self._gone = True
                if self._loop is not None:
                    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                        self._loop.call_soon_threadsafe(self._lose)
            elif not self._write_failed:  # a record that did not reach the file renews nothing
                self._confirmed = time.monotonic()
            return ours

    def _fenced(self) -> None:
        """The job store refused a write: another daemon claimed it."""
        if not self._gone:
            self._gone = True
            current = read_record(self.state_dir)
            self.taken_by = (
                current if current is not None and current.id != self.record.id else None
            )
            log.error(
                "another txd took this state dir over (%s): this daemon stops without writing "
                "to it again",
                "its job store's epoch is no longer ours"
                if self.taken_by is None
                else self.taken_by.describe(),
            )
            if self._loop is not None:
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._lose)

    def _beat(self) -> bool:
        current = read_record(self.state_dir)
        late = False  # a late write of the daemon this one replaced is there
        if current is not None and current.id != self.record.id:
            if current.epoch >= self.record.epoch:
                self.taken_by = current
                log.error(
                    "another txd took this state dir over (%s): this daemon stops without "
                    "writing to it again",
                    current.describe(),
                )
                return False
            # The daemon this one replaced, stalled across the takeover, wrote its record back
            # (it read its own before it stalled): ours goes back (synced, as at the start),
            # and that daemon stops at its next beat, finding a record of a higher epoch.
            log.warning(
                "a late write of the txd this one took the state dir over from (%s) replaced "
                "the serving record: writing ours again",
                current.describe(),
            )
            late = True
        self.record = dataclasses.replace(self.record, heartbeat=time.time())
        self._write(sync=late)
        return True

    def start_beating(self, loop: asyncio.AbstractEventLoop) -> None:
        """Beats every period from now on (before the job store opens), on a thread of its
        own, until close() or abandon(); once the record is lost, sets `lost` and calls
        on_lost in `loop`."""
        self._loop = loop

        def beating() -> None:
            while not self._stop_beating.wait(self.record.period):
                if not self.beat():
                    return

        threading.Thread(target=beating, name="txd-heartbeat", daemon=True).start()

    def _lose(self) -> None:
        if self.lost.is_set():
            return
        self.lost.set()
        if self.on_lost is not None:
            self.on_lost()

    def _write(self, *, sync: bool) -> None:
        path = self.state_dir / RECORD
        try:
            data = json.dumps(dataclasses.asdict(self.record)).encode()
            write_atomic(path, data, mode=0o600, sync=sync)
        except OSError as e:
            if not self._write_failed:
                log.error(
                    "cannot write the serving record %s: %s; another host may take this state "
                    "dir over once the record is %.0fs old",
                    path,
                    e.strerror or e,
                    self.record.stale_after,
                )
            self._write_failed = True
            return
        if self._write_failed:
            log.info("the serving record %s is written again", path)
        self._write_failed = False

    def close(self) -> None:
        """At a clean exit: the record says `stopped` (if it is still ours), so another host
        starts its own daemon without waiting; then the flock is released."""
        self._stop_beating.set()
        try:
            with self._writing:
                self._closed = True
                self._stopped()
        finally:
            os.close(self.lock_fd)

    def abandon(self) -> None:
        """At an exit before the jobs were settled (a start that failed half-way): a dead
        host's record that this daemon replaced is put back, so the next daemon still knows
        that host's local jobs ran elsewhere and must not look for their pids here; any other
        record says `stopped`, as at a clean exit."""
        prev = self.previous
        if self.took_over_from is None or prev is None:
            self.close()
            return
        self._stop_beating.set()
        try:
            with self._writing:
                self._closed = True
                current = read_record(self.state_dir)
                if current is None or current.id == self.record.id:
                    self.record = prev
                    self._write(sync=True)
        finally:
            os.close(self.lock_fd)

    def _stopped(self) -> None:
        current = read_record(self.state_dir)
        if current is None or current.id == self.record.id:
            self.record = dataclasses.replace(self.record, state="stopped", heartbeat=time.time())
            self._write(sync=True)


def acquire(
    state_dir: Path,
    socket_path: Path,
    *,
    period: float = PERIOD,
    ssh_name: str | None = None,
    host: str | None = None,
) -> Serving:
    """Takes the state dir for this daemon, or raises Busy naming who has it. May take the
    staleness limit of a dead host's record (STALE_PERIODS of its periods) to take over."""
    host = host or this_host()
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(state_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise Busy(f"cannot use the state dir {state_dir}: {e.strerror or e}") from None
    claim: Path | None = None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _locked(fd, state_dir, socket_path, host) from None
        previous = read_record(state_dir)
        other = (
            previous if previous and previous.host != host and previous.state == "serving" else None
        )
        if other is not None and other.fresh():
            # Where locks are node-local, that host's daemon holds this file too: its name stays.
            raise _elsewhere(other, state_dir)
        # Named before the claims, which may wait: a daemon started here at the same moment
        # reads this to tell a start on its own socket (use it) from another socket's (an
        # error), and waits for it while the file is empty (_holder).
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n{socket_path}\n".encode())
        if other is not None:
            claim = _take_over(state_dir, other, host)
        else:
            claim = _claim_start(state_dir, previous, host)
        now = time.time()
        record = Record(
            host=host,
            ssh=ssh_name or os.environ.get(SSH_NAME_ENV) or host,
            socket=str(socket_path),
            pid=os.getpid(),
            version=_version(),
            started=now,
            heartbeat=now,
            period=period,
            state="serving",
            id=secrets.token_hex(8),
            python=sys.executable,
            epoch=(previous.epoch if previous is not None else 0) + 1,
        )
        serving = Serving(state_dir, fd, record, previous)
        serving._write(sync=True)
        if serving._write_failed:
            raise Busy(
                f"cannot write the serving record in {state_dir} (see the log): without it, "
                "a daemon on another host sharing this state dir could not tell it is in use"
            )
        _remove_claims(state_dir)
        if serving.took_over_from:
            log.warning(
                "took over the state dir %s from host %s, whose txd last beat %.0fs ago",
                state_dir,
                serving.took_over_from,
                previous.age() if previous else 0,
            )
        return serving
    except BaseException:
        if claim is not None:  # else the next start would wait for a claim nobody holds
            with contextlib.suppress(OSError):
                claim.unlink()
        os.close(fd)
        raise


def _locked(fd: int, state_dir: Path, socket_path: Path, host: str) -> Busy:
    """Why the flock is held: another host's daemon (a global lock, as on NFS) or one here."""
    pid, _, sock = _holder(fd).partition("\n")
    pid, sock = pid.strip() or "?", sock.strip()
    rec = read_record(state_dir)
    if rec is not None and rec.host != host and rec.state == "serving":
        if rec.fresh():
            return _elsewhere(rec, state_dir)
        return Busy(
            f"the txd of host {rec.host} stopped beating in {state_dir} ({rec.describe()}) "
            f"but its lock on {LOCK} is still held (this file system's locks are shared "
            "between hosts): it is alive but stalled, or its host is gone and the lock has "
            "not expired yet; try again in a minute",
            host=rec.host,
            socket_path=rec.socket,
        )
    if sock == str(socket_path):  # a daemon started at the same time for the same socket
        return Busy(
            f"txd is already running (pid {pid}) on {sock} with the state dir {state_dir}",
            socket_path=sock,
        )
    return Busy(
        f"the state dir {state_dir} is in use by another txd (pid {pid}"
        f"{f', socket {sock}' if sock else ''}): give this one its own with --state-dir "
        "or TXD_STATE_DIR",
        socket_path=sock,
    )


def _holder(fd: int) -> str:
    """The lock file's "pid\\nsocket\\n", which its holder writes just after taking the flock:
    a holder caught between the two gets START_WAIT seconds to write it (a start race only, so
    a short poll is fine). What is there after that, however little."""
    deadline = time.monotonic() + START_WAIT
    while True:
        text = os.pread(fd, 4096, 0).decode(errors="replace")
        if text.count("\n") >= 2 or time.monotonic() > deadline:
            return text
        time.sleep(0.01)


def _elsewhere(rec: Record, state_dir: Path) -> Busy:
    return Busy(
        f"txd already serves the state dir {state_dir} on another host ({rec.describe()}): "
        f"reach it there (txctl --host ssh://{rec.ssh}), or give this one its own state dir",
        host=rec.host,
        socket_path=rec.socket,
    )


def _take_over(state_dir: Path, stale: Record, host: str) -> Path:
    """Wins the claim on the stale record, then watches the record for its staleness limit:
    a daemon that is alive after all (a slow file system, a paused process, a clock ahead of
    ours) beats meanwhile, and this one backs off."""
    claim = _claim(state_dir, stale, host)
    try:
        log.warning(
            "the state dir %s was served by host %s, whose heartbeat stopped (%s); watching it "
            "for %.0fs before taking it over",
            state_dir,
            stale.host,
            stale.describe(),
            stale.stale_after,
        )
        deadline = time.monotonic() + stale.stale_after
        step = max(min(stale.period / 2, 1.0), 0.05)
        while True:
            now = read_record(state_dir)
            if now != stale:
                if now is not None and now.host != host and now.state == "serving":
                    raise _elsewhere(now, state_dir)
                raise Busy(f"another txd took the state dir {state_dir} over first")
            left = deadline - time.monotonic()
            if left <= 0:
                return claim
            time.sleep(min(step, left))
    except BaseException:
        with contextlib.suppress(OSError):
            claim.unlink()
        raise


def _claim_start(state_dir: Path, previous: Record | None, host: str) -> Path:
    """Before writing our record over `previous` (none, a stopped daemon's, or this host's,
    whose flock we hold): hosts doing so at once cannot see each other's flock where locks are
    node-local (Lustre's localflock), so each would write its record and open the job store.
    The claim file decides, as for a takeover; a loser waits for the winner's record and is
    busy, naming it."""
    try:
        return _claim(state_dir, previous, host)
    except Busy:
        pass
    deadline = time.monotonic() + START_WAIT
    now = read_record(state_dir)
    while now == previous and time.monotonic() < deadline:
        time.sleep(0.02)
        now = read_record(state_dir)
    if now is not None and now != previous and now.host != host and now.state == "serving":
        raise _elsewhere(now, state_dir)
    raise Busy(
        f"another txd is starting on the state dir {state_dir} at the same time: try again in "
        "a few seconds"
    )


def _claim(state_dir: Path, stale: Record | None, host: str) -> Path:
    """Creates the claim file on `stale` (None: on there being no record) with O_EXCL: of
    several hosts, one creates it. A claim whose claimant died half-way (older than twice the
    watch, or its process of this host gone) is itself claimed."""
    name = f"{CLAIM_PREFIX}{stale.id if stale is not None else 'none'}"
    stale_after = stale.stale_after if stale is not None else STALE_PERIODS * PERIOD
    was = f"the txd of host {stale.host} stopped beating" if stale is not None else "no txd serves"
    for _ in range(_CLAIM_DEPTH):
        path = state_dir / name
        mine = {"host": host, "pid": os.getpid(), "time": time.time(), "id": secrets.token_hex(8)}
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            other = _read_claim(path)
            if other is None:
                raise Busy(
                    f"{was} in {state_dir}, and another host is taking the state dir over: "
                    "try again in a few seconds"
                ) from None
            dead = other["host"] == host and not _alive(other["pid"])
            if not dead and time.time() - other["time"] <= 2 * stale_after + 5:
                raise Busy(
                    f"{was} in {state_dir}, and host {other['host']} is taking the state dir "
                    "over: try again in a few seconds",
                    host=other["host"],
                ) from None
            name = f"{name}.{other['id']}"
            continue
        try:
            os.write(fd, json.dumps(mine).encode())
        finally:
            os.close(fd)
        if read_record(state_dir) != stale:  # someone finished a takeover before we claimed
            path.unlink()
            raise Busy(f"another txd took the state dir {state_dir} over first")
        return path
    raise Busy(f"too many abandoned takeover claims ({CLAIM_PREFIX}*) in {state_dir}")


def _read_claim(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
        return {
            "host": str(data["host"]),
            "pid": int(data["pid"]),
            "time": float(data["time"]),
            "id": str(data["id"]),
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    """Whether process `pid` of this host exists (a claim's: its claimant died half-way)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        pass
    return True


def _remove_claims(state_dir: Path) -> None:
    for path in state_dir.glob(f"{CLAIM_PREFIX}*"):
        with contextlib.suppress(OSError):
            path.unlink()
