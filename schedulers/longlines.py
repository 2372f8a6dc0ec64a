"""Searching a line too long to hold (logfiles.LINE_LIMIT) with a regex, in bounded memory.

The line is searched in windows as it comes: each window is the new bytes plus the end of the
previous one, as much of it as a match starting there may need. How much that is comes from the
pattern itself (`reach`): how far from where a match starts the regex engine may look, forward
(the widest match, plus lookaheads) and back (lookbehinds, \\b). A window's edges are not the
line's, so a match is only trusted where neither edge could have decided it (an end-of-line
assertion or lookahead near the end, an atomic group that may have chosen on an attempt cut by
it), and the starts too close to the window's end are tried again in the next window. For a
pattern whose forward reach is at most MAX_REACH bytes (`needle`, `err(or)?:\\s\\d{1,5}`),
that makes the search of the whole line exact. A pattern that can match more (`a.*b`, `\\d+x`)
is searched in windows overlapping by MAX_REACH bytes: a match found is a match, but one longer
than the overlap can be missed, so a line it does not match is reported as not searched whole
(LongLine).

The line's bytes go to a Spool as they come, so that a line matched late is still sent whole, from
its first byte.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

from txd.schedulers.spool import Spool

# The widest reach (bytes) a pattern may have for its search of a long line to be exact; also
# how much of each window the next one repeats for a pattern without such a bound.
MAX_REACH = 64 * 1024
# New bytes of a long line gathered before each window is searched.
STEP = 512 * 1024

_parser: Any = importlib.import_module("re._parser")  # sre_parse: the pattern's syntax tree
_c: Any = importlib.import_module("re._constants")
_STARTS = {_c.AT_BEGINNING, _c.AT_BEGINNING_LINE, _c.AT_BEGINNING_STRING}


@dataclass(frozen=True)
class Reach:
    """How far around a match start the engine may look. `back`: bytes before it (plus one, for
    \\b and a MULTILINE ^). `ahead`: bytes from it, one past them included; None when more than
    MAX_REACH. `lookahead`: bytes past a match's end that lookaheads may look at, plus one.
    `end_sensitive`: the pattern asserts something an edge can decide ($, \\Z, \\b, a lookahead).
    `atomic`: it has atomic groups or possessive repeats, whose choice can hang on an attempt
    that reached the edge, even when the match found ends far from it."""

    back: int
    ahead: int | None
    lookahead: int
    end_sensitive: bool
    atomic: bool


def reach(regex: re.Pattern[bytes]) -> Reach:
    try:
        tree = _parser.parse(regex.pattern, regex.flags)
        found = _Found()
        _walk(tree, found)
        width = tree.getwidth()[1]
    except Exception:  # a construct this walk does not know: nothing bounded is assumed
        return Reach(MAX_REACH + 1, None, MAX_REACH + 1, True, True)
    ahead = width + found.lookahead + 1
    back = found.lookbehind + 1
    return Reach(
        back=min(back, MAX_REACH + 1),
        ahead=ahead if ahead <= MAX_REACH and back <= MAX_REACH else None,
        lookahead=found.lookahead + 1,
        end_sensitive=found.end_sensitive or found.atomic,
        atomic=found.atomic,
    )


class _Found:
    def __init__(self) -> None:
        self.lookahead = 0  # the widths of every lookahead, summed (nesting included)
        self.lookbehind = 0
        self.end_sensitive = False
        self.atomic = False


def _walk(tree: Any, found: _Found) -> None:
    for op, av in tree:
        if op is _c.AT and av not in _STARTS:
            found.end_sensitive = True
        elif op in (_c.ATOMIC_GROUP, _c.POSSESSIVE_REPEAT):
            found.atomic = True
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            direction, sub = av
            width = sub.getwidth()[1]
            if direction == 1:
                found.lookahead += width
                found.end_sensitive = True
            else:
                found.lookbehind += width
        for sub in _subtrees(av):
            _walk(sub, found)


def _subtrees(av: Any) -> list[Any]:
    if isinstance(av, _parser.SubPattern):
        return [av]
    if isinstance(av, tuple | list):
        return [s for x in av for s in _subtrees(x)]
    return []


class LineScan:
    """One long line being searched: fed its bytes in order (its first LINE_LIMIT at once),
    then told where it ends. `matched` once a match is certain; `unsure` when the line was not
    matched and a match longer than the window overlap could have been missed."""

    def __init__(self, regex: re.Pattern[bytes], scope: Reach, offset: int) -> None:
        self.offset = offset  # where the line begins, in the bytes read
        self.length = 0
        self.unsure = False
        self.spool = Spool()
        self._regex = regex
        self._reach = scope
        self._window = b""  # the end of the last window that the next one searches again
        self._lo = 0  # in the next window: the first start not yet decided
        self._pending: list[bytes] = []
        self._pending_len = 0

    def feed(self, data: bytes, ends: bool) -> bool:
        """The line's next bytes; `ends`: the line ends after them. True once it matched."""
        if data:
            self.spool.write(data)
            self.length += len(data)
            self._pending.append(data)
            self._pending_len += len(data)
        if ends or self._pending_len >= STEP:
            return self._search(ends)
        return False

    def _search(self, ends: bool) -> bool:
        r = self._reach
        buf = b"".join([self._window, *self._pending])
        self._pending.clear()
        self._pending_len = 0
        m = self._regex.search(buf, self._lo)
        if m is not None and (ends or self._certain(m, len(buf))):
            return True
        if ends:
            return False
        # Starts before `first` were tried with every byte they could look at in the window.
        if r.ahead is not None:
            first = max(self._lo, len(buf) - r.ahead)
        else:
            self.unsure = True
            first = max(self._lo, len(buf) - MAX_REACH)
        cut = max(0, first - r.back)  # so lookbehinds and \b see what they look at
        self._window = buf[cut:]
        self._lo = first - cut
        return False

    def _certain(self, m: re.Match[bytes], size: int) -> bool:
        """Whether the window's end (at `size`) decided nothing in match m."""
        r = self._reach
        if r.ahead is not None and m.start() + r.ahead < size:
            return True  # no attempt from its start could look that far
        return not r.end_sensitive or (not r.atomic and m.end() + r.lookahead < size)

    def close(self) -> None:
        self.spool.close()
        self._window = b""
        self._pending.clear()
