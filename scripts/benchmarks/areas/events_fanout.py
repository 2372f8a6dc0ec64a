"""events, fan-out: what following subscribers cost the daemon.

Live delivery: 100 `follow=True` subscribers (10 with --quick), each on a connection of its
own, at the head of the stream; then Prune deletes finished jobs 1,000 per commit (a deletion
is an event like a status change, and Prune commits them faster than jobs can run). Fewer
events than the daemon's buffer (10,000), so every one is delivered live, none from the store.

Cost of a status change: the same batch of local_cwd jobs (`true`: SUBMITTED, RUNNING,
SUCCEEDED...) run with 0, 1, 10 and 100 following subscribers, and with 100 whose filter
matches nothing (woken by each commit, sent nothing): the daemon's CPU time (utime + stime of
the txd process) per change, until every subscriber got the last change; and commit -> delivery
(the event's commit time to its arrival at a subscriber)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from txd.client import AsyncClient
from txd.v1 import runner_pb2 as pb
from txd_testing import Daemon

from benchmarks.common import CLK_TCK, fmt_ms, log, median, pct, trivial_app
from benchmarks.context import Context

Kind = pb.EventsResponse.Kind
LIMIT = 300.0  # seconds any one phase may take
NOWHERE = "none://nowhere/none"  # a handle no job has: a filter that matches nothing


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (not of its children: the jobs)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def seq(cursor: str) -> int:
    return int(cursor.rsplit(".", 1)[1])


async def head(c: AsyncClient) -> str:
    """The cursor of now: a snapshot's SYNCED (of no job)."""
    async for e in c.events(snapshot=True, follow=False, handles=[NOWHERE]):
        if e.kind == Kind.SYNCED:
            return str(e.cursor)
    raise AssertionError("no SYNCED")


@dataclass(eq=False)
class Sub:
    """A following subscriber: what it got, and when it reached the goal cursor."""

    handles: Sequence[str] = ()
    got: int = 0
    seq: int = 0
    goal: float = math.inf
    reached_at: float = 0.0  # perf_counter
    lat: list[float] = field(default_factory=list)  # ms, commit -> delivery
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    reached: asyncio.Event = field(default_factory=asyncio.Event)

    async def follow(self, socket: Path, start: str) -> None:
        """Reads for ever (the caller cancels it)."""
        async with AsyncClient(socket, own_connection=True) as c:
            stream = c.events(since=start, handles=self.handles, bookmark_interval=600)
            async for e in stream:
                if e.kind in (Kind.CHANGED, Kind.DELETED):
                    self.lat.append((time.time_ns() - e.time.ToNanoseconds()) / 1e6)
                    self.got += 1
                elif e.kind == Kind.SYNCED:
                    self.synced.set()
                self.seq = seq(e.cursor)
                if self.seq >= self.goal and not self.reached.is_set():
                    self.reached_at = time.perf_counter()
                    self.reached.set()

    async def until(self, goal: int) -> None:
        self.goal = goal
        if self.seq >= goal and not self.reached.is_set():
            self.reached_at = time.perf_counter()
            self.reached.set()
        await self.reached.wait()


@contextlib.asynccontextmanager
async def following(d: Daemon, subs: Sequence[Sub]) -> AsyncIterator[str]:
    """The subscribers reading from the head, synced; yields the head cursor."""
    async with AsyncClient(d.socket, own_connection=True) as c:
        start = await head(c)
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(s.follow(d.socket, start)) for s in subs]
        try:
            async with asyncio.timeout(LIMIT):
                for s in subs:
                    await s.synced.wait()
            yield start
        finally:
            for t in tasks:
                t.cancel()


async def live(ctx: Context, d: Daemon, many: int, events: int) -> None:
    """(a) `events` deletions (Prune, 1,000 a commit) delivered live to `many` subscribers."""
    subs = [Sub() for _ in range(many)]
    async with following(d, subs), AsyncClient(d.socket, own_connection=True) as c:
        t0, cpu0, own0 = time.perf_counter(), cpu_seconds(d.pid), time.process_time()
        done = 0
        async with asyncio.timeout(LIMIT):
            while done < events:
                pruned = await c.prune(dt.datetime.now())
                assert not pruned.failed, dict(pruned.failed)
                assert pruned.pruned, "nothing left to prune"
                done += len(pruned.pruned)
            committed = time.perf_counter() - t0
            goal = seq(await head(c))
            for s in subs:
                await s.until(goal)
        cpu, own = cpu_seconds(d.pid) - cpu0, time.process_time() - own0
    walls = [s.reached_at - t0 for s in subs]
    assert all(s.got == done for s in subs), sorted({s.got for s in subs})
    lat = [x for s in subs for x in s.lat]
    ctx.res.add(
        f"live events to {many} following subscribers, in all",
        f"{many * done / max(walls):,.0f}/s",
        note=f"{done:,} events each (Prune's deletions, {done / committed:,.0f}/s committed), "
        f"the last delivered {max(walls):.2f} s after the first commit; daemon CPU "
        f"{cpu:.1f} s ({1e6 * cpu / (many * done):.0f} µs a delivery), the subscribers' "
        f"process {own:.1f} s",
    )
    ctx.res.add(
        f"live events to {many} following subscribers, the slowest one",
        f"{done / max(walls):,.0f}/s",
        note=f"the fastest {done / min(walls):,.0f}/s; commit -> delivery median "
        f"{fmt_ms(median(lat))}, p99 {fmt_ms(pct(lat, 99))}",
    )


FLAT = 1.5  # "flat": at most this many times the cost with no subscriber


@dataclass
class Cost:
    subscribers: int
    filtered: bool  # to nothing: woken by each commit, sent nothing
    changes: int = 0
    cpu: float = 0.0  # daemon CPU seconds, every round
    rounds: list[float] = field(default_factory=list)  # µs per change, each round
    lat: list[float] = field(default_factory=list)  # ms, every delivery to every subscriber

    @property
    def label(self) -> str:
        how = "filtered to none" if self.filtered else "following"
        return f"{self.subscribers} {how}"

    @property
    def per_change_us(self) -> float:
        return 1e6 * self.cpu / self.changes


async def _batch(d: Daemon, k: Cost, jobs: int) -> None:
    subs = [Sub([NOWHERE] if k.filtered else ()) for _ in range(k.subscribers)]
    async with following(d, subs), AsyncClient(d.socket, own_connection=True) as c:
        async with asyncio.timeout(LIMIT):
            first = seq(await head(c))
            cpu0 = cpu_seconds(d.pid)
            app = trivial_app("evcost", "true")
            handles = await asyncio.gather(*(c.run(app) for _ in range(jobs)))
            for h in handles:
                await c.wait(h)
            last = seq(await head(c))
            if not k.filtered:  # those filtered to nothing wait for nothing
                for s in subs:
                    await s.until(last)
            cpu = cpu_seconds(d.pid) - cpu0
    k.changes += last - first
    k.cpu += cpu
    k.rounds.append(1e6 * cpu / (last - first))
    k.lat += [x for s in subs for x in s.lat]


async def cost(ctx: Context, d: Daemon, counts: Sequence[int], jobs: int, rounds: int) -> None:
    """(b) The daemon's CPU per status change with each number of following subscribers, and
    with the most of them filtered to nothing; the counts interleaved, `rounds` times."""
    costs = [Cost(n, False) for n in counts] + [Cost(counts[-1], True)]
    for r in range(rounds):
        for k in costs:
            log(f"events: {jobs} jobs' status changes, {k.label} subscribers (round {r + 1})")
            await _batch(d, k, jobs)
    none = costs[0].per_change_us
    for k in costs:
        extra = k.per_change_us - none
        n = k.subscribers
        over = f"; {extra:+,.0f} µs over none, {extra / n:+.0f} µs per subscriber" if n else ""
        lat = (
            f"; commit -> delivery median {fmt_ms(median(k.lat))}, max {fmt_ms(max(k.lat))}"
            if k.lat
            else ""
        )
        each = " / ".join(f"{x:,.0f}" for x in k.rounds)
        ctx.res.add(
            f"daemon CPU per status change, {k.label} subscribers",
            f"{k.per_change_us:,.0f} µs",
            note=f"{k.changes} changes of {rounds} x {jobs} jobs (rounds: {each} µs){over}{lat}",
        )
    for filtered in (False, True):
        row = [k for k in costs if k.filtered == filtered or not k.subscribers]
        ratio = row[-1].per_change_us / none
        ctx.res.add(
            "daemon CPU per status change with "
            + " / ".join(str(k.subscribers) for k in row)
            + f" subscribers {row[-1].label.split(' ', 1)[1]}",
            " / ".join(f"{k.per_change_us:,.0f}" for k in row) + f" µs: x{ratio:.2f}",
            f"flat (<= x{FLAT:g})",
            ratio <= FLAT,
            note="the goal (issue 21): what a change costs, flat in the number of subscribers",
        )
