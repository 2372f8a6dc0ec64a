"""Log reads: which replicas a LogsRequest names, and their bytes from the scheduler, tagged with
the replica and merged as they come when following several."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import AsyncIterator
from typing import Any

from txd.daemon import validate
from txd.daemon.lastlines import LastLines
from txd.schedulers.aiters import merge
from txd.schedulers.api import Ended, Job, LogQuery, LongLine, Scheduler, num_replicas
from txd.schedulers.errors import InvalidArgument, LogGone, NotFound, Unsupported
from txd.schedulers.logfiles import skipped
from txd.v1 import Stream
from txd.v1.app_pb2 import AppDef
from txd.v1.runner_pb2 import LogsRequest, LogsResponse
from txd.v1.runner_pb2 import LongLine as LongLineMsg

# Bounds the bytes buffered per merged log stream (chunks are at most 64 KiB).
MERGE_QUEUE_CHUNKS = 16


async def read(
    sched: Scheduler[Any, Any], job: Job, app: AppDef, req: LogsRequest, ended: Ended
) -> AsyncIterator[LogsResponse]:
    _check_capabilities(sched, req)
    targets = _targets(req.app_handle, app, req)
    offsets = _offsets(req, targets)
    tail = req.tail if req.HasField("tail") else None
    query = LogQuery(
        regex=req.regex,
        since=req.since.ToDatetime(dt.UTC) if req.HasField("since") else None,
        until=req.until.ToDatetime(dt.UTC) if req.HasField("until") else None,
        follow=req.follow,
        stream=req.streams,
        tail=tail,
    )
    iters = []
    for role, k in targets:
        long_lines: list[LongLine] = []  # the filter's reports, sent as they come
        skip = offsets.get((role, k), 0)
        seek = skip if sched.log_seek else 0
        each = dataclasses.replace(query, on_long_line=long_lines.append, offset=seek)
        it = sched.log_iter(job, role, k, each, ended)
        if skip > seek:  # the scheduler cannot start there: read again and skip
            it = skipped(it, skip)
        iters.append((role, k, it, long_lines))
    if tail is not None:
        iters = [(role, k, _last_lines(it, tail), lines) for role, k, it, lines in iters]
    if not req.follow or len(iters) == 1:
        # Replica after replica: finished output reads best grouped.
        for i in iters:
            async for msg in _tagged(*i):
                yield msg
        return
    async for msg in merge([_tagged(*i) for i in iters], MERGE_QUEUE_CHUNKS):
        yield msg


def check(req: LogsRequest) -> None:
    """The request's own fields, before its job is looked up."""
    validate.check_text("role", req.role, validate.MAX_SCHEDULER)
    if req.HasField("tail") and req.tail < 0:
        raise InvalidArgument("tail", f"must be >= 0 (or unset for the whole log), got {req.tail}")
    for name in ("since", "until"):
        if req.HasField(name):
            validate.check_timestamp(name, getattr(req, name))
    if (
        req.HasField("since")
        and req.HasField("until")
        and req.since.ToNanoseconds() > req.until.ToNanoseconds()
    ):
        raise InvalidArgument("until", "is before since: no line can match")
    if req.streams not in Stream.values():
        raise InvalidArgument("streams", f"{req.streams} is not a LogsRequest.Stream")
    if req.regex:
        validate.check_text("regex", req.regex, validate.MAX_REGEX, nul=True)
        try:
            re.compile(req.regex.encode())
        except (re.error, RecursionError, OverflowError) as e:  # deep nesting: RecursionError
            raise InvalidArgument("regex", f"invalid regular expression: {e}") from None
    if req.offsets and req.HasField("tail"):
        raise InvalidArgument(
            "offsets", "cannot be combined with tail: the last lines move as the log grows"
        )
    for i, x in enumerate(req.offsets):
        if x.offset < 0:
            raise InvalidArgument(f"offsets[{i}].offset", f"must be >= 0, got {x.offset}")


def _offsets(req: LogsRequest, targets: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Bytes to skip per replica (LogsRequest.offsets), each naming a replica read."""
    out: dict[tuple[str, int], int] = {}
    for i, x in enumerate(req.offsets):
        key = (x.role, x.replica)
        if key not in targets:
            raise InvalidArgument(
                f"offsets[{i}]", f"replica {x.role}/{x.replica} is not one this request reads"
            )
        if key in out:
            raise InvalidArgument(f"offsets[{i}]", f"replica {x.role}/{x.replica} is listed twice")
        out[key] = x.offset
    return out


def _check_capabilities(sched: Scheduler[Any, Any], req: LogsRequest) -> None:
    """What the scheduler does not claim is refused here, the same way for every backend."""
    caps = sched.capabilities
    wanted = [
        (True, caps.logs, "does not provide logs"),
        (req.follow, caps.log_follow, "cannot follow logs"),
        (req.HasField("since") or req.HasField("until"), caps.log_since_until,
         "does not know when log lines were written: since/until cannot be applied"),
        (req.streams != Stream.COMBINED, caps.log_streams,
         "cannot read stdout and stderr apart"),
    ]  # fmt: skip
    for asked, claimed, why in wanted:
        if asked and not claimed:
            raise Unsupported(f"{sched.name} {why}")


def _targets(handle: str, app: AppDef, req: LogsRequest) -> list[tuple[str, int]]:
    roles = [r for r in app.roles if not req.role or r.name == req.role]
    if not roles:
        names = ", ".join(r.name for r in app.roles)
        raise NotFound(f"{handle} has no role {req.role!r} (roles: {names})")
    if req.HasField("replica") and req.replicas:
        raise InvalidArgument("replicas", "give replica or replicas, not both")
    wanted = [req.replica] if req.HasField("replica") else list(req.replicas)
    seen: set[int] = set()
    for k in wanted:
        if k in seen:
            raise InvalidArgument("replicas", f"replica {k} is listed twice")
        seen.add(k)
    targets: list[tuple[str, int]] = []
    for role in roles:
        n = num_replicas(role)
        for k in wanted:
            if not 0 <= k < n:
                raise NotFound(f"role {role.name!r} has replicas 0..{n - 1}, not {k}")
        targets.extend((role.name, k) for k in wanted or range(n))
    return targets


async def _tagged(
    role: str, k: int, it: AsyncIterator[bytes], long_lines: list[LongLine]
) -> AsyncIterator[LogsResponse]:
    try:
        async for chunk in it:
            if chunk:  # an empty one only says "caught up"
                yield LogsResponse(data=chunk, role=role, replica=k)
            for msg in _long_lines(role, k, long_lines):
                yield msg
    except LogGone as e:  # this replica only: the others are still sent
        yield LogsResponse(role=role, replica=k, unreadable=str(e))
    for msg in _long_lines(role, k, long_lines):
        yield msg


def _long_lines(role: str, k: int, long_lines: list[LongLine]) -> list[LogsResponse]:
    """The lines the filter reported since last asked (LogsResponse.long_line)."""
    msgs = [
        LogsResponse(role=role, replica=k, long_line=LongLineMsg(offset=x.offset, length=x.length))
        for x in long_lines
    ]
    long_lines.clear()
    return msgs


async def _last_lines(chunks: AsyncIterator[bytes], n: int) -> AsyncIterator[bytes]:
    """The last n lines of what `chunks` holds when it first catches up (an empty chunk) or
    ends, then every chunk after: `tail -n N -f` for one replica, whatever its scheduler.
    Holds the chunks that may still hold those lines in bounded memory (lastlines.LastLines:
    on disk past a MiB), and sends them in pieces, so a line of any length goes out."""
    held = LastLines(n)
    try:
        async for chunk in chunks:
            if not chunk:
                break
            held.add(chunk)
        for piece in held.lines():
            yield piece
        held.close()
        async for chunk in chunks:
            yield chunk
    finally:
        held.close()
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
