"""The events stream (Events RPC) of a real txd over its socket, local_cwd jobs: every status
change in commit order with a durable cursor; replay then live with no gap and no duplicate,
also across a kill -9; snapshot + live; bookmarks; retention (a reader that stops reading:
test_events_load.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from txd.client import (
    InvalidArgumentError,
    OutOfRangeError,
    UnavailableError,
)
from txd.v1 import TERMINAL_STATES, AppState
from txd.v1 import runner_pb2 as pb
from txd_testing import TXCTL, Daemon, Gates, sh_app

Kind = pb.EventsResponse.Kind
LIMIT = 60.0  # seconds any one stream of a test may take


def seq(cursor: str) -> int:
    return int(cursor.rsplit(".", 1)[1])


def stored(d: Daemon, after: int = 0) -> list[tuple[int, str, int]]:
    """(seq, handle, state) of the events the daemon's store holds, in order."""
    with contextlib.closing(sqlite3.connect(d.state_dir / "jobs.db")) as db:
        rows = db.execute(
            "SELECT seq, handle, state FROM events WHERE seq > ? ORDER BY seq", (after,)
        )
        return [(r[0], r[1], r[2]) for r in rows]


def triples(events: list[pb.EventsResponse]) -> list[tuple[int, str, int]]:
    return [
        (seq(e.cursor), e.status.app_handle, e.status.state)
        for e in events
        if e.kind in (Kind.CHANGED, Kind.DELETED)
    ]


async def head(client: Any) -> str:
    """The cursor of now: a snapshot's SYNCED."""
    async for e in client.events(snapshot=True, follow=False, handles=["none://x/none"]):
        if e.kind == Kind.SYNCED:
            return str(e.cursor)
    raise AssertionError("no SYNCED")


async def until_all_ended(stream: AsyncIterator[Any], handles: set[str], got: list[Any]) -> None:
    """Reads `stream` into `got` until every one of `handles` had a terminal event."""
    ended: set[str] = set()
    async with asyncio.timeout(LIMIT):
        async for e in stream:
            got.append(e)
            if e.kind == Kind.CHANGED and e.status.state in TERMINAL_STATES:
                ended.add(e.status.app_handle)
            if handles <= ended:
                return
    raise AssertionError(f"the stream ended before {handles - ended} did")


async def test_replay_from_a_cursor_or_time_is_what_the_store_holds_in_commit_order(
    daemon: Daemon,
) -> None:
    async with daemon.client() as c:
        start = await head(c)
        since = time.time()
        # Many jobs changing at once: events in commit order, each job's states in order.
        handles = await asyncio.gather(*(c.run(sh_app("true")) for _ in range(12)))
        live: list[Any] = []
        await until_all_ended(c.events(since=start), set(handles), live)
        for h in handles:
            await c.wait(h)
        replayed = [e async for e in c.events(since=start, follow=False)]
        by_time = [
            e
            async for e in c.events(
                since=__import__("datetime").datetime.fromtimestamp(since), follow=False
            )
        ]
    assert replayed[-1].kind == Kind.SYNCED
    held = stored(daemon, seq(start))
    assert triples(replayed) == held == triples(by_time)
    assert triples(live) == held[: len(triples(live))]
    seqs = [s for s, _, _ in held]
    assert seqs == sorted(set(seqs))
    for h in handles:
        states = [st for _, hh, st in held if hh == h]
        assert states == sorted(states) and states[-1] == AppState.SUCCEEDED, states


async def test_snapshot_then_live_equals_the_final_list(daemon: Daemon, tmp_path: Path) -> None:
    with Gates(tmp_path) as gates:
        gate = gates.new("end")
        async with daemon.client() as c:
            done = await c.run(sh_app("true"))
            await c.wait(done)
            held = {await c.run(sh_app(gate.wait)) for _ in range(2)}
            stream = c.events(snapshot=True)
            view: dict[str, int] = {}
            async with asyncio.timeout(LIMIT):
                async for e in stream:
                    if e.kind == Kind.SYNCED:
                        break
                    assert e.kind == Kind.SNAPSHOT
                    view[e.status.app_handle] = e.status.state
            assert set(view) == held | {done}
            gate.open()
            gate.open()
            late = await c.run(sh_app("true"))
            got: list[Any] = []
            await until_all_ended(stream, held | {late}, got)
            await stream.aclose()
            for e in got:
                view[e.status.app_handle] = e.status.state
            listed = {s.app_handle: s.state for s in await c.list()}
    assert view == listed


async def test_kill_9_mid_stream_then_resume_has_no_gap_and_no_duplicate(
    daemon: Daemon, tmp_path: Path
) -> None:
    with Gates(tmp_path) as gates:
        gate = gates.new("end")
        async with daemon.client(own_connection=True, reconnect=0) as c:
            start = await head(c)
            handles = {await c.run(sh_app(f"{gate.wait}; true")) for _ in range(3)}
            got: list[Any] = []
            with pytest.raises(UnavailableError):
                async with asyncio.timeout(LIMIT):
                    async for e in c.events(since=start):
                        got.append(e)
                        if len(triples(got)) == 3:  # every job submitted, at least
                            daemon.kill()
        assert daemon.restart()
        async with daemon.client(own_connection=True) as c:
            for _ in handles:
                gate.open()
            rest: list[Any] = []
            await until_all_ended(c.events(since=got[-1].cursor), handles, rest)
            for h in handles:
                await c.wait(h)
    both = triples(got) + triples(rest)
    assert both == stored(daemon, seq(start))[: len(both)]
    assert len({s for s, _, _ in both}) == len(both)


async def test_one_events_iterator_rides_out_a_kill_9_and_restart(
    daemon: Daemon, tmp_path: Path
) -> None:
    # The client's own resume: the same iterator goes on after the daemon was killed and
    # started again, from its last cursor: what it yields equals the store, once each.
    with Gates(tmp_path) as gates:
        gate = gates.new("end")
        async with daemon.client(own_connection=True) as c:
            start = await head(c)
            handles = {await c.run(sh_app(f"{gate.wait}; true")) for _ in range(3)}
            got: list[Any] = []
            killed = False
            async with asyncio.timeout(LIMIT):
                async for e in c.events(since=start):
                    got.append(e)
                    if not killed and len(triples(got)) == 3:  # every job submitted
                        daemon.kill()
                        daemon.restart()
                        killed = True
                        for _ in handles:
                            gate.open()
                    ended = {h for _, h, s in triples(got) if s in TERMINAL_STATES}
                    if ended >= handles:
                        break
    both = triples(got)
    assert killed
    assert both == stored(daemon, seq(start))[: len(both)]
    assert len({s for s, _, _ in both}) == len(both)


async def test_a_cursor_older_than_the_retention_gets_the_oldest_held(
    unstarted_daemon: Daemon,
) -> None:
    d = unstarted_daemon
    d.args = ["--set", "events.retention=0.5"]
    d.start()
    async with d.client() as c:
        start = await head(c)
        await c.wait(await c.run(sh_app("true")))
        deadline = time.monotonic() + LIMIT
        while True:  # until the daemon's retention pass dropped them (about a second)
            try:
                [e async for e in c.events(since=start, follow=False)]
            except OutOfRangeError as e:
                error = e
                break
            assert time.monotonic() < deadline, "the old events were never dropped"
            await asyncio.sleep(0.2)
        assert "oldest cursor held" in str(error)
        oldest = error.oldest_cursor
        assert seq(oldest) > seq(start)
        after = [e async for e in c.events(since=oldest, follow=False)]
        assert after[-1].kind == Kind.SYNCED


async def test_a_cursor_of_another_state_dir_is_refused(daemon: Daemon, client: Any) -> None:
    theirs = await head(client)
    async with daemon.client() as c:
        ours = await head(c)
        assert seq(ours) <= seq(theirs) or ours != theirs
        with pytest.raises(InvalidArgumentError, match="another job store"):
            [e async for e in c.events(since=theirs, follow=False)]
        with pytest.raises(InvalidArgumentError, match="not an events cursor"):
            [e async for e in c.events(since="12", follow=False)]


async def test_a_filter_matching_little_still_gets_bookmarks(daemon: Daemon) -> None:
    async with daemon.client() as c:
        watched = await c.run(sh_app("true"))
        await c.wait(watched)
        start = await head(c)
        stream = c.events(since=start, handles=[watched], bookmark_interval=0.1)
        others = [await c.run(sh_app("true")) for _ in range(10)]
        for h in others:
            await c.wait(h)
        last = stored(daemon)[-1][0]
        async with asyncio.timeout(LIMIT):
            async for e in stream:
                assert e.kind in (Kind.SYNCED, Kind.BOOKMARK), e
                if seq(e.cursor) >= last:
                    assert e.kind == Kind.BOOKMARK or seq(e.cursor) == last
                    break
        await stream.aclose()


def test_txctl_events_prints_a_line_per_change_and_resumes_from_its_cursor(
    daemon: Daemon,
) -> None:
    start = daemon.txctl("events", "--snapshot", "--json", check=True).stdout.splitlines()
    synced = json.loads(start[-1])
    assert synced["kind"] == "SYNCED"
    run = daemon.txctl("run", "--wait", "utils.sh", "true", check=True)
    handle = run.stdout.split()[0]
    lines = daemon.txctl("events", "--since", synced["cursor"], check=True).stdout.splitlines()
    assert lines[-1].split()[1] == "SYNCED"
    changes = [line.split() for line in lines[:-1]]
    assert {c[4] for c in changes} == {handle}
    assert changes[-1][5] == "SUCCEEDED"
    held = stored(daemon, seq(synced["cursor"]))
    assert [(seq(c[0]), c[4], AppState.Value(c[5])) for c in changes] == held
    # Resuming after the first line prints the rest, as JSON objects.
    rest = daemon.txctl("events", "--since", changes[0][0], "--json", check=True)
    objects = [json.loads(line) for line in rest.stdout.splitlines()]
    assert [o["cursor"] for o in objects[:-1]] == [c[0] for c in changes[1:]]
    bad = daemon.txctl("events")
    assert bad.returncode != 0 and "--since" in bad.stderr


def _pane(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session],
        capture_output=True,
        encoding="utf-8",
        check=True,
    ).stdout


def _until_pane(session: str, want: Callable[[str], bool]) -> str:
    deadline = time.monotonic() + LIMIT
    while not want(text := _pane(session)):
        assert time.monotonic() < deadline, text
        time.sleep(0.05)
    return text


async def _submit(d: Daemon, app: Any) -> str:
    async with d.client(own_connection=True) as c:
        return str(await c.run(app))


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_list_watch_redraws_in_a_terminal_as_jobs_change(daemon: Daemon, tmp_path: Path) -> None:
    session = f"txdt-{os.getpid()}"
    env = daemon.txctl_env()
    command = [*TXCTL, "--socket", str(daemon.socket), "--no-autostart", "list", "--watch"]
    tmux = ["tmux", "new-session", "-d", "-s", session, "-x", "200", "-y", "50"]
    line = shlex.join(["env", "-i", *(f"{k}={v}" for k, v in env.items()), *command])
    # The pane stays after txctl exits, so an error stays on screen for the assertion.
    subprocess.run([*tmux, f"{line}; sleep 600"], check=True)
    try:
        _until_pane(session, lambda t: "HANDLE" in t)
        with Gates(tmp_path) as gates:
            gate = gates.new("end")
            handle = asyncio.run(_submit(daemon, sh_app(gate.wait)))
            running = _until_pane(session, lambda t: handle in t and "RUNNING" in t)
            assert running.count("HANDLE") == 1  # redrawn in place, not appended
            gate.open()
            _until_pane(session, lambda t: handle in t and "SUCCEEDED" in t)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
