"""filter_lines and read_log without a daemon: whole lines, overlong lines (LINE_LIMIT), since/until
at their boundaries, bounded memory, yielding to the event loop, and stopping (closing the
reader) as soon as the consumer stops."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import random
import re
import tracemalloc
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path

import pytest
from txd.schedulers import logfiles, longlines
from txd.schedulers.api import LogQuery, LongLine
from txd.schedulers.logfiles import (
    CHUNK,
    LINE_LIMIT,
    LogSource,
    LogWriter,
    data_path,
    filter_lines,
    read_log,
)
from txd.v1 import Stream

MiB = 1 << 20


class Source:
    """(bytes, time) pieces, counting how many were taken and whether the reader was closed."""

    def __init__(self, pieces: Iterable[tuple[bytes, int]]) -> None:
        self._pieces = pieces
        self.taken = 0
        self.closed = False

    async def gen(self) -> AsyncIterator[tuple[bytes, int]]:
        try:
            for piece in self._pieces:
                self.taken += 1
                yield piece
        finally:
            self.closed = True


def split(data: bytes, when: int = 0, size: int = CHUNK) -> Iterator[tuple[bytes, int]]:
    """data in pieces of `size` bytes, all read at `when` (sliced lazily: no copy held)."""
    for i in range(0, len(data), size):
        yield data[i : i + size], when


async def run(
    pieces: Iterable[tuple[bytes, int]],
    regex: bytes | None = None,
    since: int | None = None,
    until: int | None = None,
) -> bytes:
    pattern = re.compile(regex) if regex is not None else None
    return b"".join([c async for c in filter_lines(Source(pieces).gen(), pattern, since, until)])


# -- lines up to the limit: whole lines, as ever --------------------------------------------------


async def test_whole_lines_across_pieces_and_final_partial_line() -> None:
    pieces = [(b"ab", 0), (b"c\nde", 0), (b"", 0), (b"f\ngh", 0)]
    assert await run(pieces, rb"c|h") == b"abc\ngh"
    assert await run(pieces, rb"e") == b"def\n"
    assert await run(pieces, rb"^gh$") == b"gh"
    assert await run(pieces, rb"^$") == b""
    assert await run([(b"\n\nx\n", 0)], rb"^$") == b"\n\n"


async def test_caught_up_marker_passes_through_for_flushing() -> None:
    out = [c async for c in filter_lines(Source([(b"a\n", 0), (b"", 0)]).gen(), None, 0, None)]
    assert out == [b"a\n", b""]


async def test_line_exactly_at_the_limit_is_tested_whole() -> None:
    line = b"x" * (LINE_LIMIT - 1) + b"y"
    assert await run(split(line + b"\nz\n"), rb"y$") == line + b"\n"
    assert await run(split(line + b"\n"), rb"xy$") == line + b"\n"
    # The same line, last and without "\n" (also as one single piece).
    assert await run(split(line), rb"y$") == line
    assert await run([(line, 0)], rb"y$") == line
    assert await run(split(line), rb"z") == b""


# -- overlong lines -----------------------------------------------------------------------------


async def test_overlong_line_is_searched_whole() -> None:
    line = b"x" * LINE_LIMIT + b"y"  # one byte over the limit
    data = line + b"\nnext y\n"
    assert await run(split(data), rb"y") == data
    assert await run([(data, 0)], rb"y") == data  # one piece holding it all
    assert await run(split(data), rb"^x") == line + b"\n"
    # The line ends at its newline, not at the limit: `$` matches there only.
    assert await run(split(data), rb"^x+$") == b""
    assert await run(split(data), rb"^x+y$") == line + b"\n"
    assert await run(split(data), rb"xy\b") == line + b"\n"
    assert await run(split(data), rb"x\b") == b""


async def test_overlong_line_matched_is_sent_whole_not_matched_dropped() -> None:
    line = b"BEGIN" + b"x" * (5 * MiB)
    data = b"before\n" + line + b"\nafter BEGIN\n"
    assert await run(split(data), rb"BEGIN") == line + b"\n" + b"after BEGIN\n"
    assert await run(split(data), rb"^BEGINx") == line + b"\n"
    assert await run(split(data), rb"BEGIN$") == b"after BEGIN\n"
    assert await run(split(data), rb"before|after") == b"before\nafter BEGIN\n"
    # In one piece bigger than the limit (remote files may come in big pieces).
    assert await run([(data, 0)], rb"^BEGINx") == line + b"\n"
    assert await run([(data, 0)], rb"after") == b"after BEGIN\n"


async def test_overlong_final_line_without_newline() -> None:
    line = b"head" + b"z" * (2 * MiB) + b"tail"
    assert await run(split(b"a\n" + line), rb"^head") == line
    assert await run(split(b"a\n" + line), rb"^a$|tail$") == b"a\n" + line
    assert await run(split(b"a\n" + line), rb"z$") == b""


async def test_bytes_are_never_decoded() -> None:
    long = b"\xff\r" + b"\x80" * LINE_LIMIT + b"\r"
    data = long + b"\n\xc3\x28\r\n"
    assert await run(split(data), rb"^\xff\r") == long + b"\n"
    assert await run(split(data), rb"\xc3\x28\r$") == b"\xc3\x28\r\n"


@pytest.mark.parametrize("regex", [rb"^BEGIN", rb"nomatch"])
async def test_overlong_line_is_never_held_whole(regex: bytes) -> None:
    """Whether an overlong line is sent or dropped, the filter holds at most about LINE_LIMIT
    bytes of it at a time, however long it is."""
    data = b"BEGIN" + b"x" * (16 * MiB) + b"\n"
    pattern = re.compile(regex)
    sent = 0
    tracemalloc.start()
    try:
        async for chunk in filter_lines(Source(split(data)).gen(), pattern, None, None):
            sent += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sent == (len(data) if regex == rb"^BEGIN" else 0)
    assert peak < 4 * LINE_LIMIT, f"peak {peak / MiB:.1f} MiB for a 16 MiB line"


async def test_needle_deep_in_a_40mb_line_is_found_in_bounded_memory() -> None:
    """Issue 18, item 6: `needle` at byte 20M of a 40 MB line was dropped silently (only the
    first LINE_LIMIT bytes were tested). Found now, the line sent whole, while the filter's
    heap stays about LINE_LIMIT; a pattern that cannot match sends nothing and reports nothing."""
    half = b"x" * (20 * MiB)
    line = half + b"needle" + half
    data = b"first\n" + line + b"\nlast\n"
    cases = [
        (rb"needle", line + b"\n"),
        (rb"(?<=x)needle(?=x{4})", line + b"\n"),
        (rb"x{2}$", line + b"\n"),
        (rb"needle$", b""),
        (rb"nomatch|needles", b""),
    ]
    for regex, want in cases:
        reported: list[LongLine] = []
        sent, head = 0, b""
        tracemalloc.start()
        try:
            pieces = Source(split(data)).gen()
            async for chunk in filter_lines(pieces, re.compile(regex), None, None, reported.append):
                sent += len(chunk)
                head = head or chunk[:8]
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (sent, head) == (len(want), want[:8]), regex
        assert reported == []
        assert peak < 4 * LINE_LIMIT, f"{regex!r}: peak {peak / MiB:.1f} MiB for a 40 MB line"


async def test_unbounded_pattern_reports_the_line_it_may_have_missed() -> None:
    """A match of `B.*needle` can be longer than any window: a long line it does not match is
    reported (where it begins, how long it is), one it matches is sent; short lines are exact."""
    long = b"B" + b"x" * (3 * MiB) + b"needle"
    data = b"B needle\n" + long + b"\nshort\n"
    reported: list[LongLine] = []
    pattern = re.compile(rb"B.*needle")
    got = b"".join([c async for c in filter_lines(Source(split(data)).gen(), pattern, None, None,
                                                  reported.append)])  # fmt: skip
    assert got == b"B needle\n"
    assert reported == [LongLine(offset=len(b"B needle\n"), length=len(long))]
    # An atomic group commits to its first alternative that matches: cut by a window's end,
    # `xa*b` fails and `x` is taken, then `a` matches at once, far from that end; the whole
    # line commits to `xa*b` and fails. So no window's match is trusted: reported, not sent.
    atomic = b"x" + b"a" * (3 * MiB) + b"bz"
    pattern = re.compile(rb"(?>xa*b|x)a")
    assert pattern.search(atomic) is None
    reported.clear()
    got = b"".join([c async for c in filter_lines(Source(split(atomic)).gen(), pattern, None,
                                                  None, reported.append)])  # fmt: skip
    assert got == b""
    assert reported == [LongLine(offset=0, length=len(atomic))]
    # Matched within a window: sent whole, nothing to report; `x.*` cannot depend on an edge.
    for regex in (rb"Bx{5}.*", rb"xneedle"):
        reported.clear()
        got = b"".join([c async for c in filter_lines(Source(split(data)).gen(),
                                                      re.compile(regex), None, None,
                                                      reported.append)])  # fmt: skip
        assert got == long + b"\n", regex
        assert reported == []


def model(
    pieces: list[tuple[bytes, int]],
    regex: re.Pattern[bytes] | None,
    since: int | None,
    until: int | None,
) -> list[tuple[bytes, int, bool]]:
    """The rule, line by line: a line's time is its first byte's; the regex is tested on the
    whole line; the first line at or after `until` ends the read. The lines kept: (content with
    its newline, offset, whether it is kept)."""
    lines: list[tuple[bytes, int, int, bool]] = []  # (content, offset, time, ended by "\n")
    cur, cur_time, cur_at, open_ = b"", 0, 0, False
    at = 0
    for block, when in pieces:
        for byte in block:
            if not open_:
                cur_time, cur_at, open_ = when, at, True
            at += 1
            if byte == ord("\n"):
                lines.append((cur, cur_at, cur_time, True))
                cur, open_ = b"", False
            else:
                cur += bytes([byte])
    if open_:
        lines.append((cur, cur_at, cur_time, False))
    out = []
    for content, offset, t, ended in lines:
        if until is not None and t >= until:
            break
        if since is not None and t < since:
            continue
        out.append((content + b"\n" * ended, offset, regex is None or bool(regex.search(content))))
    return out


# Patterns whose reach is bounded (searched exactly, whatever the line's length), and ones
# whose matches can be longer than longlines.MAX_REACH (a line they miss must be reported).
BOUNDED = [
    rb"(?>ab|a)b",
    rb"a?+\r",
    rb"a",
    rb"^a",
    rb"b$",
    rb"^$",
    rb"ab|ba",
    rb"^[ab]{3}$",
    rb"(?<=a)b\b",
    rb"a(?!b)",
    rb"a(?!b\r)",
]
UNBOUNDED = [
    rb"(?>ab|a)b",
    rb"a?+\r",
    rb"a[ab\r]*b",
    rb"^a.*b$",
    rb"a.*",
    rb"\bb+\r",
    rb"(?<=\xff)a+(?=b)",
    rb"(?>a*\r|a)b",
    rb"b(?>a+)\xff",
    rb"ba*+\r",
]


async def test_matches_the_line_by_line_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random logs cut into random pieces, with a small limit, windows and overlap, so that
    overlong lines, windows cut anywhere, pieces longer than the limit and lines at the limit
    all come up (fixed seed: reproducible)."""
    limit = 6
    monkeypatch.setattr(logfiles, "LINE_LIMIT", limit)
    monkeypatch.setattr(longlines, "MAX_REACH", 5)
    rng = random.Random(7)
    for _ in range(6000):
        monkeypatch.setattr(longlines, "STEP", rng.choice([1, 2, 3, 7]))
        data = bytes(rng.choice(b"ab\n\n\r\xff") for _ in range(rng.randrange(60)))
        pieces, pos, when = [], 0, 0
        while pos < len(data):
            size = rng.choice([1, 2, 3, 5, 6, 7, 13, 40])
            when += rng.randrange(2)
            pieces.append((data[pos : pos + size], when))
            pos += size
        rx = rng.choice([None, *BOUNDED, *UNBOUNDED])
        pattern = re.compile(rx) if rx is not None else None
        since = rng.choice([None, 0, 1, 2, 4])
        until = rng.choice([None, 1, 3, 5, 100])
        if pattern is None and since is None and until is None:
            since = 0  # filter_lines is only used with some filter
        reported: list[LongLine] = []
        got = b"".join(
            [
                c
                async for c in filter_lines(
                    Source(pieces).gen(), pattern, since, until, reported.append
                )
            ]
        )
        lines = model(pieces, pattern, since, until)
        unsure = {r.offset for r in reported}
        expected = b"".join(line for line, at, keep in lines if keep and at not in unsure)
        assert got == expected, (pieces, rx, since, until, reported)
        lengths = {at: len(line.rstrip(b"\n")) for line, at, _ in lines}
        for r in reported:
            assert rx in UNBOUNDED and lengths[r.offset] == r.length > limit, (pieces, rx, r)


# -- since / until ------------------------------------------------------------------------------

# Lines "a1" (t=10), "a2x" (first byte at 10, ends at 20), "b1" (20), "c1" (30).
TIMED = [(b"a1\na2", 10), (b"x\nb1\n", 20), (b"c1\n", 30)]


@pytest.mark.parametrize(
    ("since", "until", "expected"),
    [
        (None, None, b"a1\na2x\nb1\nc1\n"),
        (10, None, b"a1\na2x\nb1\nc1\n"),
        (11, None, b"b1\nc1\n"),  # a2x ends at 20 but began at 10
        (20, None, b"b1\nc1\n"),  # since is inclusive
        (31, None, b""),
        (None, 10, b""),  # until is exclusive
        (None, 11, b"a1\na2x\n"),
        (None, 20, b"a1\na2x\n"),
        (None, 30, b"a1\na2x\nb1\n"),
        (20, 30, b"b1\n"),
        (30, 20, b""),
    ],
)
async def test_since_until_boundaries(
    since: int | None, until: int | None, expected: bytes
) -> None:
    assert await run(TIMED, None, since, until) == expected
    assert await run(TIMED, rb"1|2", since, until) == expected


async def test_overlong_line_takes_the_time_of_its_first_byte() -> None:
    long = b"L" * (3 * MiB)
    # The long line starts at t=10 and goes on in pieces read at t=20, 30 ...; "s" comes at 50.
    pieces = [(b"a\n" + long[:CHUNK], 10)]
    pieces += [(p, 20 + i) for i, (p, _) in enumerate(split(long[CHUNK:]))]
    pieces += [(b"\ns\n", 50)]
    assert await run(pieces, None, 10, None) == b"a\n" + long + b"\ns\n"
    assert await run(pieces, None, 11, None) == b"s\n"
    assert await run(pieces, None, None, 11) == b"a\n" + long + b"\n"
    assert await run(pieces, rb"^L", 10, 50) == long + b"\n"
    assert await run(pieces, rb"^L", 11, 50) == b""


async def test_until_stops_reading_at_the_first_line_past_it() -> None:
    """A line starting at or after `until` ends the read at its first byte: the rest of it
    (here a long line) is not read."""
    pieces = [(b"a\n", 10), *split(b"b" * (4 * MiB) + b"\nc\n", 20)]
    src = Source(pieces)
    out = [c async for c in filter_lines(src.gen(), re.compile(rb"."), None, 20)]
    assert b"".join(out) == b"a\n"
    assert src.taken == 2
    assert src.closed


# -- cooperation and stopping -------------------------------------------------------------------


async def test_filtering_yields_to_the_event_loop_every_piece() -> None:
    """Other tasks run while a long line is scanned, even when nothing matches (no output)."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        for _ in range(1_000_000):
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.get_running_loop().create_task(ticker())
    await asyncio.sleep(0)
    try:
        n = 200
        assert await run(split(b"x" * (n * CHUNK) + b"\n"), rb"nomatch") == b""
    finally:
        task.cancel()
    assert ticks >= n, f"the event loop ran other tasks {ticks} times over {n} pieces"


async def test_cancelled_consumer_stops_the_scan_and_closes_the_reader() -> None:
    n = 1000
    src = Source(split(b"x" * (n * CHUNK), size=CHUNK))

    async def consume() -> None:
        async for _ in filter_lines(src.gen(), re.compile(rb"nomatch"), None, None):
            pass

    task = asyncio.get_running_loop().create_task(consume())
    for _ in range(3):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert src.taken < n, "the scan ran to the end before the cancellation was seen"
    assert src.closed


async def test_aclose_reaches_the_reader() -> None:
    src = Source([(b"one\ntwo\n", 0), (b"three\n", 0)])
    gen = filter_lines(src.gen(), re.compile(rb"o"), None, None)
    assert await anext(gen) == b"one\ntwo\n"
    await gen.aclose()
    assert src.closed, "closing the filter left its reader open until garbage collection"


@pytest.mark.parametrize("at", ["scanning", "sending"])
async def test_aclose_frees_a_long_lines_spool(at: str) -> None:
    """A long line's spool file is closed with the filter: while the line is searched (closed
    at a caught-up mark), and while a late match is sent from it."""
    line = b"x" * (3 * MiB) + b"needle" + b"x" * (3 * MiB) + b"\n"
    pieces = [*split(line[: 2 * MiB]), (b"", 0), *split(line[2 * MiB :])]
    before = len(os.listdir("/proc/self/fd"))
    gen = filter_lines(Source(pieces).gen(), re.compile(rb"needle"), None, None)
    assert await anext(gen) == b""  # caught up at 2 MiB: the line is being searched
    if at == "sending":
        assert (await anext(gen)).startswith(b"xxx")  # matched: sent from the spool
    assert len(os.listdir("/proc/self/fd")) == before + 1  # the spool
    await gen.aclose()
    assert len(os.listdir("/proc/self/fd")) == before


def _open_count(path: Path) -> int:
    """How many of this process's file descriptors are open on path."""
    fds = Path("/proc/self/fd")
    n = 0
    for fd in os.listdir(fds):
        with contextlib.suppress(FileNotFoundError):  # the fd listdir itself used
            n += os.readlink(fds / fd) == str(path)
    return n


@pytest.mark.parametrize(
    "query",
    [
        LogQuery(),
        LogQuery(regex="line"),
        LogQuery(since=dt.datetime(2000, 1, 1, tzinfo=dt.UTC)),
        LogQuery(regex="line", stream=Stream.STDOUT),
    ],
    ids=["raw", "regex", "since", "stream"],
)
async def test_read_log_aclose_closes_the_file(tmp_path: Path, query: LogQuery) -> None:
    base = tmp_path / "r0"
    writer = LogWriter(base)
    writer.write(Stream.STDOUT, b"".join(f"line {i}\n".encode() for i in range(100_000)))
    writer.close()
    gen = read_log(LogSource(base, None, lambda: True), query)
    assert (await anext(gen)).startswith(b"line 0\n")
    assert _open_count(data_path(base)) == 1
    await gen.aclose()
    assert _open_count(data_path(base)) == 0, "the log file stayed open after aclose"
