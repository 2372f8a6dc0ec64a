"""A damaged registry: cut short, pages overwritten, a directory in its place, unreadable, or a
damaged -shm. txd refuses to start over it with what is wrong and how to recover, never starts
empty over it, and leaves every byte of it (and its mtime) as it was."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from txd.daemon.jobstore import JobRecord, JobStore, JobStoreError
from txd.v1 import AppDef, AppState, AppStatus, Role
from txd_testing import clean_env, short_tmpdir

JOBS = 300
START_TIMEOUT = 30.0


def _records(n: int) -> list[JobRecord]:
    now = time.time()
    return [
        JobRecord(
            handle=f"local_cwd://txd/job-{i}",
            scheduler="local_cwd",
            app_id=f"job-{i}",
            created=now + i,
            app=AppDef(name="job", roles=[Role(name="r", entrypoint="sh", args=["-c", "x" * 200])]),
            status=AppStatus(state=AppState.SUCCEEDED, msg=f"done {i}"),
            cfg={},
            native={"app_dir": f"/tmp/nowhere/job-{i}"},
            request_id=f"rid-{i}",
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A registry of JOBS jobs, checkpointed into its one file (as a clean stop leaves it)."""
    path = tmp_path_factory.mktemp("registry") / "registry.db"
    store = JobStore(path)
    store.insert_many(_records(JOBS))
    store.close()
    assert not Path(f"{path}-wal").exists()
    return path


def _snapshot(directory: Path) -> dict[str, tuple[str, int]]:
    """Every file in the directory: its bytes' digest and its mtime (ns)."""
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir",
                 p.stat().st_mtime_ns)
        for p in sorted(directory.iterdir())
    }  # fmt: skip


def _damaged_copy(registry: Path, into: Path, damage: str, where: float) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    path = into / "jobs.db"
    shutil.copy(registry, path)
    size = path.stat().st_size
    at = int(size * where)
    if damage == "cut":
        os.truncate(path, at)
    else:  # bytes overwritten in the middle of a page
        at = at - at % 4096 + 1000
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(bytes(range(256)) * 4)
    return path


# Cut at several points: inside the header, at a page boundary, mid-page, one byte short.
CUTS = [("cut", 0.0001), ("cut", 0.25), ("cut", 0.5), ("cut", 0.999)]
OVERWRITES = [("overwrite", 0.3), ("overwrite", 0.5), ("overwrite", 0.8)]


@pytest.mark.parametrize(("damage", "where"), CUTS + OVERWRITES)
def test_damaged_file_is_refused_untouched(
    registry: Path, tmp_path: Path, damage: str, where: float
) -> None:
    path = _damaged_copy(registry, tmp_path / "state", damage, where)
    before = _snapshot(path.parent)
    with pytest.raises(JobStoreError) as info:
        JobStore(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path} is ")
    assert ("cut short" if damage == "cut" else "damaged") in message, message
    assert "Move it away" in message and f"sqlite3 {path} .recover" in message
    assert _snapshot(path.parent) == before  # no byte written, no -wal or -shm made


def _start(state_dir: Path, root: Path, *prefix: str) -> subprocess.CompletedProcess[str]:
    """Starts a real daemon on state_dir (under `prefix`, e.g. setpriv) and returns once it
    exits, which a daemon that refuses its registry does at once."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "txd.daemon", "--socket", str(root / "txd.sock"),
         "--state-dir", str(state_dir)],
        capture_output=True, text=True, env=clean_env(HOME=str(root)), cwd=root,
        timeout=START_TIMEOUT,
    )  # fmt: skip


@pytest.fixture
def root() -> Iterator[Path]:
    path = short_tmpdir("txdt-reg-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _refused(proc: subprocess.CompletedProcess[str], root: Path) -> str:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert not (root / "txd.sock").exists()  # never served
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("txd: ")]
    return line


@pytest.mark.parametrize(("damage", "where"), [("cut", 0.5), ("overwrite", 0.5)])
def test_daemon_refuses_a_damaged_registry(
    registry: Path, root: Path, damage: str, where: float
) -> None:
    state = root / "state"
    path = _damaged_copy(registry, state, damage, where)
    before = _snapshot(state)
    line = _refused(_start(state, root), root)
    assert line.startswith(f"txd: {path} is "), line
    assert "txd will not start over it" in line and ".recover" in line
    after = _snapshot(state)
    assert after.pop("txd.lock")  # the state dir's lock, taken first; nothing else is new
    assert after.pop("txd.serving")  # the serving record, written before the job store opens
    assert after == before


def test_daemon_refuses_a_directory_in_place_of_the_registry(root: Path) -> None:
    state = root / "state"
    (state / "jobs.db").mkdir(parents=True)
    line = _refused(_start(state, root), root)
    assert line == (
        f"txd: {state / 'jobs.db'} is a directory, not a job store file: txd will not "
        "start over it; move it away to start with an empty job store"
    )


def test_daemon_refuses_an_unreadable_registry(registry: Path, root: Path) -> None:
    """chmod 000 does not stop root: the daemon runs without the capabilities that let root
    past file modes (setpriv; the same uid, so it still reads the code wherever it lies)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the daemon without CAP_DAC_OVERRIDE")
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux)")
    state = root / "state"
    state.mkdir(mode=0o700)
    path = state / "jobs.db"
    shutil.copy(registry, path)
    path.chmod(0o000)
    before = _snapshot(state)
    caps = "-dac_override,-dac_read_search"
    drop = ("setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}")
    line = _refused(_start(state, root, *drop), root)
    assert line == (
        f"txd: cannot open {path} for reading and writing (Permission denied): give it back to "
        "the user txd runs as, or move it away to start with an empty job store"
    )
    after = _snapshot(state)
    assert after.pop("txd.lock")
    assert after.pop("txd.serving")  # the serving record, written before the job store opens
    assert after == before
    with contextlib.closing(sqlite3.connect(path)) as db:  # still whole (root reads it)
        assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] == JOBS


# -- the write-ahead log and its index ---------------------------------------------------------

_CRASHED_WRITER = """
import os, sys, time
from pathlib import Path
from txd.daemon.jobstore import JobRecord, JobStore
from txd.v1 import AppDef, AppState, AppStatus
store = JobStore(Path(sys.argv[1]))
store._db.execute("PRAGMA wal_autocheckpoint=0")  # every job stays in the -wal
for i in range(int(sys.argv[2])):
    store.insert(JobRecord(handle=f"local_cwd://txd/w-{i}", scheduler="local_cwd", app_id=f"w-{i}",
        created=time.time(), app=AppDef(name="w"), status=AppStatus(state=AppState.SUCCEEDED),
        cfg={}, native={}))
os._exit(0)  # no close, no checkpoint: what a SIGKILLed daemon leaves
"""
WAL_JOBS = 100


def _crashed_registry(directory: Path) -> Path:
    """A registry whose jobs are all in its -wal (with its -shm), as after a crash."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "registry.db"
    subprocess.run(
        [sys.executable, "-c", _CRASHED_WRITER, str(path), str(WAL_JOBS)],
        check=True, timeout=60,
    )  # fmt: skip
    assert Path(f"{path}-wal").stat().st_size > 100 * 4096
    return path


def _overwrite_middle(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2)
        f.write(bytes(range(256)) * 2)


def _jobs(path: Path) -> int:
    store = JobStore(path)
    try:
        return len(store.page(10 * WAL_JOBS))
    finally:
        store.close()


def test_crashed_registry_opens_with_every_job(tmp_path: Path) -> None:
    """The control: the -wal of a crash is whole, and every job in it is read."""
    assert _jobs(_crashed_registry(tmp_path)) == WAL_JOBS


def test_damaged_wal_is_refused_untouched(tmp_path: Path) -> None:
    """SQLite itself would read the log up to the damage, drop the jobs after it without a
    word and checkpoint over them (49 of 100 jobs here, before the check)."""
    path = _crashed_registry(tmp_path)
    wal = Path(f"{path}-wal")
    _overwrite_middle(wal)
    before = _snapshot(tmp_path)
    with pytest.raises(JobStoreError) as info:
        JobStore(path)
    message = str(info.value)
    assert message.startswith(f"{wal} is damaged (frame "), message
    assert "later changes follow it that SQLite would drop" in message
    assert "Move it away" in message
    assert _snapshot(tmp_path) == before


def test_wal_cut_short_by_a_crash_opens(tmp_path: Path) -> None:
    """A frame half written when the daemon died is the end of the log, not damage: the jobs
    before it open (only the last one, whose commit was cut, is not there)."""
    path = _crashed_registry(tmp_path)
    wal = Path(f"{path}-wal")
    os.truncate(wal, wal.stat().st_size - 1000)
    assert _jobs(path) == WAL_JOBS - 1


def test_damaged_shm_is_rebuilt_and_nothing_is_lost(tmp_path: Path) -> None:
    """-shm is only an index of the -wal, rebuilt from it: damage there loses nothing."""
    path = _crashed_registry(tmp_path)
    _overwrite_middle(Path(f"{path}-shm"))
    assert _jobs(path) == WAL_JOBS
