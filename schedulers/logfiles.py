"""Log files with a time index: how txd keeps and serves the output of processes it supervises.

A replica's output is written as it arrives to three plain files users can `cat` or `tail -f`:
`stdout.log`, `stderr.log` and `combined.log` (both streams in the order they were read). Beside
each, `<name>.idx` holds 16-byte records (file offset, unix time in ns): "bytes from this offset
on were read at or after this time". A record is added when at least 1 ms has passed since the
previous one, so the index stays small while since/until keep millisecond precision.

A line's time is the time its first byte was read. Readers select lines with since <= time <
until by binary search in the index, then move to line boundaries.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from txd.schedulers.api import LogQuery, compile_regex
from txd.schedulers.pulse import Pulse
from txd.v1.runner_pb2 import Stream

CHUNK = 64 * 1024
_REC = struct.Struct("<QQ")
_MIN_GAP_NS = 1_000_000
STREAM_FILES = {Stream.STDOUT: "stdout", Stream.STDERR: "stderr", Stream.COMBINED: "combined"}


class _IndexedFile:
    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.idx = os.open(path.with_suffix(".idx"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = 0
        self.last_ns = 0

    def append(self, data: bytes, now_ns: int) -> None:
        if now_ns - self.last_ns >= _MIN_GAP_NS:
            os.write(self.idx, _REC.pack(self.size, now_ns))
            self.last_ns = now_ns
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        self.size += len(data)

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.idx)


class LogWriter:
    """Writes one replica's stdout and stderr into its directory. Not thread-safe: it is fed
    from the event loop's pipe callbacks. `pulse` fires after every write and at close."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._files = {s: _IndexedFile(directory / f"{n}.log") for s, n in STREAM_FILES.items()}
        self.pulse = Pulse()
        self.closed = False

    def write(self, stream: int, data: bytes) -> None:
        now = time.time_ns()
        self._files[stream].append(data, now)
        self._files[Stream.COMBINED].append(data, now)
        self.pulse.fire()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for f in self._files.values():
                f.close()
            self.pulse.fire()


def _offset_at(idx_path: Path, when_ns: int) -> int | None:
    """Offset of the first byte read at or after when_ns, or None if none was yet."""
    try:
        with open(idx_path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    lo, hi = 0, len(data) // _REC.size
    while lo < hi:
        mid = (lo + hi) // 2
        if _REC.unpack_from(data, mid * _REC.size)[1] < when_ns:
            lo = mid + 1
        else:
            hi = mid
    if lo == len(data) // _REC.size:
        return None
    return _REC.unpack_from(data, lo * _REC.size)[0]


def _line_start_at_or_after(fd: int, offset: int) -> int:
    """The first line start >= offset (offset itself when the byte before it is a newline)."""
    if offset == 0 or os.pread(fd, 1, offset - 1) == b"\n":
        return offset
    pos = offset
    while True:
        block = os.pread(fd, CHUNK, pos)
        if not block:
            return pos
        nl = block.find(b"\n")
        if nl >= 0:
            return pos + nl + 1
        pos += len(block)


@dataclass
class LogSource:
    """One replica's log directory plus how to learn whether more output can come."""

    directory: Path
    pulse: Pulse | None  # None when nothing writes any more (a finished job after a restart)
    finished: Callable[[], bool]  # True once the writer is closed for good


async def read_log(src: LogSource, query: LogQuery) -> AsyncIterator[bytes]:
    """Yields chunks of the replica's log as selected by query (see Scheduler.log_iter)."""
    name = STREAM_FILES[query.stream]
    path = src.directory / f"{name}.log"
    idx_path = path.with_suffix(".idx")
    regex = compile_regex(query.regex)
    since_ns = int(query.since.timestamp() * 1e9) if query.since else None
    until_ns = int(query.until.timestamp() * 1e9) if query.until else None
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        pos = 0
        if since_ns is not None:
            start = _offset_at(idx_path, since_ns)
            # Nothing written since `since` yet: start at the current end.
            pos = os.fstat(fd).st_size if start is None else start
            pos = _line_start_at_or_after(fd, pos)
        end: int | None = None
        partial = b""
        while True:
            gen = src.pulse.gen if src.pulse else 0
            done = src.finished() or src.pulse is None
            if until_ns is not None and end is None:
                cut = _offset_at(idx_path, until_ns)
                if cut is not None:
                    end = _line_start_at_or_after(fd, cut)
            limit = end if end is not None else os.fstat(fd).st_size
            while pos < limit:
                block = os.pread(fd, min(CHUNK, limit - pos), pos)
                if not block:
                    break
                pos += len(block)
                if regex is None:
                    yield block
                    continue
                lines = (partial + block).split(b"\n")
                partial = lines.pop()
                kept = b"".join(ln + b"\n" for ln in lines if regex.search(ln))
                if kept:
                    yield kept
            at_end = end is not None and pos >= end
            if at_end or done or not query.follow:
                if partial and regex is not None and regex.search(partial):
                    yield partial
                return
            await src.pulse.wait_past(gen)  # type: ignore[union-attr]
    finally:
        os.close(fd)
