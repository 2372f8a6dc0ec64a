"""Prefixing the interleaved output of several replicas with `role/k `, line by line.

The daemon sends each replica's log in chunks as they come, and a chunk may end in the middle
of a line. Prefixing chunk by chunk would let another replica's chunk land in the middle of
that line, under the wrong prefix; so each replica's unfinished line is held back until its
newline arrives. Everything is bytes: output that is not UTF-8, and `\\r`, pass unchanged
(a `\\r` progress bar therefore shows only once its line ends).
"""

from __future__ import annotations

from typing import Any


class ReplicaLines:
    """One line buffer per replica: feed() returns the whole lines a chunk completes, each with
    its replica's prefix; flush() ends the lines still unfinished when the stream ends.

    Memory: at most one unfinished line per replica.
    """

    def __init__(self) -> None:
        # Unfinished lines, in the order they began (dicts keep insertion order), each as its
        # pieces: a line of many chunks is joined once, not copied again per chunk.
        self._tails: dict[tuple[str, int], list[bytes]] = {}

    def feed(self, role: str, replica: int, data: bytes) -> bytes:
        key = (role, replica)
        end = data.rfind(b"\n") + 1
        if not end:  # no line ends here: keep it all (a new tail goes last, an old one stays)
            if data:
                self._tails.setdefault(key, []).append(data)
            return b""
        text = b"".join([*self._tails.pop(key, ()), data[:end]])
        if end < len(data):
            self._tails[key] = [data[end:]]
        prefix = _prefix(role, replica)
        return prefix + text[:-1].replace(b"\n", b"\n" + prefix) + b"\n"

    def flush(self) -> bytes:
        """The unfinished lines, each prefixed and ended with a newline it did not have: the
        stream is over, so nothing else can finish them, and the added newline keeps the next
        replica's line (or the shell prompt) off it. Lines go in the order they began."""
        out = b"".join(_prefix(*key) + b"".join(tail) + b"\n" for key, tail in self._tails.items())
        self._tails.clear()
        return out


def _prefix(role: str, replica: int) -> bytes:
    return f"{role}/{replica} ".encode()


def long_line_note(chunk: Any) -> str:
    """What a LogsResponse with long_line says, in words (no trailing newline)."""
    x = chunk.long_line
    return (
        f"{chunk.role}/{chunk.replica}: the line at byte {x.offset} ({x.length} bytes) was"
        " dropped without the regex being tested on it whole: a match over 64 KiB long could"
        " have been missed"
    )
