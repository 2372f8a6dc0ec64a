"""The bench's daemons: the tests' `txd_testing.Daemon`, quiet, counted as the bench's own CPU,
and all closed at the end (rooted in the bench's temp dir, or where a harness's factory put
them)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from txd_testing import Daemon, clean_env

from benchmarks.common import Results, log
from benchmarks.sidebyside import Tree

QUIET = ("--log-level", "WARNING")  # no INFO line per job in the daemon's log


@dataclass
class Daemons:
    base: Path  # the bench's temp dir
    res: Results
    made: list[Daemon] = field(default_factory=list)

    def new(
        self,
        name: str,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        under: Path | None = None,
        tree: Tree | None = None,
    ) -> Daemon:
        """A daemon (not started) on `base/name` (or `under/name`): its socket, state dir and
        log. `env`: what to add to the caller's environment (less the txd variables:
        txd_testing.clean_env). `tree`: an older tree's daemon (--base-tree) instead of ours."""
        root = (under or self.base) / name
        root.mkdir(parents=True)
        prefix = tree.prefix() if tree is not None else []
        return self.adopt(Daemon(root, env=env, args=args, prefix=prefix))

    def adopt(self, d: Daemon) -> Daemon:
        """A daemon made by a harness's factory (not started): quiet, and the bench's."""
        d.args[:0] = QUIET  # first: the factory's own arguments still win
        self.made.append(d)
        return d

    def start(self, d: Daemon) -> Daemon:
        d.start()
        assert d.proc is not None
        self.res.procs.append(d.proc)
        return d

    def close(self, keep: bool) -> None:
        """Stops every daemon still running (and any replica it left); removes the roots a
        factory made outside `base` unless `keep`."""
        for d in self.made:
            d.close()
            if not d.root.is_relative_to(self.base):
                if keep:
                    log(f"kept {d.root}")
                else:
                    shutil.rmtree(d.root, ignore_errors=True)

    def log_tails(self, n: int = 20) -> list[tuple[str, str]]:
        """(name, last lines of the log) of every daemon that wrote one."""
        out = []
        for d in self.made:
            tail = "\n".join(d.log().splitlines()[-n:])
            if tail:
                out.append((d.root.name, tail))
        return out


def stop(d: Daemon) -> int | None:
    """Stops the daemon (SIGTERM) if it runs; its exit code (None: never started)."""
    if d.proc is None:
        return None
    if not d.running():
        return d.proc.returncode
    return d.stop()


def cli_env(d: Daemon) -> dict[str, str]:
    """The environment of a CLI (txctl, torchx) pointed at the daemon."""
    return clean_env(TXD_SOCKET=str(d.socket), TXD_NO_AUTOSTART="1")
