"""`torchx runopts` against `txctl runopts` (names, types, defaults, required), and the
`.torchxconfig` that `torchx configure --all` writes, read by both: every difference a row of
docs/torchx-compat.md's table (app `(runopts)` / `(torchxconfig)`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import compat_config
import compat_table


def _check(found: list[compat_table.Diff], app: str) -> None:
    rows = [r for r in compat_table.read_rows() if r.diff.app == app]
    mismatch = compat_table.match(found, rows, {})
    assert not mismatch, mismatch.message(app)


def test_runopts_differences_are_the_tables(
    torchx_python: Path, compat_daemon: Any, compat_workdir: Path
) -> None:
    found = compat_config.runopts_differences(torchx_python, compat_daemon, compat_workdir)
    assert found, "txd has options TorchX lacks (ssh_host, precheck, ...): none found means a bug"
    _check(found, compat_config.RUNOPTS)


def test_torchxconfig_from_torchx_configure_is_read_as_torchx_reads_it(
    torchx_python: Path, compat_daemon: Any, compat_workdir: Path, dryruns: Any
) -> None:
    found = compat_config.torchxconfig_differences(
        torchx_python, compat_daemon, compat_workdir, dryruns.diffs
    )
    _check(found, compat_config.CONFIG)
