"""The daemon's life: restart with the registry intact, SIGTERM / SIGINT ending every replica
process (grandchildren included), crash recovery ending leftovers (never a reused pid), and a
second daemon refusing to take over."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from txd.v1 import AppDef, AppState, Role
from txd_testing import (
    Daemon,
    PidWatch,
    descendants,
    group_members,
    is_running,
    job_replicas,
    pids_with_marker,
    proc_stat,
    read_logs,
    remove_tree,
    sh_app,
    short_tmpdir,
)

TERMINAL = (AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED)


def _marker() -> str:
    return f"300.{uuid.uuid4().int % 10**9}"


async def _wait_for_output(
    client: Any, handle: str, needle: bytes, count: int = 1, limit: float = 15
) -> bytes:
    """Follows the job's logs until needle was printed count times (then stops following)."""
    seen = b""
    async with asyncio.timeout(limit):
        async for chunk in client.logs(handle, follow=True):
            seen += chunk.data
            if seen.count(needle) >= count:
                return seen
    raise AssertionError(f"{needle!r} x{count} never appeared; got {seen!r}")


def _describe_procs(pids: list[int]) -> str:
    out = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            cmd = "?"
        out.append(f"{pid} {proc_stat(pid)} {cmd}")
    return "\n".join(out)


# -- restart ------------------------------------------------------------------------------------


async def test_restart_keeps_registry(daemon: Any, workdir: Path) -> None:
    rid = uuid.uuid4().hex
    async with daemon.client() as c:
        ok = await c.run(
            sh_app("echo before-restart; echo on-stderr >&2", name="keep"),
            cwd=str(workdir),
            request_id=rid,
        )
        bad = await c.run(sh_app("echo failing; exit 3", name="keepbad"), cwd=str(workdir))
        for h in (ok, bad):
            await c.wait(h, timeout=30)
        before = {h: await c.status(h) for h in (ok, bad)}
        desc_before = await c.describe(ok)
    assert before[ok].state == AppState.SUCCEEDED
    assert before[bad].state == AppState.FAILED

    assert daemon.stop() == 0
    assert not daemon.socket.exists(), "the socket file outlived a clean exit"
    daemon.restart()

    async with daemon.client() as c:
        for h in (ok, bad):
            assert await c.status(h) == before[h]
        desc = await c.describe(ok)
        assert desc.app == desc_before.app
        assert dict(desc.cfg) == dict(desc_before.cfg)
        assert desc.status == before[ok]
        assert [a.app_handle for a in await c.list()] == [bad, ok]
        assert await read_logs(c, ok) == b"before-restart\non-stderr\n"
        assert await read_logs(c, ok, streams="stdout") == b"before-restart\n"
        assert await read_logs(c, ok, regex="stderr") == b"on-stderr\n"
        async with asyncio.timeout(5):
            assert await read_logs(c, bad, follow=True) == b"failing\n"
            assert (await c.wait(ok)).state == AppState.SUCCEEDED
            assert [s.state async for s in c.watch(bad)] == [AppState.FAILED]
        # The request id is remembered too: the same request is the same job.
        same = sh_app("echo before-restart; echo on-stderr >&2", name="keep")
        assert await c.run(same, cwd=str(workdir), request_id=rid) == ok
        assert len(await c.list()) == 2
        # New jobs run, and old ones can be deleted.
        new = await c.run(sh_app("echo after-restart"), cwd=str(workdir))
        assert (await c.wait(new, timeout=30)).state == AppState.SUCCEEDED
        assert await read_logs(c, new) == b"after-restart\n"
        await c.delete(bad)
        assert [a.app_handle for a in await c.list()] == [new, ok]

    proc = daemon.txctl("logs", ok, check=0)
    assert proc.stdout == "before-restart\non-stderr\n"
    proc = daemon.txctl("status", "--json", ok, check=0)
    assert json.loads(proc.stdout)["state"] == "SUCCEEDED"
    assert daemon.txctl("status", bad, check=2).returncode == 2
    assert "app: keep" in daemon.txctl("describe", ok, check=0).stdout


# -- signals ------------------------------------------------------------------------------------


async def test_sigterm_ends_every_replica_process(daemon: Any, workdir: Path) -> None:
    """Grandchildren included, and a process group that ignores SIGTERM gets SIGKILL."""
    tree_app = AppDef(
        name="tree",
        roles=[
            Role(
                name="t",
                entrypoint="sh",
                args=["-c", "sh -c 'sleep 300 & echo started; wait' & wait"],
            )
        ],
    )
    stubborn_app = sh_app("trap '' TERM; sleep 300 & echo started; wait", name="stubborn")
    async with daemon.client() as c:
        tree = await c.run(tree_app, cwd=str(workdir))
        stubborn = await c.run(stubborn_app, cwd=str(workdir))
        await _wait_for_output(c, tree, b"started")
        await _wait_for_output(c, stubborn, b"started")
        pids = descendants(daemon.pid)
        # sh -> sh -> sleep, and sh -> sleep
        assert len(pids) >= 5, _describe_procs(pids)
        waiter = asyncio.ensure_future(c.wait(tree, timeout=30))
        await c.status(tree)  # a round trip: the Wait call has reached the daemon
        with PidWatch(pids) as watch:
            rc = await asyncio.to_thread(daemon.stop, signal.SIGTERM)
            assert rc == 0, daemon.log()
            left = watch.wait(2.0)
        assert left == [], "still running after txd exited:\n" + _describe_procs(left)
        assert group_members(daemon.pid) == []
        # Shutdown records the final states before it stops the server, which lets calls in
        # flight finish: the waiter gets its answer.
        in_flight = await asyncio.wait_for(waiter, 10)
        assert (in_flight.state, in_flight.msg) == (AppState.CANCELLED, "cancelled by txd shutdown")

    daemon.restart()
    async with daemon.client() as c:
        for handle in (tree, stubborn):
            status = await c.status(handle)
            assert (status.state, status.msg) == (AppState.CANCELLED, "cancelled by txd shutdown")
            replicas = [r.state for role in status.roles for r in role.replicas]
            assert replicas == [AppState.CANCELLED], status
        assert await read_logs(c, tree) == b"started\n"


async def test_sigint_stops_like_sigterm(daemon: Any, workdir: Path) -> None:
    marker = _marker()
    async with daemon.client() as c:
        handle = await c.run(
            AppDef(name="int", roles=[Role(name="s", entrypoint="sleep", args=[marker])]),
            cwd=str(workdir),
        )
        pids = pids_with_marker(marker)
        assert pids
    with PidWatch(pids) as watch:
        assert daemon.stop(signal.SIGINT) == 0
        assert watch.wait(2.0) == []
    daemon.restart()
    async with daemon.client() as c:
        status = await c.status(handle)
        assert status.state == AppState.CANCELLED
        assert "shutdown" in status.msg


async def test_sigterm_idle_daemon(daemon: Any) -> None:
    assert daemon.stop() == 0
    assert "Traceback" not in daemon.log()


# -- crash recovery -------------------------------------------------------------------------------


async def test_crash_recovery_ends_leftover_replicas(daemon: Any, workdir: Path) -> None:
    marker = _marker()
    async with daemon.client() as c:
        done = await c.run(sh_app("echo finished-before", name="done"), cwd=str(workdir))
        assert (await c.wait(done, timeout=30)).state == AppState.SUCCEEDED
        live = await c.run(
            AppDef(
                name="leftover",
                roles=[
                    Role(
                        name="l",
                        entrypoint="sh",
                        num_replicas=2,
                        args=["-c", f"sleep {marker} & echo started; wait"],
                    )
                ],
            ),
            cwd=str(workdir),
        )
        await _wait_for_output(c, live, b"started", count=2)
    pids = descendants(daemon.pid)
    assert len(pids) >= 4, _describe_procs(pids)  # 2 x (sh -> sleep)
    ticks = {p: proc_stat(p)[3] for p in pids}  # type: ignore[index]

    assert daemon.kill() == -signal.SIGKILL
    survivors = [p for p in pids if is_running(p, ticks[p])]
    # Both replicas (their `sh`, still in `wait`) outlive the daemon: recovery has to stop them.
    replica_pids = [r["pid"] for r in job_replicas(daemon.state_dir, live)]
    assert len(replica_pids) == 2 and set(replica_pids) <= set(survivors), (
        replica_pids,
        _describe_procs(survivors),
    )
    with PidWatch(survivors) as watch:
        daemon.restart()
        # Recovery happens before the daemon reports ready.
        left = watch.wait(2.0)
    assert left == [], "leftover replicas still run:\n" + _describe_procs(left)

    async with daemon.client() as c:
        status = await c.status(live)
        assert status.state == AppState.CANCELLED, status
        # Each replica's group: its sh and the sleep it started.
        assert status.msg == (
            "txd restarted after a crash; stopped 4 process(es) of replica(s) l/0, l/1 "
            "still running from before"
        ), status
        assert [(r.role, [x.state for x in r.replicas]) for r in status.roles] == [
            ("l", [AppState.CANCELLED, AppState.CANCELLED])
        ], status
        async with asyncio.timeout(5):
            assert (await c.wait(live)).state == status.state
            assert [s.state async for s in c.watch(live)] == [status.state]
        assert (await read_logs(c, live)).count(b"started\n") == 2
        assert (await c.status(done)).state == AppState.SUCCEEDED
        assert await read_logs(c, done) == b"finished-before\n"
        # And the daemon works as before.
        new = await c.run(sh_app("echo recovered"), cwd=str(workdir))
        assert (await c.wait(new, timeout=30)).state == AppState.SUCCEEDED
    # A clean restart after the recovery changes nothing.
    assert daemon.stop() == 0
    daemon.restart()
    async with daemon.client() as c:
        assert (await c.status(live)) == status


async def test_crash_recovery_kills_a_leftover_that_ignores_sigterm(
    daemon: Any, workdir: Path
) -> None:
    """SIGTERM ignored, so SIGKILL after the grace period: the restart used to die there
    (its wait for the exits, cancelled by the first timeout, ended at once the second time)."""
    marker = _marker()
    async with daemon.client() as c:
        live = await c.run(
            sh_app(f"trap '' TERM; echo started; exec sleep {marker}", name="stubborn"),
            cwd=str(workdir),
        )
        await _wait_for_output(c, live, b"started", count=1)
    [replica] = job_replicas(daemon.state_dir, live)
    assert daemon.kill() == -signal.SIGKILL
    with PidWatch([replica["pid"]]) as watch:
        daemon.restart()
        assert watch.wait(2.0) == []
    async with daemon.client() as c:
        status = await c.status(live)
    assert status.state == AppState.CANCELLED, status


async def test_crash_recovery_ends_a_group_whose_leader_died(daemon: Any, workdir: Path) -> None:
    """Defect 5 of issue 7: the replica's leader died while no daemon ran, but a child of its
    process group runs on. Recovery ends the whole group and says so."""
    marker = _marker()
    async with daemon.client() as c:
        handle = await c.run(
            AppDef(
                name="orphans",
                roles=[
                    Role(name="l", entrypoint="sh", args=["-c", f"sleep {marker} & echo up; wait"])
                ],
            ),
            cwd=str(workdir),
        )
        await _wait_for_output(c, handle, b"up", count=1)
    # The shell (the group's leader, pid == pgid) and its sleep both name the marker.
    [child] = [p for p in pids_with_marker(marker) if proc_stat(p)[2] != p]  # type: ignore[index]
    leader = proc_stat(child)[2]  # type: ignore[index]
    assert daemon.kill() == -signal.SIGKILL
    with PidWatch([leader]) as watch:
        os.kill(leader, signal.SIGKILL)
        assert watch.wait(5) == []
    assert is_running(child, proc_stat(child)[3])  # type: ignore[index]
    with PidWatch([child]) as watch:
        daemon.restart()
        assert watch.wait(2.0) == [], "the group's surviving member still runs"
    async with daemon.client() as c:
        status = await c.status(handle)
    assert status.state == AppState.CANCELLED
    assert status.msg == (
        "txd restarted after a crash; stopped 1 process(es) of replica(s) l/0 "
        "still running from before"
    )


async def test_crash_recovery_never_kills_a_reused_pid(daemon: Any, workdir: Path) -> None:
    marker = _marker()
    async with daemon.client() as c:
        handle = await c.run(
            AppDef(name="reuse", roles=[Role(name="s", entrypoint="sleep", args=[marker])]),
            cwd=str(workdir),
        )
        status = await c.status(handle)
    [pid] = pids_with_marker(marker)
    assert status.state == AppState.RUNNING
    assert daemon.kill() == -signal.SIGKILL
    # While no daemon runs, the replica ends and its pid goes to an unrelated process.
    with PidWatch([pid]) as watch:
        os.killpg(pid, signal.SIGKILL)
        assert watch.wait(5) == []
    decoy = await asyncio.to_thread(subprocess.Popen, ["sleep", "300"], start_new_session=True)
    try:
        db = daemon.state_dir / "jobs.db"
        with contextlib.closing(sqlite3.connect(db)) as conn:
            [(native,)] = conn.execute("SELECT native FROM jobs WHERE handle = ?", (handle,))
        data = json.loads(native)
        assert data["replicas"][0]["pid"] == pid
        data["replicas"][0]["pid"] = decoy.pid  # same pid, other start time
        # Start times have a 10 ms tick: the decoy may share the replica's. A reused pid always
        # starts later than the process recorded, so model exactly that.
        decoy_ticks = proc_stat(decoy.pid)[3]
        if data["replicas"][0]["start_ticks"] >= decoy_ticks:
            data["replicas"][0]["start_ticks"] = decoy_ticks - 1
        with contextlib.closing(sqlite3.connect(db)) as conn, conn:
            conn.execute("UPDATE jobs SET native = ? WHERE handle = ?", (json.dumps(data), handle))
        with PidWatch([decoy.pid]) as watch:
            daemon.restart()
            assert watch.running() == [decoy.pid], "the daemon killed a process it never ran"
        assert decoy.poll() is None
        async with daemon.client() as c:
            after = await c.status(handle)
            # Nothing it ran was left alive, so nothing was stopped: the outcome is unknown.
            assert after.state == AppState.FAILED, after
            assert after.msg == (
                "txd stopped unexpectedly while the job ran; its outcome is unknown"
            ), after
    finally:
        decoy.kill()
        decoy.wait()


# -- one daemon per socket -------------------------------------------------------------------------


async def test_second_daemon_refuses_and_leaves_jobs_alone(
    daemon: Any, workdir: Path, tmp_path: Path
) -> None:
    marker = _marker()
    async with daemon.client() as c:
        handle = await c.run(
            AppDef(name="first", roles=[Role(name="s", entrypoint="sleep", args=[marker])]),
            cwd=str(workdir),
        )
    pids = pids_with_marker(marker)
    assert pids
    for state_dir in (tmp_path / "other-state", daemon.state_dir):
        argv = [
            sys.executable,
            "-m",
            "txd.daemon",
            "--socket",
            str(daemon.socket),
            "--state-dir",
            str(state_dir),
        ]
        proc = await asyncio.to_thread(
            subprocess.run,
            argv,
            capture_output=True,
            text=True,
            timeout=30,
            cwd=workdir,
            env=daemon.env,
        )
        assert proc.returncode == 1, proc.stderr
        assert "already" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert all(is_running(p) for p in pids), (
            f"starting a second daemon with state dir {state_dir} killed the first one's job"
        )
    async with daemon.client() as c:
        status = await c.status(handle)
        assert status.state == AppState.RUNNING, status
        await c.cancel(handle)
        assert (await c.wait(handle, timeout=20)).state == AppState.CANCELLED


async def test_shutdown_gives_replicas_the_daemon_grace_period() -> None:
    """`txd --grace N`: a replica that cleans up on SIGTERM gets N seconds to do it (longer
    than the 2 s used when a single job is cancelled)."""
    root = short_tmpdir()
    d = Daemon(root, grace=8.0).start()
    try:
        cleanup = "trap 'echo term; sleep 3; echo cleaned; exit 0' TERM; echo started; "
        app = sh_app(cleanup + "while :; do sleep 0.1; done", name="graceful")
        async with d.client() as c:
            handle = await c.run(app, cwd=str(root))
            await _wait_for_output(c, handle, b"started")
        assert d.stop() == 0
        d.restart()
        async with d.client() as c:
            status = await c.status(handle)
            assert status.state == AppState.CANCELLED, status
            logs = await read_logs(c, handle)
            # (sh may also report its killed `sleep 0.1` child in between)
            assert logs.startswith(b"started\n") and logs.endswith(b"term\ncleaned\n"), logs
    finally:
        d.close()
        remove_tree(root)
