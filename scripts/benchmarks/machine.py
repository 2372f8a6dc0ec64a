"""The machine a run measured: printed first, and written with the table by --out."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import subprocess
from pathlib import Path

from benchmarks.common import ROOT, fs_type


def machine_info(tmp: Path) -> list[tuple[str, str]]:
    cpu = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    try:
        nproc = subprocess.run(["nproc"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        nproc = str(len(os.sched_getaffinity(0)))
    import google.protobuf
    import grpc

    return [
        ("date", dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")),
        ("txd commit", _commit()),
        ("nproc", nproc),
        ("CPU", cpu),
        ("memory", mem),
        ("kernel", f"{platform.system()} {platform.release()} ({platform.machine()})"),
        ("python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("grpcio / protobuf", f"{grpc.__version__} / {google.protobuf.__version__}"),
        ("state dir filesystem", fs_type(tmp)),
        ("load average at start", " ".join(f"{x:.2f}" for x in os.getloadavg())),
        ("PYTHONDONTWRITEBYTECODE", os.environ.get("PYTHONDONTWRITEBYTECODE", "(unset)")),
    ]


def _commit() -> str:
    """HEAD's short hash and subject, and how many product files differ from it."""
    commit = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run(
            [*git, "log", "-1", "--format=%h %s"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "daemon", "schedulers", "client", "proto"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.splitlines()
        commit = head + (f" (+{len(dirty)} uncommitted product file(s))" if dirty else "")
    return commit
