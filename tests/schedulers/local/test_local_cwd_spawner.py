"""local_cwd starts replicas through its spawner process (schedulers/local/spawner.py), never
by forking the daemon: a fork/exec holds the daemon's event loop (the GIL stays held while a
vforked child runs up to its exec). The replica is the spawner's child, in a session of its
own; a spawner that dies costs only the exit codes of the replicas it ran."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

from txd.v1 import AppDef, AppState, Role
from txd_testing import (
    Daemon,
    Gates,
    PidWatch,
    pids_with_marker,
    proc_stat,
    remove_tree,
    sh_app,
    short_tmpdir,
)


def _sleeper(marker: str) -> AppDef:
    return AppDef(name="sleeper", roles=[Role(name="s", entrypoint="sleep", args=[marker])])


async def test_the_daemon_forks_no_replica_itself(daemon: Any, workdir: Path) -> None:
    marker = f"300.{os.getpid()}"
    async with daemon.client() as c:
        handle = await c.run(_sleeper(marker), cwd=str(workdir))
        [pid] = pids_with_marker(marker)
        st = proc_stat(pid)
        assert st is not None
        _, ppid, pgid, _ = st
        assert ppid != daemon.pid  # started by the spawner (the daemon's child was forked)
        assert proc_stat(ppid) is not None and proc_stat(ppid)[1] == daemon.pid  # type: ignore[index]
        assert pgid == pid and os.getsid(pid) == pid  # its own session and group, as before
        await c.cancel(handle)
        assert (await c.wait(handle, timeout=30)).state == AppState.CANCELLED


async def test_a_lost_spawner_costs_only_the_exit_codes_it_held(workdir: Path) -> None:
    """SIGKILL to the spawner while a replica runs: the replica runs on, its end is still
    seen (FAILED, its exit code unknown, said so), and the next Run starts a new spawner."""
    root = short_tmpdir()
    d = Daemon(root).start()
    try:
        marker = f"301.{os.getpid()}"
        async with d.client() as c:
            handle = await c.run(_sleeper(marker), cwd=str(workdir))
            [pid] = pids_with_marker(marker)
            spawner = proc_stat(pid)[1]  # type: ignore[index]
            with PidWatch([spawner]) as watch:
                os.kill(spawner, signal.SIGKILL)
                assert watch.wait(10.0) == []
            assert proc_stat(pid) is not None  # the replica runs on
            os.killpg(pid, signal.SIGTERM)
            status = await c.wait(handle, timeout=30)
            assert status.state == AppState.FAILED
            assert "exit code unknown" in status.msg and "s/0" in status.msg, status
            again = await c.run(sh_app("echo again"), cwd=str(workdir))
            assert (await c.wait(again, timeout=30)).state == AppState.SUCCEEDED
    finally:
        d.close()
        log = d.log()
        remove_tree(root)
    assert "process spawner exited" in log
    assert "Traceback" not in log, log


async def test_a_replica_whose_output_outlives_its_exit_is_seen_ending(
    daemon: Any, workdir: Path, tmp_path: Path
) -> None:
    """Replica 0 exits at once while a child of its own holds its pipes until a gate opens:
    its exit comes first, its end (output complete) only then, and that end is pushed while
    replica 1 still runs (it was not: the status said RUNNING for it until the job ended)."""
    with Gates(tmp_path) as gates:
        late, last = gates.new("late"), gates.new("last")
        role = Role(
            name="r",
            entrypoint="sh",
            num_replicas=2,
            env={"K": "${replica_id}"},
            args=["-c", f'if [ "$K" = 0 ]; then ({late.wait}; echo late) & else {last.wait}; fi'],
        )
        async with daemon.client() as c:
            handle = await c.run(AppDef(name="late", roles=[role]), cwd=str(workdir))
            async with asyncio.timeout(30):
                async for status in c.watch(handle):
                    first, second = (r for x in status.roles for r in x.replicas)
                    if first.state == AppState.RUNNING and first.HasField("exit_code"):
                        late.open()  # its shell has exited (said so); now its child ends
                    if (first.state, second.state) == (AppState.SUCCEEDED, AppState.RUNNING):
                        break
            last.open()
            assert (await c.wait(handle, timeout=30)).state == AppState.SUCCEEDED
