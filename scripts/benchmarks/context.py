"""What every area gets: the command line, the bench's temp dir, the results and the daemons."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import Results
from benchmarks.daemons import Daemons


@dataclass
class Context:
    args: argparse.Namespace
    base: Path  # the bench's temp dir
    res: Results = field(default_factory=Results)
    daemons: Daemons = field(init=False)

    def __post_init__(self) -> None:
        self.daemons = Daemons(self.base, self.res)
        self.work.mkdir(exist_ok=True)

    @property
    def quick(self) -> bool:
        return bool(self.args.quick)

    @property
    def work(self) -> Path:
        """An empty working directory for CLIs and jobs: no .txdconfig/.torchxconfig."""
        return self.base / "cwd"
