"""The compatibility suite's fixtures: TorchX 0.7's venv (scripts/torchx-venv; without it the
suite is skipped, or fails under scripts/test, which sets TXD_TORCHX_REQUIRED=1), one txd
daemon for the whole suite, and both sides' dry runs, run once and shared by the tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import compat_run
import pytest
import txd_testing


@pytest.fixture(scope="session")
def torchx_python() -> Path:
    why = compat_run.venv_problem()
    if why:
        if os.environ.get("TXD_TORCHX_REQUIRED") == "1":
            pytest.fail(why)
        pytest.skip(why)
    python = compat_run.torchx_python()
    assert python is not None
    return python


@pytest.fixture(scope="session")
def compat_daemon() -> Iterator[Any]:
    root = txd_testing.short_tmpdir("txdt-compat-")
    d = compat_run.compat_daemon(root).start()
    try:
        yield d
    finally:
        d.close()
        txd_testing.remove_tree(root)


@pytest.fixture(scope="session")
def compat_workdir(compat_daemon: Any) -> Path:
    work = Path(compat_daemon.root) / "work"
    work.mkdir(exist_ok=True)
    return work


@pytest.fixture(scope="session")
def dryruns(torchx_python: Path, compat_daemon: Any, compat_workdir: Path) -> Any:
    return compat_run.dryrun_differences(torchx_python, compat_daemon.socket, compat_workdir)
