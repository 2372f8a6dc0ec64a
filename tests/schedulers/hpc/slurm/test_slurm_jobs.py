"""Jobs on a real Slurm cluster through a real txd, on this host and through an SSH login node.

Jobs that must be caught while running wait for a release file the test creates (jobs run on
the cluster's nodes, which share this filesystem), so no test depends on timing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from txd.client import TxdError
from txd.v1 import AppDef, AppState, Role
from txd_testing import read_logs, read_logs_by_replica, unique

STATE = AppState.Name


def role(name: str, script: str, replicas: int = 1, **kw: Any) -> Role:
    return Role(name=name, entrypoint="bash", args=["-c", script], num_replicas=replicas, **kw)


def held(release: Path, before: str = "", after: str = "") -> str:
    """A script that runs until `release` exists."""
    return f"{before}\nwhile [ ! -e {release} ]; do sleep 0.05; done\n{after}"


async def until_state(client: Any, handle: str, state: int) -> Any:
    async for status in client.watch(handle):
        if status.state == state:
            return status
        assert status.state not in (AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED), status
    raise AssertionError(f"{handle} ended without reaching {STATE(state)}")


async def test_two_roles_three_replicas_succeed(
    slurm_client: Any, target: Any, jobdir: Path
) -> None:
    echo = 'echo "$0 replica $1 on $SLURMD_NODENAME of $SLURM_HET_SIZE"'
    app = AppDef(
        name="two",
        roles=[
            Role(
                name="trainer",
                entrypoint="bash",
                args=["-c", echo, "trainer", "${replica_id}"],
                num_replicas=2,
            ),
            Role(name="ps", entrypoint="bash", args=["-c", echo, "ps", "${replica_id}"]),
        ],
    )
    handle = await slurm_client.run(app, "slurm", target(jobdir))
    status = await slurm_client.wait(handle, timeout=60)
    assert STATE(status.state) == "SUCCEEDED", status
    replicas = {(r.role, r.id): r for rs in status.roles for r in rs.replicas}
    assert sorted(replicas) == [("ps", 0), ("trainer", 0), ("trainer", 1)]
    assert all(r.exit_code == 0 and r.hostname.startswith("n") for r in replicas.values())
    logs = await read_logs_by_replica(slurm_client, handle)
    assert logs["trainer/1"].startswith(b"trainer replica 1 on n")
    assert logs["trainer/1"].endswith(b" of 3\n")
    assert logs["ps/0"].startswith(b"ps replica 0 on n")


async def test_exit_code_gives_failed(slurm_client: Any, target: Any, jobdir: Path) -> None:
    app = AppDef(name="fails", roles=[role("main", "echo bad >&2; exit 3")])
    handle = await slurm_client.run(app, "slurm", target(jobdir))
    status = await slurm_client.wait(handle, timeout=60)
    assert STATE(status.state) == "FAILED"
    assert status.roles[0].replicas[0].exit_code == 3
    assert "exit code 3" in status.msg
    assert await read_logs(slurm_client, handle, streams="stderr") == b"bad\n"
    assert await read_logs(slurm_client, handle, streams="stdout") == b""


async def test_cancel_gives_cancelled(slurm_client: Any, target: Any, jobdir: Path) -> None:
    app = AppDef(name="long", roles=[role("main", "echo started; sleep 600")])
    handle = await slurm_client.run(app, "slurm", target(jobdir))
    await until_state(slurm_client, handle, AppState.RUNNING)
    await slurm_client.cancel(handle)  # returns at once: Slurm signals the job's processes
    status = await slurm_client.wait(handle, timeout=30)
    assert STATE(status.state) == "CANCELLED", status
    # What code a cancelled job ends with is Slurm's race (SIGTERM 143, SIGKILL 137, or srun's
    # own 1 when its step went first); that one is reported is what txd owns.
    assert status.roles[0].replicas[0].HasField("exit_code"), status


async def test_logs_of_one_replica_stream_while_running(
    slurm_client: Any, target: Any, jobdir: Path
) -> None:
    release = jobdir / "release"
    app = AppDef(
        name="stream",
        roles=[
            role("first", "echo first"),
            role(
                "second",
                held(release, 'echo "before $0 $1"', 'echo "after $0 $1"; echo err >&2'),
                replicas=2,
            ),
        ],
    )
    app.roles[1].args.extend(["second", "${replica_id}"])
    handle = await slurm_client.run(app, "slurm", target(jobdir))
    got = b""
    async for chunk in slurm_client.logs(handle, "second", 1, follow=True, streams="stdout"):
        assert chunk.role == "second" and chunk.replica == 1
        got += chunk.data
        if got == b"before second 1\n":
            # The job is held by the release file, so the bytes were streamed while it ran;
            # the status cache sees RUNNING at its next poll (the log can be faster).
            async with asyncio.timeout(10):
                async for status in slurm_client.watch(handle):
                    if STATE(status.state) == "RUNNING":
                        break
            release.touch()
    assert got == b"before second 1\nafter second 1\n"
    assert STATE((await slurm_client.wait(handle, timeout=30)).state) == "SUCCEEDED"
    combined = await read_logs(slurm_client, handle, role="second", replica=1, regex="after|err")
    assert sorted(combined.splitlines()) == [b"after second 1", b"err"]


PRINT_ENV = 'printf "%s|%s|%s\\n" "$TRICKY" "$1" "$TORCHX_JOB_ID"'


async def test_env_values_and_macros_survive_quoting(
    slurm_client: Any, target: Any, jobdir: Path
) -> None:
    tricky = """it's "quoted", has spaces, $HOME, a,b=c and a \\ backslash"""
    app = AppDef(
        name="env",
        roles=[
            Role(
                name="main",
                entrypoint="bash",
                args=["-c", PRINT_ENV, "-", "${app_id}"],
                env={"TRICKY": tricky},
            )
        ],
    )
    handle = await slurm_client.run(app, "slurm", target(jobdir))
    assert STATE((await slurm_client.wait(handle, timeout=60)).state) == "SUCCEEDED"
    app_id = handle.rpartition("/")[2]
    expected = f"{tricky}|{app_id}|{handle}\n".encode()
    assert await read_logs(slurm_client, handle) == expected


async def test_daemon_restart_keeps_tracking(own_slurm_daemon: Any, jobdir: Path) -> None:
    release = jobdir / "release"
    app = AppDef(name="survivor", roles=[role("main", held(release, "echo up", "echo done"))])
    async with own_slurm_daemon.client() as c:
        handle = await c.run(app, "slurm", {"job_dir": str(jobdir)})
        await until_state(c, handle, AppState.RUNNING)
    own_slurm_daemon.stop()
    own_slurm_daemon.restart()
    async with own_slurm_daemon.client() as c:
        assert STATE((await c.status(handle)).state) == "RUNNING"
        release.touch()
        status = await c.wait(handle, timeout=60)
        assert STATE(status.state) == "SUCCEEDED"
        assert await read_logs(c, handle) == b"up\ndone\n"


async def test_final_state_outlives_min_job_age(
    own_slurm_daemon: Any, slurm_cluster: Any, jobdir: Path
) -> None:
    """Slurm forgets finished jobs after MinJobAge. One job ends while txd watches; another
    ends while txd is down and is forgotten before it comes back: both keep their end."""
    release = jobdir / "release"
    seen = AppDef(name="seen", roles=[role("main", "exit 4")])
    unseen = AppDef(name="unseen", roles=[role("main", held(release, "", "exit 0"))])
    async with own_slurm_daemon.client() as c:
        seen_h = await c.run(seen, "slurm", {"job_dir": str(jobdir)})
        unseen_h = await c.run(unseen, "slurm", {"job_dir": str(jobdir)})
        assert STATE((await c.wait(seen_h, timeout=60)).state) == "FAILED"
        await until_state(c, unseen_h, AppState.RUNNING)
    own_slurm_daemon.stop()
    release.touch()
    ids = {h.rpartition("/")[2] for h in (seen_h, unseen_h)}
    for _ in range(600):  # slurmctld purges every few seconds; 60 s is far beyond MinJobAge
        if not ids & slurm_cluster.squeue_ids():
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail(f"Slurm still knows {ids & slurm_cluster.squeue_ids()}")
    own_slurm_daemon.restart()
    async with own_slurm_daemon.client() as c:
        status = await c.status(seen_h)
        assert STATE(status.state) == "FAILED" and "exit code 4" in status.msg
        status = await c.wait(unseen_h, timeout=30)
        assert STATE(status.state) == "SUCCEEDED", status
        assert "ended while txd was away" in status.msg


async def test_one_squeue_per_interval_however_many_watch(
    slurm_daemon: Any, slurm_client: Any, jobdir: Path, poll_interval: float
) -> None:
    release = jobdir / "release"
    apps = [AppDef(name=f"w{i}", roles=[role("main", held(release))]) for i in range(10)]
    handles = [await slurm_client.run(a, "slurm", {"job_dir": str(jobdir)}) for a in apps]
    for h in handles:
        await until_state(slurm_client, h, AppState.RUNNING)

    async def squeue_calls() -> int:
        infos = (await slurm_client.schedulers()).schedulers
        return next(i for i in infos if i.name == "slurm").backend_calls["squeue"]

    clients = [slurm_daemon.client() for _ in range(20)]
    seen: list[list[int]] = [[] for _ in clients]
    watching = [asyncio.Event() for _ in clients]

    async def watch(k: int, c: Any) -> None:
        async with c:
            async for status in c.watch(handles[k % len(handles)]):
                seen[k].append(status.state)
                watching[k].set()

    loop = asyncio.get_running_loop()
    watchers = [loop.create_task(watch(k, c)) for k, c in enumerate(clients)]
    # Counted once every watch is open: what opening them costs is not what is counted.
    await asyncio.wait_for(asyncio.gather(*(w.wait() for w in watching)), 60)
    before, t0 = await squeue_calls(), loop.time()
    await asyncio.sleep(3)  # the span over which calls are counted, not a wait for an event
    calls, elapsed = await squeue_calls() - before, loop.time() - t0
    release.touch()
    await asyncio.wait_for(asyncio.gather(*watchers), 60)
    # One poll per interval, plus the one the last submission may have pulled forward (a
    # submission cuts the feed's wait short, to a fifth of the interval, and its poll can fall
    # inside the count now that submissions return sooner).
    assert calls <= elapsed / poll_interval + 2, (calls, elapsed)
    assert all(s[-1] == AppState.SUCCEEDED for s in seen)


async def test_retries_requeue_the_job(slurm_client: Any, slurm_cluster: Any, jobdir: Path) -> None:
    """max_retries=1: replica 0 fails on the first attempt, Slurm requeues the job, and both
    replicas succeed on the second: the status is the second attempt's, exit codes included
    (Slurm's DerivedEC still holds the first attempt's 5)."""
    marker = jobdir / "attempted"
    script = (
        f'if [ "$1" = 1 ]; then exit 0; elif [ -e {marker} ]; then echo second; '
        f"else touch {marker}; exit 5; fi"
    )
    app = AppDef(name="retry", roles=[role("main", script, replicas=2, max_retries=1)])
    app.roles[0].args.extend(["main", "${replica_id}"])
    handle = await slurm_client.run(app, "slurm", {"job_dir": str(jobdir)})
    async for status in slurm_client.watch(handle):
        assert status.state not in (AppState.FAILED, AppState.SUCCEEDED), status
        if status.num_restarts == 1 and status.state == AppState.PENDING:
            break
    # Slurm holds a requeued job until cred_expire + 1 s have passed (Reason=BeginTime; the
    # test cluster sets cred_expire=10, not 120): starting it earlier fails it with "Job
    # credential revoked". Once eligible, a requeued hetjob still waits for an operator's
    # nudge (StartTime=now), which the test gives.
    job_id = handle.rpartition("/")[2]
    async with asyncio.timeout(30):
        while True:
            proc = await asyncio.create_subprocess_exec(
                "squeue", "-h", "-j", job_id, "-o", "%T %r", env=slurm_cluster.env(),
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, _ = await proc.communicate()
            rows = {tuple(line.split()) for line in out.decode().splitlines()}
            if rows and all(r[0] == "PENDING" and r[1] != "BeginTime" for r in rows):
                break
            await asyncio.sleep(0.2)
    proc = await asyncio.create_subprocess_exec(
        "scontrol", "update", f"JobId={job_id}", "StartTime=now", env=slurm_cluster.env()
    )
    assert await proc.wait() == 0
    status = await slurm_client.wait(handle, timeout=60)
    outputs = {p.name: p.read_text(errors="replace") for p in jobdir.glob("slurm-*")}
    assert STATE(status.state) == "SUCCEEDED", (status, outputs)
    assert status.num_restarts == 1
    replicas = [(r.id, STATE(r.state), r.exit_code) for rs in status.roles for r in rs.replicas]
    assert replicas == [(0, "SUCCEEDED", 0), (1, "SUCCEEDED", 0)], status
    logs = await read_logs_by_replica(slurm_client, handle)
    assert logs["main/0"] == b"second\n"


async def test_bad_input_and_unreachable_backends(slurm_client: Any, jobdir: Path) -> None:
    app = AppDef(name=unique("x"), roles=[role("main", "true")])
    with pytest.raises(TxdError) as e:
        await slurm_client.run(app, "slurm", {"time": "soon"})
    assert e.value.code == "INVALID_ARGUMENT" and "cfg.time" in str(e.value)
    with pytest.raises(TxdError) as e:
        await slurm_client.run(app, "slurm", {"partition": "nope", "job_dir": str(jobdir)})
    assert e.value.code == "INVALID_ARGUMENT" and "cfg.partition: no partition nope" in str(e.value)
    with pytest.raises(TxdError) as e:
        await slurm_client.run(app, "slurm", env={"PATH": "/nonexistent"})
    assert e.value.code == "UNAVAILABLE"
    assert "sbatch: command not found on this host" in str(e.value)
    closed = {"ssh_host": "127.0.0.1", "ssh_port": "1", "job_dir": str(jobdir)}
    with pytest.raises(TxdError) as e:
        await slurm_client.run(app, "slurm", closed)
    assert e.value.code == "UNAVAILABLE"
    assert "cannot reach login node 127.0.0.1:1" in str(e.value)
    # None of the refused submissions left a job behind (the session's other tests may have).
    assert [a for a in await slurm_client.list("slurm") if a.name == app.name] == []


async def test_list_from_the_backend(slurm_client: Any, jobdir: Path) -> None:
    release = jobdir / "release"
    app = AppDef(name="listed", roles=[role("main", held(release))])
    handle = await slurm_client.run(app, "slurm", {"job_dir": str(jobdir)})
    try:
        apps = await slurm_client.list("slurm", backend=True)
        assert handle in [a.app_handle for a in apps]
    finally:
        release.touch()
    assert STATE((await slurm_client.wait(handle, timeout=60)).state) == "SUCCEEDED"
