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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txd.client import ResourceExhaustedError
from txd.v1 import AppState
from txd_testing import Daemon, Gate, Gates, log_alarms, read_logs, sh_app, short_tmpdir

DISK = 2 * 1024 * 1024
FILLER = 1024 * 1024  # what the test frees to give space back
WRITTEN = 3_000_000  # the job's output: more than the whole disk
TIMEOUT = 60.0
MARK = re.compile(rb"\n\[txd: (\d+) bytes of output lost here: No space left on device\]\n")


def _mount_tmpfs(path: Path, size: int) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                   check=True, capture_output=True, timeout=10)  # fmt: skip


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=10)


async def _door_reopened(d: Daemon) -> None:
    """Returns once the daemon has logged its read door serving after it logged it closed."""
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    closed = "read door closed until the job store takes writes again"
    while (log := d.log()).rfind("read door on ") < log.find(closed):  # decides nothing
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


@pytest.fixture
def full_disk_daemon() -> Iterator[Any]:
    """A daemon whose state dir is a fresh tmpfs of DISK bytes, with a FILLER file on it."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to mount a tmpfs")
    root = short_tmpdir("txdt-disk-")
    d = Daemon(root)
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


async def test_full_disk_loses_output_not_jobs_and_recovers(full_disk_daemon: Any) -> None:
    d = full_disk_daemon
    with Gates(d.root) as gates:
        gate = gates.new("space")
        written = gates.new("written")  # the job says it has written all its output
        script = (
            f"head -c {WRITTEN} /dev/zero | tr '\\0' x; echo; echo > {written.path}; "
            f"{gate.wait}; echo after-the-gap"
        )
        async with d.client(timeout=20) as c:
            h = await c.run(sh_app(script, name="filler"), cwd=str(d.root))
            # The status says so as soon as bytes are lost (pushed, not polled).
            async with asyncio.timeout(TIMEOUT), contextlib.aclosing(c.watch(h)) as statuses:
                async for status in statuses:
                    if "output lost" in status.msg:
                        break
            assert status.state == AppState.RUNNING, status
            assert status.msg.startswith("output lost: r/0 "), status.msg
            assert status.msg.endswith(" bytes (No space left on device)"), status.msg

            # The disk is full: the daemon still answers, a new job cannot be recorded. The
            # read door, which reads the store, is closed while the store lacks that status.
            assert "read door closed until the job store takes writes again" in d.log()
            assert (await c.status(h)).msg == status.msg
            with pytest.raises(ResourceExhaustedError) as info:
                await c.run(sh_app("true", name="nospace"), cwd=str(d.root))
            assert "No space left on device" in str(info.value) or "full" in str(info.value)
            assert [a.name for a in await c.list()] == ["filler"]

            # Space returns: the job goes on and ends well, its log marks the gap.
            async with asyncio.timeout(TIMEOUT):
                await _readable(written)
            (d.state_dir / "filler").unlink()
            gate.open()
            final = await c.wait(h, timeout=TIMEOUT)
            assert final.state == AppState.SUCCEEDED, final
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
