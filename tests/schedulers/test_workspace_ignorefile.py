"""`.dockerignore` rules as Docker applies them (moby's patternmatcher and dockerignore
reader): each case is a rule Docker documents or its own tests pin."""

from __future__ import annotations

from pathlib import Path

import pytest
from txd.schedulers.workspace.ignorefile import IgnoreFileError, Matcher, read_patterns

CASES = [
    # `*` and `?` stop at `/`; patterns are anchored at the root, not matched at any depth.
    ("*.pyc", "a.pyc", True),
    ("*.pyc", "pkg/a.pyc", False),
    ("*/*.pyc", "pkg/a.pyc", True),
    ("a?c", "abc", True),
    ("a?c", "a/c", False),
    # `**` spans directories, zero included.
    ("**/*.pyc", "a.pyc", True),
    ("**/*.pyc", "pkg/sub/a.pyc", True),
    ("**/build", "build", True),
    ("**/build", "x/build/out.o", True),  # a parent matches
    ("a/**/z", "a/z", True),
    ("a/**/z", "a/b/c/z", True),
    ("dir/**", "dir", False),
    ("dir/**", "dir/x/y", True),
    ("**file", "dir/file", True),
    # Classes, escapes, and characters that are special only in regular expressions.
    ("a[b-d]e", "ace", True),
    ("a[b-d]e", "aae", False),
    ("a[^b-d]e", "aze", True),
    ("abc.def", "abcZdef", False),
    ("a(b)c|d$", "a(b)c|d$", True),
    ("a\\*b", "a*b", True),
    ("a\\*b", "axb", False),
    (".*", ".git", True),
    (".*", "git", False),
    # A directory excludes everything below it; cleaned paths and a leading / are the same.
    ("data", "data/x/y.bin", True),
    ("/data/", "data/y.bin", True),
    ("./a//b/../c", "a/c", True),
]


@pytest.mark.parametrize("pattern,path,excluded", CASES, ids=[f"{p}~{t}" for p, t, _ in CASES])
def test_one_pattern(pattern: str, path: str, excluded: bool) -> None:
    assert Matcher(read_patterns(pattern)).excluded(path) is excluded


def test_last_match_wins_and_exclusions_bring_files_back() -> None:
    m = Matcher(read_patterns("*.md\n!README.md\ndocs\n!docs/keep.txt\n"))
    assert m.excluded("NOTES.md")
    assert not m.excluded("README.md")
    assert m.excluded("docs/other.txt")
    assert not m.excluded("docs/keep.txt")
    assert m.has_exclusions
    again = Matcher(read_patterns("**\n!src\nsrc/secret\n"))
    assert not again.excluded("src/main.py")
    assert again.excluded("src/secret")
    assert again.excluded("other.py")


def test_reading_the_file() -> None:
    text = "\ufeff# a comment\n\n  *.log  \n! /build \n#not-a-pattern\n/abs/path\n"
    assert read_patterns(text) == ["*.log", "!build", "abs/path"]


def test_a_bad_pattern_names_the_file(tmp_path: Path) -> None:
    (tmp_path / ".dockerignore").write_text("ok\n[unclosed\n")
    with pytest.raises(IgnoreFileError, match=r"\.dockerignore: bad pattern '\[unclosed'"):
        Matcher.from_file(tmp_path / ".dockerignore")
    assert Matcher.from_file(tmp_path / "missing").patterns == []
    with pytest.raises(IgnoreFileError, match="illegal exclusion"):
        Matcher(["!"])
