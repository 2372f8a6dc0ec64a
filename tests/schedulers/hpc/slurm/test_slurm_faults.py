"""Slurm commands that fail, hang or print garbage, through a real txd.

The daemon's slurm scheduler finds stand-in `sbatch`, `squeue`, `scancel` and `sacct` programs
first on its PATH (the real Slurm cluster is never touched): shell scripts that answer in the
formats of Slurm 22.05 (schedulers/hpc/slurm_status.py's squeue_argv, the slurm tests' recorded
output) or misbehave as the test's control files say. A RUNNING job must stay RUNNING, marked
stale with a reason naming the command, while another scheduler's job runs and is watched
unaffected; when the commands answer again the job is fresh again by itself, and its real end
is seen once.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txd.v1 import AppDef, AppState, Role
from txd_testing import (
    STEP_TIMEOUT,
    PidWatch,
    Watched,
    clean_env,
    is_fresh_running,
    is_stale,
    repeated_statuses,
    sh_app,
    watching,
)

# What squeue (and so every client command) says when slurmctld does not answer.
CONTROLLER_DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
# What sacct says when accounting is configured but slurmdbd does not answer (22.05).
DBD_DOWN = (
    "sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection "
    "to host:localhost:6819: Connection refused\n"
    "sacct: error: Problem talking to the database: Connection refused"
)
COMMAND_TIMEOUT = 4  # the daemon's slurm.command_timeout here

# Each reads its mode from $CTL/<name>.mode when it runs. Job states live in $CTL/jobs/<id>.
STANDINS = {
    "sbatch": r"""
n=$(( $(cat "$CTL/next" 2>/dev/null || echo 100) + 1 ))
echo "$n" > "$CTL/next"
cat > "$CTL/script-$n"
echo RUNNING > "$CTL/jobs/$n"
echo "$n"
""",
    "squeue": r"""
mode=$(cat "$CTL/squeue.mode")
echo "$mode" >> "$CTL/squeue.calls"
line() { printf '%s|N/A|N/A|%s|0|0|n1|0|None|main-0|\n' "$1" "$2"; }
case "$mode" in
normal)
  for f in "$CTL"/jobs/*; do [ ! -e "$f" ] || line "${f##*/}" "$(cat "$f")"; done ;;
error)
  echo "$CONTROLLER_DOWN" >&2; exit 1 ;;
hang)  # a child that holds the pipes: the timeout must end it too
  sleep 600 &
  echo "$$ $!" > "$CTL/hung"
  wait ;;
bytes)
  head -c 400 "$CTL/garbage" ;;
truncated)  # cut off mid-line, as by a full pipe or a killed squeue
  for f in "$CTL"/jobs/*; do line "${f##*/}" "$(cat "$f")"; done | head -c 17 ;;
columns)  # columns missing
  for f in "$CTL"/jobs/*; do printf '%s|%s|n1|None|main-0|\n' "${f##*/}" "$(cat "$f")"; done ;;
esac
""",
    "scancel": r"""
echo CANCELLED > "$CTL/jobs/$1"
""",
    "sacct": r"""
case "$(cat "$CTL/sacct.mode" 2>/dev/null || echo disabled)" in
disabled) echo "Slurm accounting storage is disabled" >&2; exit 1 ;;
error) echo "$DBD_DOWN" >&2; exit 1 ;;
completed) printf '%s|COMPLETED|0:0\n' "$(cat "$CTL/sacct.job")" ;;
esac
""",
}


# Random bytes made one line: no byte that ends a line or starts a character that does
# (str.splitlines: \n \v \f \r \x1c-\x1e, U+0085 as C2 85, U+2028/9 as E2 80 A8/A9).
ONE_LINE = bytes.maketrans(bytes([10, 11, 12, 13, 28, 29, 30, 0x85, 0xE2]), b"x" * 9)


class Slurm:
    """The stand-ins' control files."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.ctl = root / "ctl"
        self.bin.mkdir()
        (self.ctl / "jobs").mkdir(parents=True)
        (self.ctl / "garbage").write_bytes(os.urandom(400).translate(ONE_LINE))
        for name, body in STANDINS.items():
            path = self.bin / name
            path.write_text(
                f"#!/bin/sh\nCTL='{self.ctl}'\nCONTROLLER_DOWN='{CONTROLLER_DOWN}'\n"
                f"DBD_DOWN='{DBD_DOWN}'\n{body}"
            )
            path.chmod(0o755)
        self.squeue("normal")
        os.mkfifo(self.ctl / "hung")
        # Read and write: no EOF while no squeue has it open, and a squeue's open never waits.
        self._hung = os.open(self.ctl / "hung", os.O_RDWR | os.O_NONBLOCK)

    def squeue(self, mode: str) -> None:
        _put(self.ctl / "squeue.mode", mode)

    def sacct(self, mode: str, job_id: str = "") -> None:
        _put(self.ctl / "sacct.job", job_id)
        _put(self.ctl / "sacct.mode", mode)

    def set_job(self, job_id: str, state: str | None) -> None:
        path = self.ctl / "jobs" / job_id
        if state is None:
            path.unlink()
        else:
            _put(path, state)

    async def hung(self) -> tuple[int, int]:
        """(the hung squeue's pid, its child's), told through the FIFO once a squeue hangs."""
        loop = asyncio.get_running_loop()
        data = b""
        async with asyncio.timeout(STEP_TIMEOUT):
            while not data.endswith(b"\n"):
                readable = loop.create_future()
                loop.add_reader(self._hung, _wake, readable)
                try:
                    await readable
                finally:
                    loop.remove_reader(self._hung)
                data += os.read(self._hung, 64)
        sh, child = data.split()
        return int(sh), int(child)

    def close(self) -> None:
        os.close(self._hung)


def _put(path: Path, text: str) -> None:
    """Writes the file whole, in one rename: the stand-ins read their files while the daemon
    polls, and a file being rewritten in place reads empty for a moment (an empty squeue mode
    answered no job, so the job was taken for one Slurm had forgotten: UNKNOWN)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@pytest.fixture
def slurm(unstarted_daemon: Any, tmp_path: Path) -> Iterator[tuple[Any, Slurm]]:
    """A started daemon whose slurm commands are the stand-ins, and the stand-ins."""
    fake = Slurm(tmp_path)
    unstarted_daemon.env["PATH"] = f"{fake.bin}:{os.environ['PATH']}"
    unstarted_daemon.args += [
        "--set",
        "slurm.poll_interval=0.2",
        "--set",
        f"slurm.command_timeout={COMMAND_TIMEOUT}",
    ]
    try:
        unstarted_daemon.start()
        yield unstarted_daemon, fake
    finally:
        fake.close()


def _app(name: str) -> AppDef:
    return AppDef(name=name, roles=[Role(name="main", entrypoint="true")])


async def _submit(c: Any, fake: Slurm, workdir: Path, name: str) -> str:
    env = clean_env(PATH=f"{fake.bin}:{os.environ['PATH']}")
    return str(await c.run(_app(name), "slurm", cwd=str(workdir), env=env))


async def _fault(w: Watched, fake: Slurm, mode: str, says: str) -> None:
    """squeue misbehaves as `mode` until the job is marked stale, saying `says`; then answers
    again, and the job is fresh and RUNNING."""
    fake.squeue(mode)
    stale = await w.next(f"stale ({mode})", is_stale)
    assert stale.state == AppState.RUNNING, stale
    assert stale.stale_msg.startswith("slurm has not answered since "), stale.stale_msg
    assert says in stale.stale_msg, stale.stale_msg
    fake.squeue("normal")
    await w.next(f"fresh after {mode}", is_fresh_running)


async def test_squeue_errors_hangs_and_garbage_keep_the_job_running_stale(
    slurm: Any, workdir: Path
) -> None:
    daemon, fake = slurm
    async with daemon.client() as c:
        handle = await _submit(c, fake, workdir, "faults")
        job_id = handle.rsplit("/", 1)[1]
        async with watching(c, handle) as w:
            await w.next("RUNNING", is_fresh_running)

            # slurmctld down: squeue exits 1 with its error, which the status carries.
            await _fault(w, fake, "error", f"squeue on this host failed: {CONTROLLER_DOWN}")
            fake.squeue("error")
            await w.next("stale again", is_stale)
            text = daemon.txctl("status", handle, check=0).stdout
            assert "STALE:    slurm has not answered since " in text, text
            assert CONTROLLER_DOWN in text, text
            fake.squeue("normal")
            await w.next("fresh", is_fresh_running)

            # Garbage: random bytes, a line cut short, columns missing.
            cannot_read = "squeue on this host printed what txd cannot read: line 1"
            for mode in ("bytes", "truncated", "columns"):
                await _fault(w, fake, mode, cannot_read)

            # A hung squeue: while it hangs, a local_cwd job is run, watched to its end and
            # its logs read through the same daemon; then the hung call times out.
            fake.squeue("hang")
            sh, child = await fake.hung()
            with PidWatch([sh, child]) as hung:
                latencies = []
                local = await c.run(sh_app("echo hi", name="beside"), cwd=str(workdir))
                async for _ in c.watch(local):
                    t0 = time.monotonic()
                    now = await c.status(local)
                    latencies.append(time.monotonic() - t0)
                assert now.state == AppState.SUCCEEDED
                assert b"".join([ch.data async for ch in c.logs(local)]) == b"hi\n"
                assert hung.running() == [sh, child], "the squeue hang ended first"
                print(f"local_cwd status latency during the hang: {max(latencies) * 1000:.1f} ms")
                stale = await w.next("stale (hang)", is_stale)
                assert stale.state == AppState.RUNNING
                assert stale.stale_msg.endswith(
                    f" on this host did not finish within {COMMAND_TIMEOUT} s"
                ), stale.stale_msg
                assert "`squeue --me --states=all" in stale.stale_msg
                # The timed-out command is ended, its children with it.
                assert hung.wait(10) == [], "the hung squeue or its child was left running"
            fake.squeue("normal")
            await w.next("fresh after the hang", is_fresh_running)

            # The job's real end, seen once.
            fake.set_job(job_id, "COMPLETED")
            await w.next("SUCCEEDED", lambda s: s.state == AppState.SUCCEEDED)
        sent = w.sent
    assert [s.state for s in sent if s.state == AppState.UNKNOWN] == []
    assert [s.state for s in sent if s.state in (AppState.SUCCEEDED,)] == [AppState.SUCCEEDED]
    assert sent[-1].state == AppState.SUCCEEDED and not is_stale(sent[-1])
    assert repeated_statuses(sent) == [], sent
    calls = (fake.ctl / "squeue.calls").read_text().split()
    assert {"error", "bytes", "truncated", "columns", "hang"} <= set(calls)


async def test_a_job_forgotten_while_sacct_fails_waits_for_sacct(slurm: Any, workdir: Path) -> None:
    """The job ends and Slurm forgets it (squeue no longer shows it) while slurmdbd is down:
    the job stays stale, saying why, until sacct answers with its end."""
    daemon, fake = slurm
    async with daemon.client() as c:
        handle = await _submit(c, fake, workdir, "forgotten")
        job_id = handle.rsplit("/", 1)[1]
        async with watching(c, handle) as w:
            await w.next("RUNNING", is_fresh_running)
            fake.sacct("error")
            fake.set_job(job_id, None)
            stale = await w.next("stale", is_stale)
            assert stale.state == AppState.RUNNING, stale
            assert stale.stale_msg.endswith(
                f": squeue no longer shows job {job_id} and sacct on this host failed: {DBD_DOWN}"
            ), stale.stale_msg
            fake.sacct("completed", job_id)
            final = await w.next("the end", lambda s: s.state != AppState.RUNNING)
        assert final.state == AppState.SUCCEEDED, final
        assert final.msg == f"Slurm job {job_id} ended while txd was away (from sacct)"
        assert (await c.status(handle)).state == AppState.SUCCEEDED


async def test_a_job_forgotten_before_its_exit_code_waits_for_it(slurm: Any, workdir: Path) -> None:
    """Slurm forgets a running job (slurmctld lost its state) and accounting is off: the job
    stays RUNNING, stale, saying why, until its batch output ends with its exit code."""
    daemon, fake = slurm
    async with daemon.client() as c:
        handle = await _submit(c, fake, workdir, "lost")
        job_id = handle.rsplit("/", 1)[1]
        script = (fake.ctl / f"script-{job_id}").read_text()
        output = workdir / re.findall(r"--output=(slurm-%j-\w+\.out)", script)[0].replace(
            "%j", job_id
        )
        async with watching(c, handle) as w:
            await w.next("RUNNING", is_fresh_running)
            output.write_text("srun: a line the job printed\n")
            fake.set_job(job_id, None)
            stale = await w.next("stale", lambda s: is_stale(s) or s.state != AppState.RUNNING)
            assert stale.state == AppState.RUNNING, stale  # was UNKNOWN at once
            assert stale.stale_msg.endswith(
                f": Slurm forgot job {job_id} (squeue no longer shows it) before its batch "
                f"output {output} showed an exit code; waiting up to 60 s for one"
            ), stale.stale_msg
            with output.open("a") as f:
                f.write("txd: exit code 0\n")
            final = await w.next("the end", lambda s: s.state != AppState.RUNNING)
        assert final.state == AppState.SUCCEEDED, final
        assert final.msg == f"Slurm job {job_id} ended while txd was away (from its batch output)"
        assert not is_stale(final)
