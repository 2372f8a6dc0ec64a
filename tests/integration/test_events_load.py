"""The events stream under load, on a real txd with the fakepush test scheduler (a backend
that streams a burst of changes: tests/plugins/txd_fakepush.py `churn`), beside local_cwd and
the polled fakepoll: 10,000 events committed while one subscriber reads them all live and
another has stopped reading; many feeds committing at once, each job's changes in its
backend's order and every subscriber's sequence the store's."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from txd.v1 import TERMINAL_STATES, AppDef, AppState, Role
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub
from txd_testing import Daemon, Gates, install_plugin, remove_tree, sh_app, short_tmpdir

from tests.integration.test_events import Kind, head, seq, stored, triples

LIMIT = 120.0  # seconds any one stream of these tests may take
TICKS = 10_000
TICKS_EACH = 500  # each of 4 pushers' in the many-feeds test


async def pusher(client: Any, name: str = "churn") -> str:
    """A fakepush job that runs until its file is rewritten."""
    app = AppDef(name=name, roles=[Role(name="r", entrypoint="x", args=["block"])])
    handle: str = await client.run(app, "fakepush", cwd="/")
    return handle


def churn(d: Daemon, handle: str, n: int) -> None:
    """Has the fakepush job push `n` changes, then succeed."""
    job = d.state_dir / "schedulers" / "fakepush" / "jobs" / handle.rsplit("/", 1)[1]
    job.write_text(f"CHURN {n}")


def make_daemon(*args: str) -> Iterator[Daemon]:
    root = short_tmpdir()
    install_plugin(root / "site", "fakepush")
    install_plugin(root / "site", "fakepoll")
    d = Daemon(root, args=args, env={"PYTHONPATH": str(root / "site")}).start()
    try:
        yield d
    finally:
        d.close()
        remove_tree(root)


@pytest.fixture
def small_buffer_daemon() -> Iterator[Daemon]:
    """A buffer of 2,000 live events and a window of 200 responses beyond the last
    acknowledged: a stalled reader is ended after 2,200 events rather than 11,000."""
    yield from make_daemon("--set", "events.buffer=2000", "--set", "events.window=200")


@pytest.fixture
def plugins_daemon() -> Iterator[Daemon]:
    yield from make_daemon()


async def read_until_ended(client: Any, since: str, handles: set[str]) -> list[Any]:
    """Follows the stream from `since` until each of `handles` had a terminal event."""
    got: list[Any] = []
    ended: set[str] = set()
    async with asyncio.timeout(LIMIT):
        async for e in client.events(since=since, follow=True):
            got.append(e)
            if e.kind == Kind.CHANGED and e.status.state in TERMINAL_STATES:
                ended.add(e.status.app_handle)
            if handles <= ended:
                return got
    raise AssertionError(f"the stream ended before {handles - ended} did")


async def test_a_stalled_reader_is_ended_while_10000_events_commit_and_others_read_on(
    small_buffer_daemon: Daemon,
) -> None:
    d = small_buffer_daemon
    async with d.client() as c:
        start = await head(c)
    # A connection of its own: its stall and end leave the clients' shared one alone.
    local = [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(f"unix://{d.socket}", options=local) as channel:
        stalled = RunnerStub(channel).Events()
        await stalled.write(pb.EventsRequest(since_cursor=start, follow=True))
        async with asyncio.timeout(LIMIT):
            synced = await stalled.read()
        assert synced.kind == Kind.SYNCED
        await stalled.write(pb.EventsRequest(received=1))
        # From here the stalled reader reads nothing until 10,000 events have committed.
        async with d.client() as c:
            handle = await pusher(c)
            churn(d, handle, TICKS)
            live = await read_until_ended(c, start, {handle})
        held = stored(d, seq(start))
        assert len(held) >= TICKS
        assert triples(live) == held  # the reading subscriber was not held back
        ticks = [int(m[1]) for e in live if (m := re.fullmatch(r"tick (\d+)", e.status.msg))]
        assert ticks == list(range(1, TICKS + 1))

        deadline = time.monotonic() + LIMIT
        while "ending an events stream that stopped reading" not in d.log():
            assert time.monotonic() < deadline, d.log()[-2000:]
            await asyncio.sleep(0.1)
        got = []
        async with asyncio.timeout(LIMIT):
            for _ in range(200):  # the window: written before the daemon waited
                got.append(await stalled.read())
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await stalled.read()
        assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"last cursor delivered: {start}" in str(ended.value.details())
    async with d.client() as c:  # it resumes from the last cursor it received
        rest = [e async for e in c.events(since=got[-1].cursor, follow=False)]
    assert triples(got) + triples(rest) == held


async def test_many_feeds_committing_at_once_keep_commit_order(plugins_daemon: Daemon) -> None:
    """local_cwd (processes), fakepush (a change stream) and fakepoll (polled) jobs change at
    once: a subscriber reading as they commit and one replaying them after see the store's
    sequence, and each job's changes in its backend's order."""
    d = plugins_daemon
    with Gates(d.state_dir) as gates:
        gate = gates.new("go")
        async with d.client() as c:
            start = await head(c)
            local = [await c.run(sh_app(f"{gate.wait}; exit {i % 2}")) for i in range(6)]
            polled = [
                await c.run(
                    AppDef(name="p", roles=[Role(name="r", entrypoint="x")]), "fakepoll", cwd="/"
                )
            ]
            pushed = [await pusher(c, f"c{i}") for i in range(4)]
            every = set(local) | set(polled) | set(pushed)
            live = asyncio.create_task(read_until_ended(c, start, every))
            for h in pushed:
                churn(d, h, TICKS_EACH)
            for _ in local:  # the local jobs leave together, while the pushers churn
                gate.open()
            first = await live
            second = await read_until_ended(c, start, every)
    held = stored(d, seq(start))
    assert triples(first) == triples(second) == held
    assert [s for s, _, _ in held] == sorted({s for s, _, _ in held})
    for h in pushed:
        mine = [
            int(m[1])
            for e in first
            if e.status.app_handle == h and (m := re.fullmatch(r"tick (\d+)", e.status.msg))
        ]
        assert mine == list(range(1, TICKS_EACH + 1)), h
    states = {h: [s for _, hh, s in held if hh == h] for h in local + polled + pushed}
    for h, seen in states.items():
        assert seen[-1] in TERMINAL_STATES, (h, seen)
        assert all(s not in TERMINAL_STATES for s in seen[:-1]), (h, seen)
    assert {states[h][-1] for h in local} == {AppState.SUCCEEDED, AppState.FAILED}


async def raw_events(d: Daemon, req: pb.EventsRequest) -> list[pb.EventsResponse]:
    """The responses of one Events call that ends at SYNCED, acknowledging as it reads."""
    local = [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(f"unix://{d.socket}", options=local) as channel:
        call = RunnerStub(channel).Events()
        await call.write(req)
        got: list[pb.EventsResponse] = []
        taken = 0
        async with asyncio.timeout(LIMIT):
            while (msg := await call.read()) is not grpc.aio.EOF:  # type: ignore[attr-defined]
                got.append(msg)
                taken += 1 + len(msg.more)
                if msg.kind == Kind.SYNCED:
                    await call.done_writing()
                else:
                    await call.write(pb.EventsRequest(received=taken))
        return got


def flat(responses: list[pb.EventsResponse]) -> list[pb.EventsResponse]:
    return [e for r in responses for e in (r, *r.more)]


async def test_a_batching_client_takes_many_events_a_response_and_misses_none(
    plugins_daemon: Daemon,
) -> None:
    """A replay of 2,000 changes, with batch=50 and without: the same events in the same
    order; batched, 50 to a response, without, one each. A snapshot of 301 jobs asked in
    batches of 500 comes in the daemon's most, 256, and the rest."""
    d = plugins_daemon
    async with d.client() as c:
        start = await head(c)
        handle = await pusher(c)
        churn(d, handle, 2_000)
        await read_until_ended(c, start, {handle})
    replay = pb.EventsRequest(since_cursor=start)
    one = await raw_events(d, replay)
    replay.batch = 50
    many = await raw_events(d, replay)
    held = stored(d, seq(start))
    assert triples(one) == triples(flat(many)) == held
    assert all(not r.more for r in one)
    changes = [r for r in many if r.kind == Kind.CHANGED]
    assert len(changes) == -(-len(held) // 50)
    assert [len(r.more) for r in changes[:-1]] == [49] * (len(changes) - 1)
    assert all(e.cursor and not e.more and not e.window for r in many for e in r.more)
    exits = AppDef(name="e", roles=[Role(name="r", entrypoint="x", args=["exit", "0"])])
    async with d.client() as c:
        ended = await asyncio.gather(*(c.run(exits, "fakepush", cwd="/") for _ in range(300)))
    snaps = await raw_events(d, pb.EventsRequest(snapshot=True, batch=500))  # capped at 256
    assert [1 + len(r.more) for r in snaps if r.kind == Kind.SNAPSHOT] == [256, 45]
    assert {e.status.app_handle for e in flat(snaps) if e.kind == Kind.SNAPSHOT} == {
        handle,
        *ended,
    }


@pytest.fixture
def tiny_buffer_daemon() -> Iterator[Daemon]:
    """A buffer of 50 live events: every burst below wraps it many times."""
    yield from make_daemon("--set", "events.buffer=50")


async def test_a_narrow_filter_gets_exactly_its_events_across_buffer_wraps(
    tiny_buffer_daemon: Daemon,
) -> None:
    """A subscriber filtered to one job is woken only by that job's events (daemon.events):
    1,000 changes of another job wrap the buffer past it, then its job's 1,000 changes
    (wrapping it again while it reads) and the other's interleaved: it gets exactly its
    job's events, in order, as the store holds them; one following all gets all."""
    d = tiny_buffer_daemon
    async with d.client() as c:
        start = await head(c)
        mine, other, third = [await pusher(c, n) for n in ("mine", "other", "third")]
        narrow: list[Any] = []

        async def follow_mine() -> None:
            async with asyncio.timeout(LIMIT):
                async for e in c.events(since=start, handles=[mine], bookmark_interval=0.1):
                    narrow.append(e)
                    if e.kind == Kind.CHANGED and e.status.state in TERMINAL_STATES:
                        return

        reader = asyncio.create_task(follow_mine())
        churn(d, other, 1_000)
        await read_until_ended(c, start, {other})
        churn(d, mine, 1_000)
        churn(d, third, 1_000)
        every = await read_until_ended(c, start, {mine, third})
        await reader
    held = stored(d, seq(start))
    assert triples(every)[: len(held)] == held
    assert triples(narrow) == [t for t in held if t[1] == mine]
    assert len(triples(narrow)) > 1_000
    cursors = [seq(e.cursor) for e in narrow]
    assert cursors == sorted(cursors)
