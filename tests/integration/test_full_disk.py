"""A full disk under the daemon's state dir (a 2 MiB tmpfs the test mounts there, which holds
the registry and the logs): a job that fills it keeps running, the daemon keeps serving, the
lost bytes are marked in the log and named in the status, a Run that cannot be recorded is
RESOURCE_EXHAUSTED, and everything works again once space returns."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txd import defaults
from txd.client import ResourceExhaustedError
from txd.v1 import AppState, AppStatus
from txd_testing import (
    Daemon,
    Gate,
    Gates,
    log_alarms,
    read_logs,
    sh_app,
    short_tmpdir,
    wait_ended,
)

DISK = 2 * 1024 * 1024
FILLER = 1024 * 1024  # what the test frees to give space back
WRITTEN = 3_000_000  # the job's output: more than the whole disk
TIMEOUT = 60.0
CLOSED = "read door closed until the job store takes writes again"  # the daemon's log line
MARK = re.compile(rb"\n\[txd: (\d+) bytes of output lost here: No space left on device\]\n")

# Loaded by the daemon (PYTHONPATH): the read door's process is made only once the test writes
# a line to the fifo `door-go` in the folder TXD_TEST_DOOR_HOLD (the event loop goes on
# meanwhile, and the file `door-held` there says it waits); the pid made is then written to
# `door-made` there.
HOLD_DOOR = """\
import asyncio, os

if os.environ.get("TXD_TEST_DOOR_HOLD"):
    _make = asyncio.create_subprocess_exec

    async def _held(*args, **kwargs):
        if "txd.daemon.readserver" not in args or "TXD_TEST_DOOR_HOLD" not in os.environ:
            return await _make(*args, **kwargs)
        folder = os.environ.pop("TXD_TEST_DOOR_HOLD")  # once: not the door made again
        fd = os.open(os.path.join(folder, "door-go"), os.O_RDONLY | os.O_NONBLOCK)
        with open(os.path.join(folder, "door-held"), "w") as f:
            f.write("held")
        loop = asyncio.get_running_loop()
        go = loop.create_future()
        loop.add_reader(fd, lambda: go.done() or go.set_result(None))
        try:
            await go
        finally:
            loop.remove_reader(fd)
            os.close(fd)
        proc = await _make(*args, **kwargs)
        with open(os.path.join(folder, "door-made"), "w") as f:
            f.write(str(proc.pid))
        return proc

    asyncio.create_subprocess_exec = _held
"""


def _mount_tmpfs(path: Path, size: int) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                   check=True, capture_output=True, timeout=10)  # fmt: skip


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=10)


async def _door_reopened(d: Daemon) -> None:
    """Returns once the daemon has logged its read door serving after it logged it closed."""
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while (log := d.log()).rfind("read door on ") < log.find(CLOSED):  # decides nothing
        assert asyncio.get_running_loop().time() < deadline, log[-3000:]
        await asyncio.sleep(0.02)


async def _readable(gate: Gate) -> None:
    """Returns once a line was written to the gate's pipe (by the job)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(gate._fd, ready.set_result, None)
    try:
        await ready
    finally:
        loop.remove_reader(gate._fd)


@contextlib.contextmanager
def _on_full_disk(hold_door: bool = False) -> Iterator[Daemon]:
    """A daemon whose state dir is a fresh tmpfs of DISK bytes, with a FILLER file on it; with
    hold_door, its read door's process is made only when the test says (HOLD_DOOR)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to mount a tmpfs")
    root = short_tmpdir("txdt-disk-")
    env = {}
    if hold_door:
        (root / "site").mkdir()
        (root / "site" / "sitecustomize.py").write_text(HOLD_DOOR)
        os.mkfifo(root / "door-go")
        env = {"PYTHONPATH": str(root / "site"), "TXD_TEST_DOOR_HOLD": str(root)}
    d = Daemon(root, env=env)
    d.state_dir.mkdir()
    try:
        try:
            _mount_tmpfs(d.state_dir, DISK)
        except subprocess.CalledProcessError as e:
            pytest.skip(f"cannot mount a tmpfs here: {e.stderr.decode().strip()}")
        (d.state_dir / "filler").write_bytes(b"\0" * FILLER)
        yield d.start()
    finally:
        d.close()
        _umount(d.state_dir)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def full_disk_daemon() -> Iterator[Daemon]:
    with _on_full_disk() as d:
        yield d


async def _output_lost(c: Any, handle: str) -> AppStatus:
    """The job's first status that says bytes were lost (pushed, not polled)."""
    async with asyncio.timeout(TIMEOUT), contextlib.aclosing(c.watch(handle)) as statuses:
        async for status in statuses:
            if "output lost" in status.msg:
                return status
    raise AssertionError(f"the watch of {handle} ended without a loss")


def _filler(gates: Gates) -> tuple[str, Gate, Gate]:
    """A job's script that writes more than the disk holds, says so on `written` and then
    waits on `space` before its last line."""
    space = gates.new("space")
    written = gates.new("written")
    script = (
        f"head -c {WRITTEN} /dev/zero | tr '\\0' x; echo; echo > {written.path}; "
        f"{space.wait}; echo after-the-gap"
    )
    return script, space, written


async def test_full_disk_loses_output_not_jobs_and_recovers(full_disk_daemon: Any) -> None:
    d = full_disk_daemon
    with Gates(d.root) as gates:
        script, gate, written = _filler(gates)
        async with d.client(timeout=20) as c:
            h = await c.run(sh_app(script, name="filler"), cwd=str(d.root))
            status = await _output_lost(c, h)
            assert status.state == AppState.RUNNING, status
            assert status.msg.startswith("output lost: r/0 "), status.msg
            assert status.msg.endswith(" bytes (No space left on device)"), status.msg

            # The disk is full: the daemon still answers, a new job cannot be recorded. The
            # read door, which reads the store, is closed while the store lacks that status
            # (which it nearly always does: a store that found room for it may serve it).
            if "output lost" not in _stored_msg(d, h):
                assert CLOSED in d.log()
            assert (await c.status(h)).msg == status.msg
            with pytest.raises(ResourceExhaustedError) as info:
                await c.run(sh_app("true", name="nospace"), cwd=str(d.root))
            assert "No space left on device" in str(info.value) or "full" in str(info.value)
            assert [a.name for a in await c.list()] == ["filler"]

            # Space returns: the job goes on and ends well, its log marks the gap.
            final = await _space_back(d, c, h, written, gate)
            log = await read_logs(c, h)
            # x...x, a mark for each run of lost bytes, x...x (what came after), the last line.
            pieces = MARK.split(log)
            counts = [int(n) for n in pieces[1::2]]
            assert counts, log[-300:]
            last = b"after-the-gap\n"
            assert pieces[-1].endswith(last), pieces[-1][-300:]
            kept = b"".join(pieces[0::2])
            assert set(kept[: -len(last)]) <= {ord("x"), ord("\n")}
            # Every byte the job wrote is in the log or counted as lost.
            assert len(kept) + sum(counts) == WRITTEN + 1 + len(last)
            assert f"output lost: r/0 {sum(counts)} bytes" in final.msg
            # The daemon's metric counts the same bytes.
            text = (await c.metrics(prometheus=True)).text
            found = re.search(r"^txd_log_bytes_lost_total (\S+)$", text, re.M)
            assert found and float(found[1]) == sum(counts), text

            # The read door opens again once the store takes writes.
            await _door_reopened(d)
            assert (await c.status(h)).msg == final.msg

            # And new work is recorded again.
            again = await c.run(sh_app("echo fine", name="after"), cwd=str(d.root))
            assert (await c.wait(again, timeout=TIMEOUT)).state == AppState.SUCCEEDED
            assert await read_logs(c, again) == b"fine\n"
    d.stop()
    assert not log_alarms(d.log()), d.log()
    registry = d.state_dir / "jobs.db"
    with contextlib.closing(sqlite3.connect(registry)) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        names = sorted(r[0] for r in db.execute("SELECT app FROM jobs"))
    assert len(names) == 2


async def test_a_store_failing_while_the_door_starts_keeps_the_door_closed() -> None:
    """The store fails while the read door's process is being made (held by HOLD_DOOR until
    then): the daemon says the door is closed, the process made is ended before it serves, and
    the door opens once the store takes writes again (before, it served the store's older
    status, unsaid)."""
    with _on_full_disk(hold_door=True) as d, Gates(d.root) as gates:
        _written(d.root / "door-held")  # the door's making waits
        script, space, written = _filler(gates)
        async with d.client(timeout=20) as c:
            h = await c.run(sh_app(script, name="filler"), cwd=str(d.root))
            lost = await _output_lost(c, h)
            if "output lost" in _stored_msg(d, h):
                pytest.skip("the job store found room for the status: nothing to close for")
            assert CLOSED in d.log()
            go = os.open(d.root / "door-go", os.O_WRONLY | os.O_NONBLOCK)  # the daemon reads it
            os.write(go, b"go\n")
            os.close(go)
            wait_ended(int(_written(d.root / "door-made")), TIMEOUT)
            assert "read door on " not in d.log()
            assert not Path(defaults.read_door(d.socket)).exists()
            assert (await c.status(h)).msg == lost.msg  # through the socket
            final = await _space_back(d, c, h, written, space)
            await _door_reopened(d)
            assert (await c.status(h)).msg == final.msg
        d.stop()
        assert not log_alarms(d.log()), d.log()


async def _space_back(d: Daemon, c: Any, handle: str, written: Gate, space: Gate) -> AppStatus:
    """Once the filler job has written all its output, frees FILLER's bytes and lets the job
    go on (`space`); its terminal status, which must be SUCCEEDED."""
    async with asyncio.timeout(TIMEOUT):
        await _readable(written)
    (d.state_dir / "filler").unlink()
    space.open()
    final = await c.wait(handle, timeout=TIMEOUT)
    assert final.state == AppState.SUCCEEDED, final
    return final


def _stored_msg(d: Daemon, handle: str) -> str:
    """The status message the job store holds for the job, read as the read door reads it.
    The status that first says bytes were lost is written through to the store before anyone
    is told of it: a store without it failed that write."""
    uri = f"file:{d.state_dir / 'jobs.db'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        (blob,) = db.execute("SELECT status FROM jobs WHERE handle = ?", (handle,)).fetchone()
    return AppStatus.FromString(blob).msg


def _written(path: Path) -> str:
    """The text of the file at `path`, once it is there and not empty (written once, whole)."""
    deadline = time.monotonic() + TIMEOUT
    while not (path.exists() and (text := path.read_text())):
        assert time.monotonic() < deadline, f"{path} not written within {TIMEOUT} s"
        time.sleep(0.02)
    return text
