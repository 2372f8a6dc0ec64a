"""TorchX 0.7 in a venv of its own (scripts/torchx-venv makes it: .torchx-venv, shared with
the compatibility suite), for the side-by-side figures."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

from benchmarks.common import PIP_TIMEOUT
from benchmarks.harnesses import ROOT

HELPER = ROOT / "scripts" / "torchx-venv"
TORCHX_VENV = ROOT / ".torchx-venv"

TORCHX_WAIT_INTERVAL = 10.0  # torchx.runner.Runner.wait's default wait_interval (torchx 0.7)


def ensure_torchx(venv: Path) -> tuple[Path | None, str]:
    """The torchx executable of `venv`, made by scripts/torchx-venv when missing (TorchX 0.7
    with the sync kubernetes client, boto3, docker and the SageMaker SDK: the venv the
    compatibility suite uses too), or None and the reason."""
    exe = venv / "bin" / "torchx"
    try:
        p = subprocess.run(
            [str(HELPER), str(venv)], capture_output=True, text=True, timeout=PIP_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"scripts/torchx-venv failed: {e}"
    if p.returncode != 0:
        tail = [ln for ln in p.stderr.splitlines() if ln.strip()][-5:]
        return None, "scripts/torchx-venv failed: " + " | ".join(tail)
    if not exe.exists():
        return None, f"scripts/torchx-venv succeeded but {exe} is missing"
    return exe, ""


def ensure_torchx_kubernetes(venv: Path) -> tuple[Path | None, str]:
    """ensure_torchx: its venv has the sync `kubernetes` client TorchX's kubernetes scheduler
    imports."""
    return ensure_torchx(venv)


def torchx_version(exe: Path) -> str:
    with contextlib.suppress(Exception):
        p = subprocess.run(
            [
                str(exe.parent / "python"),
                "-c",
                "import importlib.metadata as m; print(m.version('torchx'))",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return p.stdout.strip()
    return "?"
