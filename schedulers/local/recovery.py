"""After a crash: finding and stopping the replicas a dead daemon left running on this host.

local_cwd's replicas cannot outlive the daemon. A daemon that died (SIGKILL, a power-cut
container) leaves them running; the next one is handed each such job (`Scheduler.recover`) and
stops what remains of it, reading /proc: a replica whose pid was recorded is its process group,
told from a reused pid by its leader's start time; one started (or about to be) before its pid
was recorded is found by REPLICA_ENV in its processes' environment. Their exits are awaited
through pidfds, since they are not the new daemon's children.
"""

from __future__ import annotations

import asyncio
import os
import signal

from txd.schedulers.api import Job, is_terminal
from txd.v1 import AppState
from txd.v1.app_pb2 import AppStatus

# Set in every replica's environment to its log path (unique to it): a daemon that died before
# it recorded a replica's pid leaves the next one this way to find the replica's processes.
REPLICA_ENV = "TXD_LOCAL_REPLICA"


def start_ticks(pid: int) -> int | None:
    """The process start time (clock ticks since boot) from /proc, to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 22; the command name (field 2) may contain spaces, so count from its closing paren.
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def killpg(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


async def settle_after_crash(job: Job, status: AppStatus, grace: float) -> AppStatus:
    """Stops every recorded process group that still has a member (SIGKILL after `grace`
    seconds), and records why."""
    groups: dict[str, tuple[list[int], list[int]]] = {}  # replica -> (pgids, live members)
    replicas = job.native.get("replicas", [])
    unrecorded = {r["log"] for r in replicas if not r.get("pid")}
    by_env = _processes_by_replica_env(unrecorded) if unrecorded else {}
    for r in replicas:
        name = f"{r['role']}/{r['replica_id']}"
        if not r.get("pid"):  # started, or about to be, when the daemon died
            if found := by_env.get(r["log"]):
                pgids = sorted({pgid for _, pgid in found})
                groups[name] = (pgids, [pid for pid, _ in found])
        elif members := _group_members(r["pid"], r.get("start_ticks")):
            groups[name] = ([r["pid"]], members)
    members = [pid for _, live in groups.values() for pid in live]
    await _stop_strangers([pgid for pgids, _ in groups.values() for pgid in pgids], members, grace)
    out = AppStatus()
    out.CopyFrom(status)
    if groups:
        out.state = AppState.CANCELLED
        out.msg = (
            f"txd restarted after a crash; stopped {len(members)} process(es) of replica(s) "
            f"{', '.join(groups)} still running from before"
        )
    elif unrecorded:
        out.state = AppState.FAILED
        out.msg = "txd stopped unexpectedly while it started the job; it may not have run"
    else:
        out.state = AppState.FAILED
        out.msg = "txd stopped unexpectedly while the job ran; its outcome is unknown"
    for role in out.roles:
        for replica in role.replicas:
            if not is_terminal(replica.state):
                replica.state = out.state
    return out


def _group_members(pgid: int | None, leader_ticks: int | None) -> list[int]:
    """The live processes of the process group a replica led. Its leader may have exited while
    others of the group run on; the group's id cannot be handed to a new process while any
    member lives, so members found are the replica's. Only a leader alive with another start
    time is a stranger: the pid was reused after the whole group had gone."""
    if pgid is None or leader_ticks is None:
        return []
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _pgrp(int(entry.name)) == pgid:
            members.append(int(entry.name))
    if pgid in members and start_ticks(pgid) != leader_ticks:
        return []
    return members


def _processes_by_replica_env(logs: set[str]) -> dict[str, list[tuple[int, int]]]:
    """(pid, process group) of the live processes whose environment sets REPLICA_ENV to one
    of `logs`, by that value: a replica's processes whose pid was never recorded."""
    out: dict[str, list[tuple[int, int]]] = {}
    prefix = f"{REPLICA_ENV}=".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:  # gone, or another user's
            continue
        for var in env:
            if var.startswith(prefix) and (log := os.fsdecode(var[len(prefix) :])) in logs:
                pid = int(entry.name)
                if (pgid := _pgrp(pid)) is not None:
                    out.setdefault(log, []).append((pid, pgid))
                break
    return out


def _pgrp(pid: int) -> int | None:
    """The process group of a live process; None for a zombie (it has ended, only its exit
    status waits to be collected) or a process that is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # Fields 3 and 5; the command name (field 2) may contain spaces: count from its paren.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return None if fields[0] == b"Z" else int(fields[2])


async def _stop_strangers(pgids: list[int], pids: list[int], grace: float) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds, to process groups that are not our
    children; the exits of their members are awaited through pidfds, which the loop watches
    (no polling)."""
    loop = asyncio.get_running_loop()
    waits = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        gone = loop.create_future()
        loop.add_reader(fd, _resolve, gone)
        waits.append((fd, gone))
    for pgid in pgids:
        killpg(pgid, signal.SIGTERM)
    # asyncio.wait, not gather under a timeout: that would cancel the futures at the first
    # timeout, and the wait after SIGKILL would then end at once with CancelledError.
    pending: set[asyncio.Future[None]] = {g for _, g in waits}
    try:
        for sig in (signal.SIGKILL, None):
            if pending:
                _, pending = await asyncio.wait(pending, timeout=grace)
            if not pending:
                return
            if sig is not None:
                for pgid in pgids:
                    killpg(pgid, sig)
    finally:
        for fd, _ in waits:
            loop.remove_reader(fd)
            os.close(fd)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
