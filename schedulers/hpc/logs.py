"""Log files written by a batch system (Slurm's srun, LSF's job output), read where they lie:
on this host or on a login node, through the scheduler's Host.

Reading is `cat`; following is `tail -F`, which wakes on inotify where the files are, so bytes
reach clients as they are written. A file the job has not created yet is waited for by checking
every POLL_MISSING seconds; the tail starts once it exists. A follow ends once the job is
terminal: the tail is stopped and whatever it had not delivered yet is read from the byte
offset it reached, so no byte is lost or repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

from txd.schedulers.aiters import merge
from txd.schedulers.api import LogQuery, compile_regex
from txd.schedulers.errors import Unsupported
from txd.schedulers.hpc.hosts import Host
from txd.schedulers.logfiles import batched, filter_lines

# Chunks buffered per followed file: bounds memory when the client reads slowly.
QUEUE_CHUNKS = 4
# How often a follow checks for a log file the job has not created yet (seconds).
POLL_MISSING = 0.1
# `tail -F`, started once the file exists, and ended when its stdin closes.
# - GNU tail uses inotify only for files that exist when it starts: given a missing file it polls
#   every `-s` seconds (default 1) for good, even after the file appears, and lines came in 1 s
#   batches. So the file is waited for first, then tail is exec'd and wakes on every write.
# - A command whose SSH channel is closed runs on until it next writes, and tail -F of a finished
#   log may never write again: without the kill it would stay on the login node for good.
FOLLOW = (
    f'{{ until [ -e "$1" ]; do sleep {POLL_MISSING}; done; exec tail -c +1 -F -- "$1"; }}'
    ' 2>/dev/null & t=$!; cat >/dev/null; kill "$t"'
)


async def read_files(
    host: Host,
    paths: Sequence[str],
    query: LogQuery,
    until_done: Callable[[], Coroutine[Any, Any, None]],
) -> AsyncIterator[bytes]:
    """The bytes of `paths` (one after the other, or interleaved as written when following),
    filtered by query.regex. `until_done` returns once the job is terminal."""
    if query.since or query.until:
        raise Unsupported("these log files carry no timestamps: since/until cannot be applied")
    regex = compile_regex(query.regex)

    def one(path: str) -> AsyncIterator[bytes]:
        raw = _follow(host, path, until_done) if query.follow else _read(host, path)
        if regex is None:
            return raw
        # Lines are filtered per file, so a last line without "\n" never joins the next file's.
        return filter_lines(((b, 0) async for b in raw), regex, None, None)

    if query.follow and len(paths) > 1:
        chunks = merge([one(p) for p in paths], QUEUE_CHUNKS)
    else:
        chunks = _chain([one(p) for p in paths])
    async for chunk in batched(chunks):
        yield chunk


async def _read(host: Host, path: str, offset: int = 0) -> AsyncIterator[bytes]:
    """The file from byte `offset` to its current end; nothing if it does not exist (yet)."""
    argv = ["tail", "-c", f"+{offset + 1}", "--", path] if offset else ["cat", "--", path]
    async for chunk in host.stream(argv):
        yield chunk


class _Ended:
    """Queue items of a follow that are not bytes: who ended."""

    def __init__(self, what: str) -> None:
        self.what = what


_TAIL_ENDED, _JOB_ENDED = _Ended("the tail"), _Ended("the job")


async def _follow(
    host: Host, path: str, until_done: Callable[[], Coroutine[Any, Any, None]]
) -> AsyncIterator[bytes]:
    """The file as it grows, until the job is terminal; then whatever the tail had not yet
    delivered, read from the offset reached. Two tasks feed one bounded queue: the tail's
    chunks, and the job's end (or why either failed)."""
    queue: asyncio.Queue[bytes | _Ended | BaseException] = asyncio.Queue(QUEUE_CHUNKS)

    async def pump() -> None:
        try:
            async for chunk in host.stream(["sh", "-c", FOLLOW, "txd-follow", path]):
                await queue.put(chunk)
            await queue.put(_TAIL_ENDED)
        except Exception as e:  # a lost connection, say: the reader raises it
            await queue.put(e)

    async def watch() -> None:
        try:
            await until_done()
            await queue.put(_JOB_ENDED)
        except Exception as e:  # the daemon is shutting down, say
            await queue.put(e)

    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(pump()), loop.create_task(watch())]
    sent = 0
    try:
        while (item := await queue.get()) is not _JOB_ENDED:
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, bytes):
                sent += len(item)
                yield item
                if queue.empty():
                    yield b""  # caught up with the writer: flush
            # _TAIL_ENDED: nothing more can come from it; the job's end is still to come.
        tasks[0].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[0]
        while not queue.empty():  # what the tail delivered before it was stopped
            if isinstance(item := queue.get_nowait(), bytes):
                sent += len(item)
                yield item
        async for chunk in _read(host, path, sent):
            yield chunk
    finally:
        for task in tasks:
            task.cancel()


async def _chain(iters: list[AsyncIterator[bytes]]) -> AsyncIterator[bytes]:
    for it in iters:
        async for chunk in it:
            yield chunk
