"""Log files with a stream-and-time index: how txd keeps and serves the output of processes it
supervises.

A replica's output goes, as it arrives, to `<base>.log` (stdout and stderr interleaved in the
order they were read: a plain file users can `cat` or `tail -f`). Beside it, `<base>.idx` holds
17-byte records (file offset, unix time in ns, stream): "the bytes from this offset on came from
this stream, read at or after this time". A record is added when the stream changes or at least
1 ms has passed since the previous one, so the index stays small while stdout/stderr can be told
apart exactly and since/until keep millisecond precision. Both files are created on the first
byte of output: a job that prints nothing creates no file (file creation is what bounds
submissions per second on a slow disk).

A line's time is the time its first byte was read; readers keep lines with since <= time < until.
A line longer than LINE_LIMIT is filtered without ever being held whole in memory (see
LINE_LIMIT).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import struct
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from txd.schedulers import longlines
from txd.schedulers.api import LogQuery, LongLine, compile_regex
from txd.schedulers.longlines import LineScan
from txd.schedulers.pulse import Pulse
from txd.v1 import Stream

CHUNK = 64 * 1024
# The longest line a regex is tested against held whole in memory. A longer line (a progress
# bar without "\n", a dump) is searched as it comes, in windows (txd.schedulers.longlines):
# exactly over its whole length when the pattern's matches are bounded (at most
# longlines.MAX_REACH bytes with its lookarounds); otherwise a line no window matched is
# reported (on_long_line). Its bytes wait in a spool file meanwhile, so that a late match still
# sends the whole line, streamed; its time, like any line's, is that of its first byte. So a
# filter holds about LINE_LIMIT bytes of a line at most, whatever its length.
LINE_LIMIT = 1024 * 1024
_CAUGHT_UP = (b"", 0)  # from _pieces: no more bytes until the writer writes again
# filter_lines: what becomes of the rest of the current line.
_HOLD = "hold"  # kept until its "\n" (or LINE_LIMIT), then tested whole
_SCAN = "scan"  # overlong: searched as it comes (a LineScan), not decided yet
_SEND = "send"  # an overlong line that matched (or kept by since/until): sent as it comes
_DROP = "drop"  # filtered out: skipped as it comes
_REC = struct.Struct("<QQB")
_MIN_GAP_NS = 1_000_000


def data_path(base: Path) -> Path:
    return Path(f"{base}.log")


def index_path(base: Path) -> Path:
    return Path(f"{base}.idx")


class _Lost:
    """Bytes lost by every LogWriter of this process since it started (the daemon's metrics
    read it: txd_log_bytes_lost_total)."""

    def __init__(self) -> None:
        self.bytes = 0


LOST = _Lost()


def _always() -> bool:
    return True


class _Fence:
    """Whether this process may write log files now, for every LogWriter of it: `allows` is
    the daemon's lease on the state dir holding them (daemon.serving), so that a daemon that
    lost it to another (it was frozen past the takeover) writes none of the output it had
    queued. Bytes it may not write are dropped, not counted lost: the log is no longer its."""

    def __init__(self) -> None:
        self.allows: Callable[[], bool] = _always


FENCE = _Fence()


class LogWriter:
    """Writes one replica's stdout and stderr. Fed from the event loop's pipe callbacks (not
    thread-safe). `pulse` fires after every write and at close.

    A write that fails (a full disk: ENOSPC, EDQUOT) loses those bytes, never the replica: its
    pipes are read on, so it never blocks or gets EPIPE. Bytes lost in a row are counted, and
    the next write that fits first writes LOSS_MARK in their place, so every reader of the log
    sees where and how much was lost. `lost` counts every byte lost so far, `loss` says why;
    `on_loss` is called when a run of losses begins."""

    def __init__(self, base: Path, on_loss: Callable[[], None] | None = None) -> None:
        self.base = base
        self.pulse = Pulse()
        self.closed = False
        self.lost = 0
        self.loss = ""
        self._on_loss = on_loss
        self._fd = self._idx = -1
        self._size = 0
        self._idx_size = 0
        self._last_stream = -1
        self._last_ns = 0
        self._gap = 0  # bytes lost since the last mark
        self._gap_stream: int = Stream.STDOUT

    def write(self, stream: int, data: bytes) -> None:
        if not self._gap or self._mark():
            try:
                data = data[self._append(stream, data) :]
            except _Failed as e:
                data = data[e.written :]
                self.loss = e.reason
        if data:
            if not self._gap:
                self._gap_stream = stream
            self._gap += len(data)
            self.lost += len(data)
            LOST.bytes += len(data)
            if self._gap == len(data) and self._on_loss is not None:
                self._on_loss()
        self.pulse.fire()

    def _mark(self) -> bool:
        """Writes the mark of the bytes lost since the last one; False when it does not fit."""
        mark = LOSS_MARK.format(n=self._gap, why=self.loss).encode()
        try:
            if self._fd >= 0 and _free(self._fd) < len(mark) + _REC.size:
                return False  # not even the mark fits: no half mark
            self._append(self._gap_stream, mark)
        except _Failed:
            return False
        self._gap = 0
        return True

    def _append(self, stream: int, data: bytes) -> int:
        """Appends data to the log (and a record to the index when due); returns len(data).
        Raises _Failed with the count of bytes that made it into the log."""
        if not FENCE.allows():
            return len(data)
        written = 0
        try:
            if self._fd < 0:
                self._open()
            now = time.time_ns()
            if stream != self._last_stream or now - self._last_ns >= _MIN_GAP_NS:
                rec = _REC.pack(self._size, now, stream)
                if os.write(self._idx, rec) != len(rec):  # half a record would shift the rest
                    os.ftruncate(self._idx, self._idx_size)
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                self._idx_size += len(rec)
                self._last_stream, self._last_ns = stream, now
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
                written += n
                self._size += n
        except OSError as e:
            raise _Failed(written, e.strerror or str(e)) from None
        return written

    def create(self) -> None:
        """Creates (opens) the log and its index now rather than at the first write. Creating
        a file takes 0.1 to over 1 ms of a busy disk's time, so a replica's are made off the
        event loop (LocalScheduler.schedule), before its process starts: safe in another thread
        only until the first write. A failure is left to the first write, which counts the
        bytes lost as always."""
        if self._fd < 0 and not self.closed and FENCE.allows():
            with contextlib.suppress(OSError):
                self._open()

    def _open(self) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        fd = os.open(data_path(self.base), flags, 0o600)
        try:
            self._idx = os.open(index_path(self.base), flags, 0o600)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd

    def close(self) -> None:
        if not self.closed:
            if self._gap:
                self._mark()
            self.closed = True
            if self._fd >= 0:
                os.close(self._fd)
                os.close(self._idx)
            self.pulse.fire()


# Written into a log where bytes were lost (stream of the first lost byte).
LOSS_MARK = "\n[txd: {n} bytes of output lost here: {why}]\n"


class _Failed(Exception):
    def __init__(self, written: int, reason: str) -> None:
        self.written = written
        self.reason = reason


def _free(fd: int) -> int:
    st = os.fstatvfs(fd)
    return st.f_bavail * st.f_frsize


@dataclass
class LogSource:
    """One replica's log, and how to learn whether more output can come."""

    base: Path
    pulse: Pulse | None  # None when nothing writes any more (a job finished before a restart)
    finished: Callable[[], bool]  # True once the writer is closed for good


class _Index:
    """The index of a log, read incrementally as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: list[tuple[int, int, int]] = []
        self._read = 0

    def refresh(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._read)
                data = f.read()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % _REC.size
        self.records.extend(_REC.iter_unpack(data[:whole]))
        self._read += whole


async def _pieces(
    src: LogSource, stream: int, follow: bool, timed: bool, start: int = 0
) -> AsyncIterator[tuple[bytes, int]]:
    """(bytes, time of the index record they belong to) of one stream, in order, at most CHUNK
    bytes each, from byte `start` of the file on. The combined stream without time filters
    needs no index (time 0)."""
    index = _Index(index_path(src.base)) if stream != Stream.COMBINED or timed else None
    fd = -1
    pos, seg = start, 0
    try:
        while True:
            gen = src.pulse.gen if src.pulse else 0
            done = src.pulse is None or src.finished()
            if fd < 0:
                with contextlib.suppress(FileNotFoundError):  # no output yet
                    fd = os.open(data_path(src.base), os.O_RDONLY)
            if fd >= 0:
                size = os.fstat(fd).st_size
                if index is not None:
                    index.refresh()
                records = index.records if index is not None else [(0, 0, stream)]
                while seg < len(records):
                    offset, when, source = records[seg]
                    last = seg + 1 == len(records)
                    end = size if last else records[seg + 1][0]
                    pos = max(pos, offset)
                    if stream in (Stream.COMBINED, source):
                        while pos < end:
                            block = os.pread(fd, min(CHUNK, end - pos), pos)
                            if not block:
                                break
                            pos += len(block)
                            yield block, when
                    else:
                        pos = end
                    if last:
                        break  # the last segment may still grow
                    seg += 1
            if done or not follow:
                return
            yield _CAUGHT_UP
            await src.pulse.wait_past(gen)  # type: ignore[union-attr]
    finally:
        if fd >= 0:
            os.close(fd)


async def filter_lines(
    pieces: AsyncIterator[tuple[bytes, int]],
    regex: re.Pattern[bytes] | None,
    since_ns: int | None,
    until_ns: int | None,
    on_long_line: Callable[[LongLine], None] | None = None,
) -> AsyncIterator[bytes]:
    """Keeps the whole lines that pass the filters; a last line without a newline is tested
    when the pieces end. Lines over LINE_LIMIT are searched as they come (see LINE_LIMIT); one
    dropped without certainty is passed to `on_long_line`.

    Linear in the bytes read (each is copied a fixed number of times), and cooperative: it
    yields to the event loop after every piece, so a scan that keeps nothing does not stall
    the daemon, and a consumer that cancels or closes it stops the reading there (`pieces` is
    closed)."""
    held: list[bytes] = []  # the current line so far, while it can still be tested whole
    held_len = 0
    mode = _HOLD  # what becomes of the rest of the current line
    out: list[bytes | LineScan] = []  # what this piece sends (a LineScan: its line so far)
    scope = longlines.reach(regex) if regex is not None else None
    scan: LineScan | None = None  # the current line's, once it is overlong
    line_start = 0  # where the current line begins, in the bytes read

    def feed(seg: bytes, ends: bool, newline: bool = True) -> None:
        """The next bytes of the current line, without its newline; `ends`: it ends there
        (`newline`: with one)."""
        nonlocal held_len, mode, scan
        nl = b"\n" if newline else b""
        if mode == _HOLD:
            if ends or held_len + len(seg) <= LINE_LIMIT:
                if not ends:
                    held.append(seg)
                    held_len += len(seg)
                    return
                line = b"".join([*held, seg]) if held else seg  # in memory already: test whole
                held.clear()
                held_len = 0
                if regex is None or regex.search(line):
                    out.extend((line, nl))
                return
            if regex is None:  # kept by since/until: sent as it comes
                out.extend(held)
                mode = _SEND
            else:
                assert scope is not None
                scan = LineScan(regex, scope, line_start)
                seg = b"".join([*held, seg])
                mode = _SCAN
            held.clear()
            held_len = 0
        if mode == _SCAN:
            assert scan is not None
            if scan.feed(seg, ends):
                out.append(scan)  # its spool holds the line so far: sent from there
                mode, scan = _SEND, None
                if ends:
                    out.append(nl)
            elif ends:
                if scan.unsure and on_long_line is not None:
                    on_long_line(LongLine(scan.offset, scan.length))
                scan.close()
                mode, scan = _HOLD, None
            return
        if mode == _SEND:
            out.append(seg)
            if ends:
                out.append(nl)

    in_line = False  # a line has begun and not ended
    read = 0  # bytes of the pieces before this one
    try:
        async for block, when in pieces:
            if not block:
                yield b""  # caught up: let the caller flush
                continue
            pos, n = 0, len(block)
            if in_line:
                nl = block.find(b"\n")
                if nl < 0:
                    feed(block, False)
                    pos = n
                else:
                    feed(block[:nl], True)
                    pos, in_line = nl + 1, False
            if pos < n:  # lines begin in this piece: their time is `when`
                if until_ns is not None and when >= until_ns:
                    for part in _drained(out):
                        yield part
                    return
                last = block.rfind(b"\n", pos)  # the newline of the last line ending here
                if since_ns is not None and when < since_ns:
                    mode = _DROP  # these lines, and the one going on past this piece
                elif last < 0:
                    mode = _HOLD
                elif last - pos <= LINE_LIMIT:  # none of the lines is overlong: all at once
                    mode = _HOLD
                    if regex is None:
                        out.append(block[pos : last + 1])
                    else:
                        kept = [x for x in block[pos:last].split(b"\n") if regex.search(x)]
                        if kept:
                            out.extend((b"\n".join(kept), b"\n"))
                else:  # a piece longer than the limit (remote files): line by line
                    for line in block[pos:last].split(b"\n"):
                        mode = _HOLD
                        feed(line, True)
                    mode = _HOLD
                if last + 1 < n:  # a line begins and goes on in the next pieces
                    in_line = True
                    line_start = read + max(last + 1, pos)
                    feed(block[max(last + 1, pos) :], False)
            read += n
            for part in _drained(out):
                yield part
            await asyncio.sleep(0)  # let other RPCs (and a cancellation) in
        if in_line:
            feed(b"", True, newline=False)
            for part in _drained(out):
                yield part
    finally:
        for s in [scan, *out]:  # a scan going on, matched lines not sent yet
            if isinstance(s, LineScan):
                s.close()
        await _aclose(pieces)


def _drained(out: list[bytes | LineScan]) -> Iterator[bytes]:
    """What `out` holds, joined where it can be; a matched long line read back from its spool
    in pieces. Empties `out`."""
    run: list[bytes] = []
    for item in out:
        if isinstance(item, LineScan):
            if data := b"".join(run):
                yield data
            run = []
            yield from item.spool.pieces()
            item.close()
        else:
            run.append(item)
    out.clear()
    if run and (data := b"".join(run)):
        yield data


async def read_log(src: LogSource, query: LogQuery) -> AsyncIterator[bytes]:
    """Chunks of the replica's log as selected by query (see Scheduler.log_iter)."""
    timed = query.since is not None or query.until is not None
    start = skip = 0
    plain = not query.regex and not timed and query.stream == Stream.COMBINED
    if query.tail is not None and plain:
        start = tail_offset(data_path(src.base), query.tail)  # the file's end, not all of it
    if query.offset:  # a resumed read: the combined file's bytes are what is sent, so seek
        start, skip = (query.offset, 0) if plain else (0, query.offset)
    chunks = selected(_pieces(src, query.stream, query.follow, timed, start), query)
    if skip:
        chunks = skipped(chunks, skip)
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        await _aclose(chunks)


async def selected(
    pieces: AsyncIterator[tuple[bytes, int]], query: LogQuery
) -> AsyncIterator[bytes]:
    """Batched chunks of `pieces` (blocks of a replica's bytes, each with when it was written,
    in ns) as the query selects them: lines matching its regex, written in
    [since, until). Closes `pieces` when done; every scheduler reading timed pieces uses it."""
    since_ns = int(query.since.timestamp() * 1e9) if query.since else None
    until_ns = int(query.until.timestamp() * 1e9) if query.until else None
    regex = compile_regex(query.regex)
    if regex is None and since_ns is None and until_ns is None:
        chunks: AsyncIterator[bytes] = (block async for block, _ in pieces)
    else:
        chunks = filter_lines(pieces, regex, since_ns, until_ns, query.on_long_line)
    out = batched(chunks)
    try:
        async for chunk in out:
            yield chunk
    finally:
        await _aclose(out)
        await _aclose(pieces)  # a generator expression does not close its source


async def skipped(chunks: AsyncIterator[bytes], n: int) -> AsyncIterator[bytes]:
    """`chunks` without their first n bytes (a resumed read where nothing can seek); empty
    chunks (caught up) pass. Closes `chunks` when done."""
    try:
        async for chunk in chunks:
            if n and chunk:
                cut = min(n, len(chunk))
                chunk, n = chunk[cut:], n - cut
                if not chunk:
                    continue
            yield chunk
    finally:
        await _aclose(chunks)


def tail_offset(path: Path, n: int) -> int:
    """Where the file's last n lines begin, at most one line earlier (when the file ends
    without a newline: that line counts too); 0 when it has no more, or does not exist.
    Reads from the end back, CHUNK bytes at a time, until n + 1 newlines are seen."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        pos, need = os.fstat(fd).st_size, n + 1
        while pos > 0:
            size = min(CHUNK, pos)
            pos -= size
            block = os.pread(fd, size, pos)
            count = block.count(b"\n")
            if count < need:
                need -= count
                continue
            i = len(block)
            for _ in range(need):
                i = block.rfind(b"\n", 0, i)
            return pos + i + 1
        return 0
    finally:
        os.close(fd)


async def batched(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Joins small pieces (a line, one index segment) into messages of up to CHUNK bytes, sent
    at once whenever the reader has caught up (an empty piece says so), followed by an empty
    chunk that tells the consumer it has caught up: the first time (an empty log too), then
    once after each run of data (also when the data was just sent for its size)."""
    buf: list[bytes] = []
    size = 0
    unmarked = True  # no empty chunk was sent since the start or the last data
    try:
        async for chunk in chunks:
            buf.append(chunk)
            size += len(chunk)
            if size and (size >= CHUNK or not chunk):
                yield b"".join(buf)
                buf, size, unmarked = [], 0, True
            if not chunk and unmarked:
                yield b""  # caught up (Scheduler.log_iter, rule 7)
                unmarked = False
        if size:
            yield b"".join(buf)
    finally:
        await _aclose(chunks)


async def _aclose(it: AsyncIterator[object]) -> None:
    """Closes an async generator now. Left to the garbage collector, a generator abandoned
    mid-way (its consumer cancelled or closed) would keep its file open, or its remote `cat`
    running, until the loop gets round to finalizing it."""
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        await aclose()
