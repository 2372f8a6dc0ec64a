"""One CloudWatch Logs stream read as a replica's log (Scheduler.log_iter's rules).

AWS keeps a container's output as log events, a line each, with a time in ms: a replica's
bytes are each event's message plus "\\n", sent in chunks of many events. Reading is
get_log_events from the head, page by page, the forward token carried on: AWS answers the
token it was sent when there is nothing newer, which is where a read stops. since/until go to
AWS as startTime/endTime (whole ms) and are applied exactly, with the regex, by
logfiles.selected, as every scheduler does.

A follow reads again every `poll` seconds (at once when the job ends) and ends when the job is
over and a read made after that found nothing new: AWS delivers a container's last lines
around its end. A stream (or group) that does not exist yet is "nothing yet" while the job
lives (AWS creates it with the container's first output); once the job is over it is NotFound.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from txd.schedulers.aiters import JobEnd
from txd.schedulers.api import Ended, LogQuery
from txd.schedulers.aws.client import Aws
from txd.schedulers.errors import NotFound
from txd.schedulers.logfiles import selected

# The stream's name, or a call that finds it ("" while it is not known yet: a Batch job's
# stream is named in describe_jobs once it runs).
StreamName = str | Callable[[], Awaitable[str]]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_CAUGHT_UP = (b"", 0)  # logfiles' mark: nothing more until AWS has more
PAGE_LIMIT = 10_000  # events per get_log_events (AWS's maximum; also at most 1 MB)
# Reads after the job is over that may find the stream still missing (AWS creates it with the
# first delivered line, a moment after the container wrote it) before that is NotFound.
MISSING_AFTER_END = 3


def read_stream(
    aws: Aws, group: str, stream: StreamName, query: LogQuery, ended: Ended, *, poll: float
) -> AsyncIterator[bytes]:
    """The stream's bytes as `query` selects them, in chunks (see the module docstring)."""
    # since/until are applied here, on the events' whole ms; selected() applies the regex.
    only_regex = LogQuery(regex=query.regex, on_long_line=query.on_long_line)
    return selected(_pieces(aws, group, stream, query, ended, poll), only_regex)


def _ms(t: dt.datetime | None) -> int | None:
    """The first whole millisecond at or after t (exact: datetimes hold whole microseconds)."""
    if t is None:
        return None
    us = (t - _EPOCH) // dt.timedelta(microseconds=1)
    return -(-us // 1000)


def _window(query: LogQuery) -> tuple[int | None, int | None, dict[str, int]]:
    """since/until in ms (an event at t ms is kept when since <= t < until), and the
    get_log_events arguments that ask AWS for no more than that window."""
    since, until = _ms(query.since), _ms(query.until)
    kw = {}
    if since is not None:
        kw["startTime"] = since
    if until is not None:
        kw["endTime"] = until  # exclusive on AWS (moto's is inclusive: filtered here too)
    return since, until, kw


async def _pieces(
    aws: Aws, group: str, stream: StreamName, query: LogQuery, ended: Ended, poll: float
) -> AsyncIterator[tuple[bytes, int]]:
    """(bytes, time in ns) of the stream's events, a page at a time, with caught-up marks."""
    client = await aws.client("logs")
    name = stream if isinstance(stream, str) else ""
    token: str | None = None
    missing_after_end = 0
    since, until, window = _window(query)
    async with JobEnd(ended) as end:
        while True:
            await asyncio.sleep(0)  # ended() returns on its first step once the job is over
            job_over = end.over()  # before the read: a read after the end is final
            if not name and not isinstance(stream, str):
                name = await stream()
            new = False
            if name:
                try:
                    while True:
                        kw = {"nextToken": token} if token else {}
                        page = await aws.call(
                            client,
                            "get_log_events",
                            field="logs",
                            logGroupName=group,
                            logStreamName=name,
                            startFromHead=True,
                            limit=PAGE_LIMIT,
                            **window,
                            **kw,
                        )
                        events = [
                            e
                            for e in page.get("events") or []
                            if (since is None or e["timestamp"] >= since)
                            and (until is None or e["timestamp"] < until)
                        ]
                        if page.get("events"):
                            new = True
                            for piece in _by_time(events):
                                yield piece
                        nxt = page.get("nextForwardToken")
                        if not nxt or nxt == token:
                            break
                        token = nxt
                except NotFound:
                    if job_over:
                        missing_after_end += 1
                        if missing_after_end >= MISSING_AFTER_END or not query.follow:
                            raise NotFound(
                                f"no log stream {name} in log group {group}: the job wrote "
                                "no output, or its logs were deleted"
                            ) from None
            elif job_over:
                raise NotFound(f"the job ended without a log stream in {group}")
            if not query.follow:
                return
            if job_over and not new and missing_after_end == 0:
                return
            yield _CAUGHT_UP
            if not job_over:
                await end.wait(poll)
            elif not new:
                await asyncio.sleep(poll)  # the stream is still missing after the end


def _by_time(events: list[dict[str, Any]]) -> Iterator[tuple[bytes, int]]:
    """The events' lines, one piece per run of events with the same time (logfiles gives a
    piece's lines the piece's time; logfiles.batched joins the pieces into chunks again)."""
    run: list[bytes] = []
    when = None
    for e in events:
        t = int(e["timestamp"] * 1_000_000)
        if t != when and run:
            yield b"".join(run), when or 0
            run = []
        when = t
        run.append(e["message"].encode() + b"\n")
    if run:
        yield b"".join(run), when or 0
