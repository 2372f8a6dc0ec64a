"""ReplicaLines: several replicas' interleaved log chunks become whole lines, each under the
prefix of the replica that wrote it."""

from __future__ import annotations

import pytest
from txd.client._lines import ReplicaLines

Chunk = tuple[str, int, bytes]


def _run(chunks: list[Chunk]) -> list[bytes]:
    """What each chunk prints, then what the end of the stream prints."""
    lines = ReplicaLines()
    return [lines.feed(*c) for c in chunks] + [lines.flush()]


def test_partial_line_waits_for_its_own_newline() -> None:
    """The defect: a replica's half line must not take in another replica's line."""
    assert _run([("r", 0, b"part-"), ("r", 1, b"whole\n"), ("r", 0, b"rest\n")]) == [
        b"",
        b"r/1 whole\n",
        b"r/0 part-rest\n",
        b"",
    ]


def test_whole_lines_are_printed_at_once() -> None:
    assert _run([("a", 0, b"one\ntwo\n"), ("b", 3, b"x\n")]) == [
        b"a/0 one\na/0 two\n",
        b"b/3 x\n",
        b"",
    ]


def test_chunk_ending_mid_line_prints_its_whole_lines_and_keeps_the_tail() -> None:
    assert _run([("r", 0, b"a\nb"), ("r", 1, b"c\nd"), ("r", 0, b"e\n"), ("r", 1, b"f\n")]) == [
        b"r/0 a\n",
        b"r/1 c\n",
        b"r/0 be\n",
        b"r/1 df\n",
        b"",
    ]


def test_line_spread_over_many_chunks() -> None:
    chunks: list[Chunk] = [("r", 0, bytes([c])) for c in b"slow"] + [("r", 0, b"\n")]
    assert b"".join(_run(chunks)) == b"r/0 slow\n"
    assert _run(chunks)[:-2] == [b""] * 4, "printed before the line ended"


def test_empty_lines_and_empty_chunks() -> None:
    assert _run([("r", 0, b""), ("r", 0, b"\n\n"), ("r", 1, b"")]) == [
        b"",
        b"r/0 \nr/0 \n",
        b"",
        b"",
    ]


@pytest.mark.parametrize(
    "payload",
    [
        b"\xff\xfe\x00ok\n\xc3\x28 bad utf8 \x80\n",
        b"progress 10%\rprogress 50%\rprogress 100%\ndone\r\n",
    ],
)
def test_bytes_pass_unchanged(payload: bytes) -> None:
    """Not UTF-8, `\\r`: only whole lines are prefixed; no byte is changed or dropped, however
    the chunks fall."""
    want = b"".join(b"r/0 " + line + b"\n" for line in payload.split(b"\n")[:-1])
    for cut in range(len(payload) + 1):
        chunks: list[Chunk] = [
            ("r", 0, payload[:cut]),
            ("r", 1, b"other\n"),
            ("r", 0, payload[cut:]),
        ]
        out = b"".join(_run(chunks))
        assert out.replace(b"r/1 other\n", b"", 1) == want, cut


def test_end_of_stream_ends_unfinished_lines_in_the_order_they_began() -> None:
    lines = ReplicaLines()
    assert lines.feed("r", 1, b"late") == b""
    assert lines.feed("r", 0, b"early") == b""
    assert lines.feed("r", 1, b"r") == b""  # still the line that began first
    assert lines.flush() == b"r/1 later\nr/0 early\n"
    assert lines.flush() == b"", "flushed twice"
    assert lines.feed("r", 0, b"next\n") == b"r/0 next\n", "an old tail came back"


def test_finished_line_after_a_flushed_tail_starts_clean() -> None:
    """A replica whose line was finished by its newline has no tail left to flush."""
    lines = ReplicaLines()
    assert lines.feed("r", 0, b"ab") == b""
    assert lines.feed("r", 0, b"c\nd") == b"r/0 abc\n"
    assert lines.feed("r", 0, b"\n") == b"r/0 d\n"
    assert lines.flush() == b""
