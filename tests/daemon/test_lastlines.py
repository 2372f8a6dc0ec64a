"""LastLines (the daemon's `--tail N` for every scheduler): the same lines as the obvious model,
whatever the chunking and whether the kept chunks sit in memory or on disk; a huge last line in
bounded memory and in pieces small enough for a gRPC message."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from txd.daemon import lastlines
from txd.daemon.lastlines import LastLines
from txd.schedulers.spool import READ_SIZE

MiB = 1 << 20


def model(data: bytes, n: int) -> bytes:
    """The last n lines of data; a last line without a newline counts as one."""
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(n):
        end = data.rfind(b"\n", 0, end)
        if end < 0:
            return data
    return data[end + 1 :]


def tail(chunks: list[bytes], n: int) -> list[bytes]:
    held = LastLines(n)
    try:
        for chunk in chunks:
            held.add(chunk)
        return list(held.lines())
    finally:
        held.close()


@pytest.mark.parametrize("memory", [1 << 20, 7, 1])
def test_matches_the_model(monkeypatch: pytest.MonkeyPatch, memory: int) -> None:
    """Random logs in random chunks; a small MEMORY sends the kept chunks to disk and back."""
    monkeypatch.setattr(lastlines, "MEMORY", memory)
    rng = random.Random(11)
    for _ in range(2000):
        data = bytes(rng.choice(b"ab\n\n\r") for _ in range(rng.randrange(60)))
        chunks, pos = [], 0
        while pos < len(data):
            size = rng.choice([1, 2, 3, 5, 8, 30])
            chunks.append(data[pos : pos + size])
            pos += size
        n = rng.choice([0, 1, 2, 3, 5, 100])
        assert b"".join(tail(chunks, n)) == model(data, n), (chunks, n)


def test_spool_is_closed_and_memory_is_used_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lastlines, "MEMORY", 16)
    held = LastLines(1)
    held.add(b"x" * 20)
    assert held._spool is not None  # over MEMORY: on disk
    held.add(b"\nshort\n")  # the long line is no longer among the last: back in memory
    assert held._spool is None
    assert list(held.lines()) == [b"short\n"]
    held.add(b"y" * 30)
    assert held._spool is not None
    held.close()
    assert held._spool is None


@pytest.mark.parametrize("ends_with_newline", [True, False])
def test_huge_last_line_in_bounded_memory_and_small_pieces(ends_with_newline: bool) -> None:
    """A 64 MiB line (over gRPC's message limit) after a short one: kept on disk, given out in
    pieces of at most READ_SIZE bytes, the Python heap never holding more than a few MiB."""
    block = b"z" * MiB
    size, digest_in = 0, bytearray()
    tracemalloc.start()
    try:
        held = LastLines(1)
        held.add(b"before\n")
        for _ in range(64):
            held.add(block)
        if ends_with_newline:
            held.add(b"\n")
        biggest = 0
        for piece in held.lines():
            biggest = max(biggest, len(piece))
            size += len(piece)
            digest_in += piece[:1]
        held.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size == 64 * MiB + ends_with_newline
    assert set(digest_in) <= {ord("z"), ord("\n")}
    assert biggest <= max(READ_SIZE, MiB)
    assert peak < 4 * MiB, f"peak {peak / MiB:.1f} MiB for a 64 MiB line"
