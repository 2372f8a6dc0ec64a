"""The events stream (Events RPC) of a real txd over its socket, local_cwd jobs: every status
change in commit order with a durable cursor; replay then live with no gap and no duplicate,
also across a kill -9; snapshot + live; bookmarks; retention (a reader that stops reading:
test_events_load.py)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
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
from txd.client._format import to_dict
from txd.v1 import TERMINAL_STATES, AppState
from txd.v1 import runner_pb2 as pb
from txd_testing import TXCTL, Daemon, Gates, sh_app

Kind = pb.EventsResponse.Kind
LIMIT = 60.0  # seconds any one stream of a test may take


def seq(cursor: str) -> int:
    return int(cursor.rsplit(".", 1)[1])


def stored(d: Daemon, after: int = 0) -> list[tuple[int, str, int]]:
    """(seq, handle, state) of the events the daemon's store holds (changes and deletions,
    not what a deletion removed), in order."""
    with contextlib.closing(sqlite3.connect(d.state_dir / "jobs.db")) as db:
        rows = db.execute(
            "SELECT seq, handle, state FROM events WHERE seq > ? AND kind IN (1, 2) ORDER BY seq",
            (after,),
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
        by_time = [e async for e in c.events(since=dt.datetime.fromtimestamp(since), follow=False)]
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


def expected_with_gaps(
    held: list[tuple[int, str, int]], lost: list[tuple[int, str, int]]
) -> list[tuple[str, int, int]]:
    """(kind, seq, removed) a replay sends of `held` once `lost` were removed: each run of lost
    events between two held ones as one GAP, at the last of them, with their count."""
    out: list[tuple[str, int, int]] = []
    kinds = {s: "CHANGED" for s, _, _ in held}
    for s in sorted([*kinds, *(s for s, _, _ in lost)]):
        if s in kinds:
            out.append((kinds[s], s, 0))
        elif out and out[-1][0] == "GAP":
            out[-1] = ("GAP", s, out[-1][2] + 1)
        else:
            out.append(("GAP", s, 1))
    return out


def sent(events: list[Any]) -> list[tuple[str, int, int]]:
    """(kind, seq, removed) of each event a replay sent (of txctl's --json lines, or the
    client's), CHANGED standing for DELETED too; SYNCED left out."""
    rows = [e if isinstance(e, dict) else to_dict(e) for e in events]
    return [
        ("GAP" if r["kind"] == "GAP" else "CHANGED", seq(r["cursor"]), int(r.get("removed", 0)))
        for r in rows
        if r["kind"] != "SYNCED"
    ]


async def test_a_resume_across_a_prune_is_told_what_the_prune_removed(daemon: Daemon) -> None:
    """Prune removes its jobs' events: a replay from a cursor before them sends a GAP where
    they were, saying how many (txctl and the client alike, filters applied), then the jobs'
    DELETED events; a range that lost nothing, or a cursor after the prune, resumes as ever."""
    async with daemon.client() as c:
        start = await head(c)
        since = time.time()
        pruned = [await c.run(sh_app("true")) for _ in range(2)]
        for h in pruned:
            await c.wait(h)
        middle = await head(c)
        kept = await c.run(sh_app("true"))
        await c.wait(kept)
        lost = [e for e in stored(daemon, seq(start)) if e[1] in pruned]
        assert lost and all(s <= seq(middle) for s, _, _ in lost)
        created = json.loads(daemon.txctl("status", "--json", kept, check=True).stdout)["created"]
        daemon.txctl("prune", "--older-than", created, check=True)
        assert {h for _, h, _ in stored(daemon)} == {*pruned, kept}  # the DELETED events
        held = stored(daemon, seq(start))
        after = await head(c)

        out = daemon.txctl("events", "--since", start, "--json", check=True).stdout
        lines = [json.loads(line) for line in out.splitlines()]
        assert lines[-1]["kind"] == "SYNCED"
        assert sent(lines) == expected_with_gaps(held, lost)
        assert sum(line["removed"] for line in lines) == len(lost)
        deleted = [line["status"]["app_handle"] for line in lines if line["kind"] == "DELETED"]
        assert deleted == pruned
        text = daemon.txctl("events", "--since", start, check=True).stdout
        gaps = [line.split() for line in text.splitlines() if line.split()[1] == "GAP"]
        assert sum(int(g[2]) for g in gaps) == len(lost), text

        replayed = [e async for e in c.events(since=start, follow=False)]
        assert sent(replayed) == expected_with_gaps(held, lost)
        by_time = [e async for e in c.events(since=dt.datetime.fromtimestamp(since), follow=False)]
        assert sent(by_time) == sent(replayed)
        # Filtered, a GAP counts only the removed events the filter matches.
        running = [e for e in held if e[2] == AppState.RUNNING]
        lost_running = [e for e in lost if e[2] == AppState.RUNNING]
        assert lost_running
        only = [e async for e in c.events(since=start, follow=False, states=[AppState.RUNNING])]
        assert sent(only) == expected_with_gaps(running, lost_running)

        # From after the pruned jobs' events, nothing was lost: no GAP, their deletions.
        rest = [e async for e in c.events(since=middle, follow=False)]
        assert sent(rest) == expected_with_gaps(stored(daemon, seq(middle)), [])
        assert [e.status.app_handle for e in rest if e.kind == Kind.DELETED] == pruned
        # From after the prune: just SYNCED.
        now = daemon.txctl("events", "--since", after, "--json", check=True).stdout
        assert [json.loads(line)["kind"] for line in now.splitlines()] == ["SYNCED"]


async def test_a_store_upgraded_past_untracked_deletions_refuses_a_cursor_before_them(
    daemon: Daemon,
) -> None:
    """Deletions before the store kept their events' places removed them without a trace:
    once upgraded, a cursor before the newest of them is OUT_OF_RANGE (never a silent gap),
    naming that deletion's cursor, from which a stream resumes."""
    async with daemon.client() as c:
        start = await head(c)
        gone = await c.run(sh_app("true"))
        await c.wait(gone)
        kept = await c.run(sh_app("true"))
        await c.wait(kept)
    daemon.txctl("delete", gone, check=True)
    daemon.stop()
    with contextlib.closing(sqlite3.connect(daemon.state_dir / "jobs.db")) as db:
        # As a txd before schema version 6 left it: the job's events deleted outright.
        db.execute("DELETE FROM events WHERE kind = 3")
        db.execute("PRAGMA user_version = 5")
        db.commit()
    deletion = stored(daemon)[-1]
    assert deletion[1] == gone
    daemon.start()
    async with daemon.client() as c:
        with pytest.raises(OutOfRangeError, match="before txd counted") as info:
            [e async for e in c.events(since=start, follow=False)]
        assert seq(info.value.oldest_cursor) == deletion[0]
        rest = [e async for e in c.events(since=info.value.oldest_cursor, follow=False)]
        assert [e.kind for e in rest] == [Kind.SYNCED]


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
