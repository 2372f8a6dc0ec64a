"""A replica's log from the pod log API: wait for its pod's container to start, then read the
log with timestamps=true as (line, ns) pieces for txd.schedulers.logfiles.selected; when
following, until the job has ended (the API's follow ends with the container)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from txd.schedulers import aiters
from txd.schedulers.api import Ended, LogQuery
from txd.schedulers.errors import BackendUnavailable
from txd.schedulers.kubernetes.client import Kube, KubeError
from txd.schedulers.kubernetes.watching import PODS
from txd.schedulers.pulse import Pulse

_TS = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z ")
_TS_INNER = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z ")
PARTIAL = 16 * 1024  # Docker's json-file log driver splits longer lines (see _timed)
ROUNDS = 10_000  # bound on the looks for a pod that starts: a pod change (or 2 s) per round
LOOK_EVERY = 2.0  # seconds between looks when no pod changes

Pod = dict[str, Any]


async def pieces(
    kube: Kube,
    namespace: str,
    find: Callable[[], Awaitable[Pod | None]],
    pods_changed: Pulse,
    query: LogQuery,
    ended: Ended,
    what: str,
) -> AsyncGenerator[tuple[bytes, int], None]:
    """The log of the pod `find` returns, once its container has started (`pods_changed`
    fires on each change of a pod); nothing if it never does (not following, or the job ended
    first). `what` names the replica in errors."""
    pod = await _wait_started(find, pods_changed, query.follow, ended)
    if pod is None:
        return
    path = PODS.path(namespace, pod["metadata"]["name"]) + "/log"
    lines = _read(kube, path, _params(query), what)
    async for piece in aiters.until(lines, ended if query.follow else None):
        yield piece


def _params(query: LogQuery) -> dict[str, Any]:
    params: dict[str, Any] = {"timestamps": "true"}
    if query.follow:
        params["follow"] = "true"
    if query.since is not None:  # whole seconds: the exact cut is selected's
        params["sinceTime"] = query.since.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if query.tail is not None and not query.regex and query.until is None:
        params["tailLines"] = query.tail
    return params


async def _read(
    kube: Kube, path: str, params: Mapping[str, Any], what: str
) -> AsyncIterator[tuple[bytes, int]]:
    try:
        async with kube.stream(path, params) as chunks:
            async for piece in _timed_lines(chunks):
                yield piece
    except KubeError as e:
        raise BackendUnavailable(f"{what}: {e}") from e


async def _wait_started(
    find: Callable[[], Awaitable[Pod | None]], pods_changed: Pulse, follow: bool, ended: Ended
) -> Pod | None:
    """The pod once its container has started (or ended); None if it never will (not
    following, or the job ended first)."""
    async with aiters.JobEnd(ended) as end:
        for _ in range(ROUNDS):
            seen = pods_changed.gen
            over = end.over()  # before the look: a pod that started first is still found
            pod = await find()
            if pod is not None and started(pod):
                return pod
            if over or not follow:
                return None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(LOOK_EVERY):
                    await pods_changed.wait_past(seen)
    return None


def started(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's container has started, so that its log can be read."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    state = (statuses[0] if statuses else {}).get("state") or {}
    return "running" in state or "terminated" in state


async def _timed_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[bytes, int]]:
    """The log API's `<RFC 3339 time> <line>` lines (timestamps=true) as (line, ns) pieces,
    and (b"", 0) after each chunk read: caught up with what has arrived (logfiles.batched
    sends what it holds then, so a followed log flows line by line)."""
    rest = b""
    async for chunk in chunks:
        rest += chunk
        *lines, rest = rest.split(b"\n")
        for line in lines:
            yield _timed(line + b"\n")
        yield b"", 0
    if rest:
        yield _timed(rest)


def _timed(line: bytes) -> tuple[bytes, int]:
    m = _TS.match(line)
    if m is None:
        return line, 0
    body = line[m.end() :]
    # Docker's json-file driver stores a line over 16 KiB in pieces, and the log API prefixes
    # each piece with its own time: those inner stamps are not the program's bytes.
    at = PARTIAL
    while at < len(body) and (inner := _TS_INNER.match(body, at)) is not None:
        body = body[:at] + body[inner.end() :]
        at += PARTIAL
    when = dt.datetime.strptime(m.group(1).decode(), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    frac = (m.group(2) or b"0").decode().ljust(9, "0")
    return body, int(when.timestamp()) * 1_000_000_000 + int(frac)
