"""The last n lines of a stream of chunks, in bounded memory: `tail -n N` for log reads whose
scheduler cannot start at the right line itself, and the exact cut for those that start a line
early (logfiles reads from the file's end back).

Chunks that may still hold those lines (n + 1 newlines' worth, and one chunk) are kept in memory
up to MEMORY bytes; past that (a line of 100 MB, or many long lines) they go to a Spool on disk,
and come back to memory once what is kept is small again. The lines are then given out in pieces
of at most spool.READ_SIZE bytes (a chunk kept in memory whole), never joined: a line larger than a
gRPC message goes out like any other.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from txd.schedulers.spool import Spool

# Bytes of kept chunks held in memory before they move to disk.
MEMORY = 1024 * 1024


@dataclass
class _Kept:
    data: bytes | None  # None: in the spool, at offset
    offset: int  # in the spool (meaningful once spooled)
    size: int
    newlines: int


class LastLines:
    """Feed chunks with add(); lines() then gives the last n lines of everything added (a last
    line without a newline counts as one). close() frees the spool if one was needed."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._kept: deque[_Kept] = deque()
        self._newlines = 0
        self._bytes = 0  # of the kept chunks
        self._spool: Spool | None = None
        self._ends_nl = False  # the last byte added is a newline

    def add(self, chunk: bytes) -> None:
        if not chunk:
            return
        count = chunk.count(b"\n")
        self._ends_nl = chunk.endswith(b"\n")
        if self._spool is None and self._bytes + len(chunk) > MEMORY:
            self._to_disk()
        if self._spool is not None:
            self._kept.append(_Kept(None, self._spool.size, len(chunk), count))
            self._spool.write(chunk)
        else:
            self._kept.append(_Kept(chunk, 0, len(chunk), count))
        self._newlines += count
        self._bytes += len(chunk)
        # Drop what the later chunks make useless: the rest still has n + 1 newlines.
        while len(self._kept) > 1 and self._newlines - self._kept[0].newlines > self.n:
            gone = self._kept.popleft()
            self._newlines -= gone.newlines
            self._bytes -= gone.size
        if self._spool is not None and self._bytes <= MEMORY // 2:
            self._to_memory()

    def lines(self) -> Iterator[bytes]:
        """The last n lines, in pieces (at most spool.READ_SIZE bytes each from disk)."""
        if self.n == 0 or not self._kept:
            return
        # The lines start after the `before`-th newline: lines = newlines, plus one when the
        # last has none.
        before = self._newlines + (not self._ends_nl) - self.n
        start_chunk, start = 0, 0
        if before > 0:
            seen = 0
            for i, kept in enumerate(self._kept):
                if seen + kept.newlines >= before:
                    data = self._data(kept)
                    pos = -1
                    for _ in range(before - seen):
                        pos = data.index(b"\n", pos + 1)
                    start_chunk, start = i, pos + 1
                    break
                seen += kept.newlines
        for i, kept in enumerate(self._kept):
            if i < start_chunk:
                continue
            skip = start if i == start_chunk else 0
            if kept.data is not None:
                if skip < kept.size:
                    yield kept.data[skip:] if skip else kept.data
            else:
                assert self._spool is not None
                yield from self._spool.pieces(kept.offset + skip, kept.offset + kept.size)

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None
        self._kept.clear()

    def _data(self, kept: _Kept) -> bytes:
        if kept.data is not None:
            return kept.data
        assert self._spool is not None
        return self._spool.read(kept.offset, kept.size)

    def _to_disk(self) -> None:
        spool = self._spool = Spool()
        for kept in self._kept:
            assert kept.data is not None
            kept.offset = spool.size
            spool.write(kept.data)
            kept.data = None

    def _to_memory(self) -> None:
        assert self._spool is not None
        for kept in self._kept:
            kept.data = self._spool.read(kept.offset, kept.size)
        self._spool.close()
        self._spool = None
