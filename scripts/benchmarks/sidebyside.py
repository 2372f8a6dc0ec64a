"""Side by side with an older tree (--base-tree TREE): the areas that support it (submit, rss, load)
measure a daemon of that tree too, ours and the base's in turn (ours, base, ours, base ...), and
print the base's figure beside ours. The base daemon runs the tree's own code with its own venv
(`scripts/setup dev` in it); the bench, its clients and harnesses are ours.
"""

from __future__ import annotations

import statistics
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import Results


@dataclass(frozen=True)
class Tree:
    """An older checkout of txd with its own venv."""

    path: Path
    commit: str  # short hash, "+dirty" when its files differ from it

    @property
    def python(self) -> Path:
        return self.path / ".venv" / "bin" / "python"

    def prefix(self) -> list[str]:
        """A txd_testing.Daemon prefix that runs the daemon with this tree's python instead of
        ours, keeping the pid (exec): sh drops our interpreter, the first of its arguments."""
        return ["sh", "-c", 'shift; exec "$0" "$@"', str(self.python)]


def open_tree(path: str) -> Tree:
    """The tree at `path`; SystemExit naming what is missing."""
    root = Path(path).expanduser().resolve()
    if not (root / "daemon").is_dir() or not (root / "pyproject.toml").is_file():
        raise SystemExit(
            f"bench: --base-tree {path}: not a txd tree (no daemon/ or pyproject.toml)"
        )
    tree = Tree(root, _commit(root))
    if not tree.python.exists():
        raise SystemExit(
            f"bench: --base-tree {path}: no {tree.python}; run scripts/setup dev in that tree first"
        )
    return tree


def _commit(root: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "?"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def beside(
    res: Results,
    name: str,
    ours: Sequence[float],
    base: Sequence[float] | None,
    fmt: Callable[[float], str],
    *,
    tree: Tree | None = None,
    target: str = "",
    met: bool | None = None,
    note: str = "",
) -> None:
    """A row of our median, with every run and, given the base's runs, the base's median and
    ours/base; then the base's own row."""
    runs = " / ".join(fmt(x) for x in ours)
    parts = [note] if note else []
    if len(ours) > 1:
        parts.append(f"runs {runs}")
    if base and tree is not None:
        ratio = statistics.median(ours) / statistics.median(base)
        parts.append(f"base {tree.commit}: {fmt(statistics.median(base))}, ours/base {ratio:.2f}x")
    res.add(name, fmt(statistics.median(ours)), target, met, note="; ".join(parts))
    if base and tree is not None:
        res.add(
            f"{name} (base {tree.commit})",
            fmt(statistics.median(base)),
            note=f"runs {' / '.join(fmt(x) for x in base)}; interleaved with ours",
        )
