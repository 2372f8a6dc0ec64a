"""`.dockerignore` files, read and matched as Docker does (moby's dockerignore.ReadAll and
patternmatcher): written here because the rules are short and the library that has them in
Python (docker-py) would bring a synchronous HTTP stack into the daemon for one function.

- One pattern per line; a line starting with `#` is a comment; blank lines are skipped; each
  pattern is trimmed, cleaned like a path (`a//b/../c` is `a/c`) and a leading `/` dropped:
  patterns are relative to the workspace's root, never matched at any depth (unlike .gitignore).
- `*` matches any run of characters but `/`, `?` one character but `/`, `[a-z]` a class, `\\`
  escapes the next character, `**` any number of directories (`**/x`, `a/**`, `a/**/b`).
- `!pattern` re-includes what an earlier pattern excluded; the last pattern that matches wins.
- A path is excluded when a pattern matches it or one of its parent directories.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

_UTF8_BOM = "\ufeff"
# Characters that are literal in a pattern but special in a regular expression.
_REGEX_SPECIAL = set(".+()|{}$^")


class IgnoreFileError(ValueError):
    """A pattern that cannot be compiled (an unclosed `[`): names the file and the line."""


class _Kind(Enum):
    EXACT = 1
    PREFIX = 2  # `a/**`: everything under a/
    SUFFIX = 3  # `**/a` (or `**a`): a at any depth
    REGEX = 4


@dataclass(frozen=True)
class Pattern:
    text: str  # cleaned, without the `!`
    exclusion: bool
    kind: _Kind
    regex: re.Pattern[str] | None

    def match(self, path: str) -> bool:
        if self.kind is _Kind.EXACT:
            return path == self.text
        if self.kind is _Kind.PREFIX:
            return path.startswith(self.text[:-2])
        if self.kind is _Kind.SUFFIX:
            suffix = self.text[2:]
            return path.endswith(suffix) or (suffix.startswith("/") and path == suffix[1:])
        assert self.regex is not None
        return self.regex.match(path) is not None


def _clean(path: str) -> str:
    """Go's filepath.Clean: `//a` is `/a`, "" is `.`."""
    cleaned = posixpath.normpath(path) if path else "."
    return "/" + cleaned.lstrip("/") if cleaned.startswith("/") else cleaned


def compile_pattern(line: str) -> Pattern:
    """One pattern as ReadAll leaves it (`!` kept); raises IgnoreFileError when it is bad."""
    exclusion = line.startswith("!")
    text = line[1:] if exclusion else line
    if not text:
        raise IgnoreFileError('illegal exclusion pattern: "!"')
    text = _clean(text)
    regex = "^"
    kind = _Kind.EXACT
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "*":
            if i + 1 < n and text[i + 1] == "*":
                start = i
                i += 2
                if i < n and text[i] == "/":
                    i += 1  # `**/` is `**`
                if i == n:  # a trailing `**` matches everything below
                    if kind is _Kind.EXACT:
                        kind = _Kind.PREFIX
                    else:
                        regex += ".*"
                        kind = _Kind.REGEX
                else:
                    regex += "(.*/)?"
                    kind = _Kind.REGEX
                if start == 0:
                    kind = _Kind.SUFFIX
                continue
            regex += "[^/]*"
            kind = _Kind.REGEX
        elif ch == "?":
            regex += "[^/]"
            kind = _Kind.REGEX
        elif ch == "\\":
            if i + 1 < n:
                i += 1
                regex += re.escape(text[i])
                kind = _Kind.REGEX
            else:
                regex += "\\\\"
        elif ch in "[]":
            regex += ch
            kind = _Kind.REGEX
        elif ch in _REGEX_SPECIAL and not (ch == "^" and regex.endswith("[")):
            regex += "\\" + ch
        else:
            regex += ch  # `[^a]` keeps its `^`
        i += 1
    compiled = None
    if kind is _Kind.REGEX:
        try:
            compiled = re.compile(regex + "$", re.DOTALL)
        except re.error as e:
            raise IgnoreFileError(f"bad pattern {line!r}: {e}") from None
    return Pattern(text, exclusion, kind, compiled)


def read_patterns(text: str) -> list[str]:
    """The patterns of an ignore file's text, as Docker's ReadAll returns them."""
    out = []
    for n, raw in enumerate(text.splitlines()):
        line = raw.removeprefix(_UTF8_BOM) if n == 0 else raw
        if line.startswith("#"):
            continue
        line = line.strip()
        if not line:
            continue
        invert = line.startswith("!")
        if invert:
            line = line[1:].strip()
        if line:
            line = _clean(line)
            if len(line) > 1 and line.startswith("/"):
                line = line[1:]
        out.append("!" + line if invert else line)
    return out


class Matcher:
    """The patterns of one ignore file, in order."""

    def __init__(self, patterns: list[str]) -> None:
        self.patterns = [compile_pattern(p) for p in patterns]
        # Without `!` patterns nothing below an excluded directory can come back.
        self.has_exclusions = any(p.exclusion for p in self.patterns)

    @classmethod
    def from_file(cls, path: Path) -> Matcher:
        """The file's patterns; a missing file excludes nothing. Raises IgnoreFileError naming
        the file for a bad pattern."""
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return cls([])
        try:
            return cls(read_patterns(text))
        except IgnoreFileError as e:
            raise IgnoreFileError(f"{path}: {e}") from None

    def excluded(self, path: str) -> bool:
        """Whether `path` (relative, `/`-separated) is excluded: the last pattern matching it or
        one of its parent directories decides."""
        parent = posixpath.dirname(path)
        parents = parent.split("/") if parent else []
        matched = False
        for pattern in self.patterns:
            # An exclusion can only change a path that is matched, an inclusion one that is not.
            if pattern.exclusion != matched:
                continue
            hit = pattern.match(path)
            if not hit:
                hit = any(pattern.match("/".join(parents[: i + 1])) for i in range(len(parents)))
            if hit:
                matched = not pattern.exclusion
        return matched
