"""What every area gets: the command line, the bench's temp dir, the results and the daemons."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import Results
from benchmarks.daemons import Daemons
from benchmarks.sidebyside import Tree, open_tree


@dataclass
class Context:
    args: argparse.Namespace
    base: Path  # the bench's temp dir
    res: Results = field(default_factory=Results)
    daemons: Daemons = field(init=False)
    # --base-tree: an older tree whose daemon the side-by-side areas measure beside ours
    base_tree: Tree | None = field(init=False)

    def __post_init__(self) -> None:
        self.daemons = Daemons(self.base, self.res)
        self.work.mkdir(exist_ok=True)
        base = getattr(self.args, "base_tree", None)
        self.base_tree = open_tree(str(base)) if base else None

    def sides(self) -> list[Tree | None]:
        """Ours (None), then the base's when --base-tree was given: the order of each turn."""
        return [None] if self.base_tree is None else [None, self.base_tree]

    @property
    def side_runs(self) -> int:
        """How many turns each side gets in the side-by-side areas."""
        return 1 if self.base_tree is None else max(1, self.args.base_runs)

    @property
    def quick(self) -> bool:
        return bool(self.args.quick)

    @property
    def work(self) -> Path:
        """An empty working directory for CLIs and jobs: no .txdconfig/.torchxconfig."""
        return self.base / "cwd"
