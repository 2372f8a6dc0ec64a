"""TorchX from PyPI in a venv of its own (.bench/torchx-venv), for the side-by-side figures."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

from benchmarks.common import PIP_TIMEOUT, log

TORCHX_WAIT_INTERVAL = 10.0  # torchx.runner.Runner.wait's default wait_interval (torchx 0.7)


def ensure_torchx(venv: Path) -> tuple[Path | None, str]:
    """The torchx executable of `venv` (created and installed from PyPI when missing), or None
    and the reason."""
    exe = venv / "bin" / "torchx"
    if exe.exists():
        return exe, ""
    try:
        if not (venv / "bin" / "python").exists():
            log(f"creating {venv} for torchx")
            subprocess.run(
                [sys.executable, "-m", "venv", str(venv)],
                check=True,
                capture_output=True,
                timeout=300,
            )
        log("pip install torchx (into its own venv; once)")
        p = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "torchx"],
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT,
        )
        if p.returncode != 0:
            tail = [
                ln
                for ln in (p.stderr + p.stdout).splitlines()
                if ln.strip() and "is ignored" not in ln
            ][-5:]
            return None, "pip install torchx failed: " + " | ".join(tail)
    except subprocess.CalledProcessError as e:
        return None, f"python -m venv failed: {(e.stderr or b'').decode(errors='replace')[-300:]}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"installing torchx failed: {e}"
    if not exe.exists():
        return None, f"pip succeeded but {exe} is missing"
    return exe, ""


def ensure_torchx_kubernetes(venv: Path) -> tuple[Path | None, str]:
    """ensure_torchx, plus the sync `kubernetes` client that TorchX's kubernetes scheduler
    imports (installed into the same venv when missing)."""
    torchx, why = ensure_torchx(venv)
    if torchx is None:
        return None, why
    python = str(venv / "bin" / "python")
    if subprocess.run(
        [python, "-c", "import kubernetes"], capture_output=True, timeout=60
    ).returncode:
        log("pip install kubernetes (TorchX's kubernetes scheduler needs it) into its venv")
        p = subprocess.run(
            [python, "-m", "pip", "install", "-q", "kubernetes"],
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT,
        )
        if p.returncode:
            return None, f"pip install kubernetes failed: {p.stderr.strip()[-300:]}"
    return torchx, ""


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
