"""SIGKILL to the daemon while 50 clients submit: nothing submitted is lost, no request id runs
twice, no process is left behind.

The client library does not retry (a Run it sent may have started a job before the daemon
died), so these clients do what a user does: on UNAVAILABLE they send the same Run, with the
same request id, once the daemon answers again. Each job records every time it runs (a file
named by its request id and app id), so a Run that started a job the registry never learnt of
shows as a second run, even if the registry holds one job per request id.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import pytest
from txd.client import DeadlineExceededError, UnavailableError
from txd.v1 import AppDef, AppState, Role
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub
from txd_testing import PidWatch, all_pids

CLIENTS = 50
JOBS_PER_CLIENT = 4  # 200 jobs
ROUNDS = 4
# A kill comes after this many more Runs have returned (drawn per round): at a random point
# of the burst, with other Runs in flight.
KILL_AFTER = (5, 40)
TEST_TIMEOUT = 120.0
MARK_VAR = "TXD_CRASH_BURST_MARK"
# What a job the daemon died under ends as, after the restart (local_cwd recover()).
CRASH_MSGS = ("txd restarted after a crash", "txd stopped unexpectedly while")


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries our mark: the jobs' shells and children."""
    needle = f"{MARK_VAR}={mark}".encode()
    out = []
    for pid in all_pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if needle in env:
            out.append(pid)
    return out


async def _listed(socket: Path) -> set[str]:
    """Every handle the daemon lists, asked on a connection of its own: gRPC shares one
    connection per address between a process's channels, and the clients' one may still be
    in its reconnect backoff from the kill (failing at once with UNAVAILABLE)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(f"unix:{socket}", options=options) as channel:
        stub = RunnerStub(channel)
        out, token = set(), ""
        while True:
            page = await stub.List(
                pb.ListRequest(page_size=1000, page_token=token), timeout=20, wait_for_ready=True
            )
            out |= {a.app_handle for a in page.apps}
            if not (token := page.next_page_token):
                return out


class Burst:
    def __init__(self, d: Any, runs: Path, mark: str, seed: int) -> None:
        self.d = d
        self.runs = runs
        self.mark = mark
        self.rng = random.Random(seed)
        self.up = asyncio.Event()
        self.up.set()
        self.went_down = asyncio.Event()
        self.returned = 0
        self.progress = asyncio.Event()
        self.handles: dict[str, str] = {}  # request id -> handle
        self.retries = 0
        self.missing: set[str] = set()  # handles returned, not listed after a restart

    def app(self, rid: str) -> AppDef:
        # ${app_id} is txd's macro: every run of the job leaves a file of its own.
        script = f"touch {self.runs}/{rid}.${{app_id}}; sleep 0.2"
        role = Role(name="r", entrypoint="sh", args=["-c", script], env={MARK_VAR: self.mark})
        return AppDef(name=rid, roles=[role])

    async def client(self, k: int) -> None:
        for j in range(JOBS_PER_CLIENT):
            rid = f"cb-{self.mark}-{k}-{j}"
            while True:
                await self.up.wait()
                try:
                    # A connection of its own per try: the process-wide one may still be in
                    # gRPC's reconnect backoff from a kill, failing at once with UNAVAILABLE
                    # while the daemon is up, and no kill would come to wake this client.
                    async with self.d.client(timeout=20, own_connection=True) as c:
                        self.handles[rid] = await c.run(self.app(rid), request_id=rid, cwd="/")
                    break
                except UnavailableError:
                    self.retries += 1
                    # The daemon is down or going: retry once the killer has it back up.
                    await self.progress_or_restart()
            self.returned += 1
            self.progress.set()

    async def progress_or_restart(self) -> None:
        """Waits until the daemon was restarted (the killer clears `up` first)."""
        if self.up.is_set():
            # Refused before the killer noticed: wait for it to take the daemon down and up.
            await self.went_down.wait()
        await self.up.wait()

    async def killer(self) -> list[int]:
        kills = []
        for _ in range(ROUNDS):
            self.went_down = asyncio.Event()
            target = self.returned + self.rng.randint(*KILL_AFTER)
            while self.returned < target and self.returned < CLIENTS * JOBS_PER_CLIENT:
                self.progress.clear()
                await self.progress.wait()
            self.up.clear()
            self.d.proc.kill()  # SIGKILL
            await asyncio.to_thread(self.d.proc.wait, 30)
            kills.append(self.returned)
            self.went_down.set()
            returned = set(self.handles.values())
            await asyncio.to_thread(self.d.restart)
            # Every Run that returned a handle before the kill is in the registry now.
            self.missing |= returned - await _listed(self.d.socket)
            self.up.set()
        return kills


async def test_sigkill_during_bursts_loses_nothing_and_runs_nothing_twice(
    daemon: Any, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    mark = os.urandom(4).hex()
    seed = random.randrange(2**32)
    burst = Burst(daemon, runs, mark, seed)
    async with asyncio.timeout(TEST_TIMEOUT), asyncio.TaskGroup() as tg:  # one fails: all end
        killer = tg.create_task(burst.killer())
        for k in range(CLIENTS):
            tg.create_task(burst.client(k))
    kills = killer.result()

    total = CLIENTS * JOBS_PER_CLIENT
    assert len(burst.handles) == total, f"seed {seed}"
    assert not burst.missing, f"seed {seed}: not in the registry after a restart"
    async with daemon.client() as c:
        async with asyncio.timeout(60):
            finals = {rid: await c.wait(h) for rid, h in burst.handles.items()}
        listed = Counter(a.name for a in await c.list() if a.name.startswith(f"cb-{mark}-"))
    # Every Run that returned a handle is in the registry, ended rightly.
    for rid, status in finals.items():
        assert status.app_handle == burst.handles[rid]
        if status.state != AppState.SUCCEEDED:
            assert status.state in (AppState.CANCELLED, AppState.FAILED), (rid, status)
            assert status.msg.startswith(CRASH_MSGS), (rid, status.msg)
    # One job per request id in the registry, and no job ran twice (or ran unrecorded).
    expected = Counter(list(finals))
    assert listed == expected, f"seed {seed}: {listed - expected}, missing {expected - listed}"
    ran = Counter(p.name.split(".", 1)[0] for p in runs.iterdir())
    twice = {rid: n for rid, n in ran.items() if n > 1}
    assert not twice, f"seed {seed}, kills after {kills} runs: ran more than once: {twice}"
    unknown = set(ran) - set(finals)
    assert not unknown, unknown
    # Every job has ended, so no process of theirs may live.
    with PidWatch(_marked(mark)) as left:
        assert left.wait(10) == [], f"left behind: {left.running()}"
    print(
        f"crash bursts: {total} jobs, kills after {kills} returned Runs, {burst.retries} "
        f"retried Runs, {sum(s.state != AppState.SUCCEEDED for s in finals.values())} jobs "
        f"ended by a crash, {sum(ran.values())} runs"
    )


async def test_run_abandoned_by_its_client_mid_spawn_is_recorded_and_followed(
    daemon: Any,
) -> None:
    """A client whose deadline passes while local_cwd spawns its replicas gives up; the job it
    asked for must not be left half started, unrecorded or unfollowed: it runs, is recorded and
    followed to its end, and a retry with the request id finds it, not a second job."""
    mark = os.urandom(4).hex()
    name = f"abandoned-{mark}"
    replicas = 30
    role = Role(name="r", entrypoint="sh", args=["-c", "sleep 0.5"], env={MARK_VAR: mark})
    role.num_replicas = replicas
    app = AppDef(name=name, roles=[role])
    rid = f"abandoned-{mark}"
    async with asyncio.timeout(TEST_TIMEOUT):
        async with daemon.client(timeout=0.05) as hasty:
            with pytest.raises(DeadlineExceededError):  # 30 spawns take longer than 50 ms
                await hasty.run(app, request_id=rid, cwd="/")
        async with daemon.client() as c:
            handle = await c.run(app, request_id=rid, cwd="/")  # the retry
            final = await c.wait(handle)
            listed = [a for a in await c.list() if a.name == name]
    assert final.state == AppState.SUCCEEDED, final
    assert [len(r.replicas) for r in final.roles] == [replicas]
    assert [a.app_handle for a in listed] == [handle]
    with PidWatch(_marked(mark)) as left:
        assert left.wait(10) == [], f"left behind: {left.running()}"
