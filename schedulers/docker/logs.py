"""local_docker's log reader: one replica's log, read from the engine with its time stamps,
followed across the engine's outages and up to the job's end."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from txd.schedulers.aiters import JobEnd
from txd.schedulers.api import Ended, LogQuery
from txd.schedulers.errors import BackendUnavailable, LogGone, NotFound
from txd.schedulers.workspace.engine import NO_MESSAGE, Engine, LogMessage
from txd.v1 import Stream

log = logging.getLogger(__name__)

# Seconds between pings of an engine that stopped answering while a log is followed.
OUTAGE_PAUSE = 0.5
# How much earlier (ns) a line of one stream may be stamped than a line of the other that the
# engine wrote before it: each stream has its own copier, which stamps a line, then writes it.
REORDER_NS = 1_000_000_000


class LogReader:
    """One replica's log, read from the engine (Scheduler.log_iter's rules):

    - what is there now, read to its end and then marked caught up (an empty piece): the
      engine's own stream never says where a follow's backlog ends. With a tail (rule 6), from
      where the last lines begin, found by asking the engine for its last messages;
    - following, the container's new messages. A read that ends (the engine restarts, or
      stops answering for a while, or ends a read when the container ends) resumes exactly
      where the messages passed on end (see Resume), so it loses and repeats nothing the
      engine kept: the reader waits, pinging the engine every OUTAGE_PAUSE seconds, for as
      long as its client stays. The job's end cuts a follow the engine has not ended (Docker
      20.10 sometimes leaves `logs -f` of an exited container open: docker/docker-py#3084);
      what it kept is then read to its end;
    - once the container stopped and the job has ended, what a restarted container (a retry)
      wrote after that.

    A container removed outside txd raises LogGone (the other replicas are still read)."""

    def __init__(self, engine: Engine, name: str, replica: str, query: LogQuery) -> None:
        self.engine = engine
        self.name = name
        self.replica = replica
        self.query = query
        self.streams = {
            "stdout": query.stream in (Stream.COMBINED, Stream.STDOUT),
            "stderr": query.stream in (Stream.COMBINED, Stream.STDERR),
        }
        self.resume = Resume(0)

    async def pieces(self, ended: Ended) -> AsyncGenerator[tuple[bytes, int], None]:
        """The log as (bytes, stamp) pieces; (b"", 0) marks what was there as passed on."""
        try:
            self.resume = Resume(await self._tail_start())
            if not self.query.follow:
                async for m in self._read(follow=False):
                    if m.data:  # the engine's "passed on" marks say nothing of the log's end
                        yield m.data, m.stamp
                return
            async with JobEnd(ended) as end:
                async for m in self._followed(end):
                    if m.stamp:  # a message, not a mark
                        self.resume.passed(m)
                        if not m.data:
                            continue
                    yield m.data, m.stamp
        except NotFound as e:
            raise LogGone(
                f"the log of {self.replica} is gone: its container {self.name} was removed "
                "outside txd"
            ) from e

    async def _followed(self, end: JobEnd) -> AsyncGenerator[LogMessage, None]:
        async for m in self._outlasting():
            if m.stamp:
                yield m
        yield NO_MESSAGE  # caught up (rule 7)
        while not end.over() and await self._running():
            before = self.resume.count
            # JobEnd.until reads ahead of what is passed on: a read that fails is resumed by
            # the next turn (once _running saw the engine back), from what was passed on.
            with contextlib.suppress(BackendUnavailable):
                async for m in end.until(self._read(follow=True), wait_end=False):
                    yield m
            if self.resume.count == before:  # one that ends at once is not tried at once again
                await end.wait(OUTAGE_PAUSE)
        await end.wait()
        async for m in self._outlasting():
            yield m

    async def _tail_start(self) -> int:
        """Where to start reading for the query's tail (0: from the start): the stamp of the
        first of the engine's last m messages, for the least m (n + 1, then 4 times more)
        whose messages hold n + 1 newlines; the engine counts messages, and a long line is
        several. Only a tail of both streams, not filtered by time or regex (rule 6)."""
        q = self.query
        n = q.tail
        if n is None or q.regex or q.since or q.until or q.stream != Stream.COMBINED:
            return 0
        m = n + 1
        for _ in range(32):  # m grows fourfold each time: a bounded number of reads
            count = newlines = first = 0
            async for message in self.engine.logs(
                self.name, stdout=True, stderr=True, follow=False, tail=m
            ):
                if message.stamp:
                    count += 1
                    first = first or message.stamp
                    newlines += message.data.count(b"\n")
            if count < m:
                return 0  # the whole log has fewer messages
            if newlines > n:
                return first
            m *= 4
        return 0

    async def _read(self, *, follow: bool) -> AsyncGenerator[LogMessage, None]:
        """One read of the engine's, from where the messages passed on end."""
        since, skip = self.resume.since()
        async for m in self.engine.logs(
            self.name,
            follow=follow,
            since_ns=since,
            in_long_line=self.resume.in_long_line(),
            **self.streams,
        ):
            if skip and m.stamp:
                skip -= 1  # passed on before
                continue
            yield m

    async def _running(self) -> bool:
        """Whether the container runs (a follow goes on). Rides out an engine that does not
        answer; raises NotFound once the container is gone."""
        while True:
            try:
                info = await self.engine.inspect(self.name)
            except BackendUnavailable:
                await self._engine_back()
                continue
            if info is None:
                raise NotFound(f"container {self.name} does not exist")
            state = info.get("State") or {}
            # Restarting (a retry's back-off) is not running: its output is read at the end.
            return bool(state.get("Running")) and not state.get("Restarting")

    async def _outlasting(self) -> AsyncGenerator[LogMessage, None]:
        """What the engine has, resumed when the engine goes away meanwhile. Only where each
        message yielded is passed on before the next is read (not behind JobEnd.until)."""
        while True:
            try:
                async for m in self._read(follow=False):
                    yield m
                return
            except BackendUnavailable:
                await self._engine_back()

    async def _engine_back(self) -> None:
        """Returns once the engine answers a ping again, trying every OUTAGE_PAUSE seconds
        (each try bounded by the engine's timeout)."""
        while True:
            await asyncio.sleep(OUTAGE_PAUSE)
            try:
                await self.engine.ping()
                return
            except BackendUnavailable as e:
                log.debug("%s: waiting for the engine: %s", self.name, e)


@dataclass
class _LongLine:
    stamp: int  # of every piece of the line
    after: int  # how many messages passed on are stamped at or after it


class Resume:
    """Where the next read of a log starts, from the messages passed on so far. The engine
    selects messages by stamp only (`since`: stamped at or after), keeps them in the order it
    wrote them, and stamps:

    - every piece of a long line with the time of its first piece, however long the line takes
      to write (a progress bar on stderr, while stdout goes on);
    - across an engine restart, a long line it was writing as a new line: what it had read of
      it and not written is lost (for every reader alike), the rest gets a new stamp;
    - the lines of each stream in order, but a line of one stream may be written after a line
      of the other stamped later (each stream has its own copier, which stamps a line, then
      writes it).

    So a read resumes at a stamp no message still to come is before (the stamp of a long line
    under way, else REORDER_NS before the newest stamp passed on), skipping the messages
    passed on that are stamped at or after it: those come first, in the order they came."""

    def __init__(self, start: int) -> None:
        self.start = start  # where the first read started: nothing before it is read
        self.count = 0  # messages passed on
        self.newest = 0
        self.recent: deque[int] = deque()  # the stamps passed on, back to REORDER_NS before newest
        self.long_lines: dict[int, _LongLine] = {}  # by stream: its long line under way

    def passed(self, m: LogMessage) -> None:
        """Counts `m` as passed on."""
        self.count += 1
        self.newest = max(self.newest, m.stamp)
        self.recent.append(m.stamp)
        while self.recent[0] < self.newest - REORDER_NS:
            self.recent.popleft()
        for line in self.long_lines.values():
            if m.stamp >= line.stamp:
                line.after += 1
        under_way = self.long_lines.get(m.stream)
        if not m.partial:
            self.long_lines.pop(m.stream, None)
        elif under_way is None or under_way.stamp != m.stamp:  # its first piece
            self.long_lines[m.stream] = _LongLine(m.stamp, sum(t >= m.stamp for t in self.recent))

    def since(self) -> tuple[int, int]:
        """The stamp to read from, and how many of the messages read from there to skip."""
        if not self.count:
            return self.start, 0
        at = max(self.start, self.newest - REORDER_NS)
        oldest = min(self.long_lines.values(), key=lambda line: line.stamp, default=None)
        if oldest is not None and oldest.stamp < at:
            return oldest.stamp, oldest.after
        return at, sum(t >= at for t in self.recent)

    def in_long_line(self) -> dict[int, bool]:
        """By stream, whether the last message passed on was a piece of a long line."""
        return {stream: True for stream in self.long_lines}
