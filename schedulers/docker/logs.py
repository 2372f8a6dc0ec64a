"""local_docker's log reader: one replica's log, read from the engine with its time stamps,
followed across the engine's outages and up to the job's end."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator

from txd.schedulers.aiters import JobEnd
from txd.schedulers.api import Ended, LogQuery
from txd.schedulers.errors import BackendUnavailable, LogGone, NotFound
from txd.schedulers.workspace.engine import Engine
from txd.v1 import Stream

log = logging.getLogger(__name__)

# Seconds between pings of an engine that stopped answering while a log is followed.
OUTAGE_PAUSE = 0.5


class LogReader:
    """One replica's log, read from the engine (Scheduler.log_iter's rules):

    - what is there now, read to its end and then marked caught up (an empty piece): the
      engine's own stream never says where a follow's backlog ends. With a tail (rule 6), from
      where the last lines begin, found by asking the engine for its last messages;
    - following, the container's new messages, each read resumed after the last message passed
      on (by its time stamp, in ns), so that an engine that closes the stream (it restarts) or
      stops answering for a while loses and repeats nothing it kept: the reader waits, pinging
      the engine every OUTAGE_PAUSE seconds, for as long as its client stays. The job's end
      cuts a follow the engine has not ended (Docker 20.10 sometimes leaves `logs -f` of an
      exited container open: docker/docker-py#3084); what it kept is then read to its end;
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
        self.last = 0  # the stamp of the last message passed on to the client
        self.long_lines: dict[int, bool] = {}  # Engine.logs' state, kept across reads

    async def pieces(self, ended: Ended) -> AsyncGenerator[tuple[bytes, int], None]:
        try:
            if not self.query.follow:
                read = self._read(follow=False, since_ns=await self._tail_start())
                async for piece in read:
                    if piece[0]:  # the engine's "passed on" marks say nothing of the log's end
                        yield piece
                return
            async with JobEnd(ended) as end:
                async for piece in self._followed(end):
                    if piece[1]:
                        self.last = piece[1]
                    yield piece
        except NotFound as e:
            raise LogGone(
                f"the log of {self.replica} is gone: its container {self.name} was removed "
                "outside txd"
            ) from e

    async def _followed(self, end: JobEnd) -> AsyncGenerator[tuple[bytes, int], None]:
        start = await self._tail_start()  # an engine down at the start: BackendUnavailable
        async for piece in self._outlasting(follow=False, start=start):
            if piece[0]:
                yield piece
        yield b"", 0  # caught up (rule 7)
        while not end.over() and await self._running():
            before = self.last
            async for piece in end.until(self._outlasting(follow=True), wait_end=False):
                yield piece
            if self.last == before:  # a stream that ends at once is not tried at once again
                await end.wait(OUTAGE_PAUSE)
        await end.wait()
        async for piece in self._outlasting(follow=False):
            yield piece

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
            async for block, stamp in self.engine.logs(
                self.name, stdout=True, stderr=True, follow=False, tail=m
            ):
                if block:
                    count += 1
                    first = first or stamp
                    newlines += block.count(b"\n")
            if count < m:
                return 0  # the whole log has fewer messages
            if newlines > n:
                return first
            m *= 4
        return 0

    def _read(self, *, follow: bool, since_ns: int) -> AsyncIterator[tuple[bytes, int]]:
        """One read of the engine's."""
        return self.engine.logs(
            self.name,
            follow=follow,
            since_ns=since_ns,
            long_lines=self.long_lines,
            **self.streams,
        )

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

    async def _outlasting(
        self, *, follow: bool, start: int = 0
    ) -> AsyncGenerator[tuple[bytes, int], None]:
        """A read from after the last message passed on (from `start` if none was), resumed
        after the last message it read when the engine goes away meanwhile."""
        since = self.last + 1 if self.last else start
        while True:
            try:
                async for block, stamp in self._read(follow=follow, since_ns=since):
                    if stamp:
                        since = stamp + 1
                    yield block, stamp
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
