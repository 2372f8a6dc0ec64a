"""Log files written by a batch system (Slurm's srun, LSF's job output), read where they lie:
on this host or on a login node, through the scheduler's Host.

Reading is `cat`; following is a `cat` of what each file holds now (then the follow says it has
caught up: Scheduler.log_iter, rule 7, which a tail relies on), then `tail -F` from the offset
reached, which wakes on inotify where the files are, so bytes reach clients as they are
written. A file the job has not created yet is waited for by checking every POLL_MISSING
seconds; the tail starts once it exists. A follow ends once the job is terminal (aiters.JobEnd
cuts the tail there): whatever the tail had not delivered yet is read from the byte offset it
reached, so no byte is lost or repeated.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from txd.schedulers.aiters import JobEnd, merge
from txd.schedulers.api import Ended, LogQuery, compile_regex
from txd.schedulers.errors import Unsupported
from txd.schedulers.hpc.hosts import CHUNK, Host
from txd.schedulers.logfiles import batched, filter_lines

# Chunks buffered per followed file: bounds memory when the client reads slowly.
QUEUE_CHUNKS = 4
# How often a follow checks for a log file the job has not created yet (seconds).
POLL_MISSING = 0.1
# `tail -F` from byte $1 of file $2, started once the file exists, and ended when its stdin
# closes.
# - GNU tail uses inotify only for files that exist when it starts: given a missing file it polls
#   every `-s` seconds (default 1) for good, even after the file appears, and lines came in 1 s
#   batches. So the file is waited for first, then tail is exec'd and wakes on every write.
# - A command whose SSH channel is closed runs on until it next writes, and tail -F of a finished
#   log may never write again: without the kill it would stay on the login node for good.
FOLLOW = (
    f'{{ until [ -e "$2" ]; do sleep {POLL_MISSING}; done; exec tail -c "+$1" -F -- "$2"; }}'
    ' 2>/dev/null & t=$!; cat >/dev/null; kill "$t"'
)


async def read_files(
    host: Host, paths: Sequence[str], query: LogQuery, ended: Ended
) -> AsyncIterator[bytes]:
    """The bytes of `paths` (one after the other, or interleaved as written when following),
    filtered by query.regex. `ended` returns once the job is terminal."""
    if query.since or query.until:
        raise Unsupported("these log files carry no timestamps: since/until cannot be applied")
    regex = compile_regex(query.regex)

    def filtered(raw: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        if regex is None:
            return raw
        # Lines are filtered per file, so a last line without "\n" never joins the next file's.
        return filter_lines(((b, 0) async for b in raw), regex, None, None, query.on_long_line)

    if not query.follow:
        chunks = _chain([filtered(_read(host, p)) for p in paths])
    else:
        chunks = _caught_up_all(
            [_marked(filtered(_backlog_then_follow(host, p, ended))) for p in paths]
        )
    async for chunk in batched(chunks):
        yield chunk


class _Mark:
    """In a followed file's chunks: its backlog (what it held when the follow began) was sent."""


_BACKLOG_SENT = _Mark()


async def _backlog_then_follow(host: Host, path: str, ended: Ended) -> AsyncIterator[bytes]:
    """What the file holds now, b"" (the first empty chunk: the backlog was sent), then the
    file as it grows from there (see _follow)."""
    offset = 0
    async for chunk in _read(host, path):
        offset += len(chunk)
        yield chunk
    yield b""
    async for chunk in _follow(host, path, ended, offset):
        yield chunk


async def _marked(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes | _Mark]:
    """The chunks, the first empty one (the backlog's end, filtered or not) as _BACKLOG_SENT."""
    marked = False
    async for chunk in chunks:
        if not chunk and not marked:
            marked = True
            yield _BACKLOG_SENT
        else:
            yield chunk


async def _caught_up_all(files: list[AsyncIterator[bytes | _Mark]]) -> AsyncIterator[bytes]:
    """The files' chunks, interleaved as they come, with one b"" once every file's backlog was
    sent (not before: a tail takes its lines at the first empty chunk)."""
    pending = len(files)
    chunks = merge(files, QUEUE_CHUNKS) if len(files) > 1 else files[0]
    async for chunk in chunks:
        if isinstance(chunk, _Mark):
            pending -= 1
            if pending == 0:
                yield b""
        elif chunk or pending == 0:
            yield chunk


async def _read(host: Host, path: str, offset: int = 0) -> AsyncIterator[bytes]:
    """The file from byte `offset` to its current end; nothing if it does not exist (yet)."""
    argv = ["tail", "-c", f"+{offset + 1}", "--", path] if offset else ["cat", "--", path]
    async for chunk in host.stream(argv):
        yield chunk


async def _follow(host: Host, path: str, ended: Ended, offset: int) -> AsyncIterator[bytes]:
    """The file as it grows from byte `offset`, until the job is terminal; then whatever the
    tail had not yet delivered, read from the offset reached."""
    sent = offset
    async with JobEnd(ended) as end:
        argv = ["sh", "-c", FOLLOW, "txd-follow", str(offset + 1), path]
        tail = _caught_up(host.stream(argv))
        chunks = end.until(tail, QUEUE_CHUNKS)
        try:
            async for chunk in chunks:
                sent += len(chunk)
                yield chunk
        finally:  # a reader that stops first stops the tail now, not when chunks is collected
            await chunks.aclose()
    async for chunk in _read(host, path, sent):
        yield chunk


async def _caught_up(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The chunks, each one shorter than CHUNK followed by b"": Host.stream reads up to CHUNK
    bytes of what the command has written, so a shorter read took everything written so far.
    The empty chunk tells logfiles.batched to send what it holds (Scheduler.log_iter, rule 7)."""
    async for chunk in chunks:
        yield chunk
        if len(chunk) < CHUNK:
            yield b""


async def _chain(iters: list[AsyncIterator[bytes]]) -> AsyncIterator[bytes]:
    for it in iters:
        async for chunk in it:
            yield chunk
