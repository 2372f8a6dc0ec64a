"""scripts/apt, which every install script uses, waits for an apt lock another process holds
(a fresh VM's unattended upgrades) instead of failing at once, and goes on once it is free."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

APT = Path(__file__).resolve().parents[1] / "scripts" / "apt"
LOCK = Path("/var/lib/dpkg/lock-frontend")


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("apt-get"), reason="needs root and apt")
def test_an_install_waits_for_the_dpkg_lock_and_then_installs() -> None:
    # apt takes its locks with fcntl (F_SETLK), as lockf does: this holds one as dpkg would.
    with LOCK.open("a") as held:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with subprocess.Popen(
            [APT, "install", "curl"],  # installed already (install-backends): no download
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            assert proc.stderr is not None
            said = proc.stderr.readline()  # the wait's one line, written while the lock is ours
            assert said.startswith(f"scripts/apt: apt's lock is held by process {os.getpid()} ")
            assert said.rstrip().endswith("waiting up to 900 s")
            fcntl.lockf(held, fcntl.LOCK_UN)
            assert proc.wait(timeout=300) == 0, proc.stderr.read()
            assert proc.stderr.read() == ""
