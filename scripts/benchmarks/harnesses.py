"""Where the test suite's harnesses live, so that the bench imports them by module name
(`txd_testing`, `docker_testing`, `k8s_testing`, `moto_testing`, `load_testing`) instead of
keeping copies of its own.

DIRS is the one list of those folders: the package's __init__ puts them on sys.path, and
scripts/typecheck reads it for mypy. Move a harness, change this list.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Relative to the repository; the module each folder holds for the bench.
DIRS = (
    "tests",  # txd_testing: the daemon
    "tests/load",  # load_testing: the load run
    "tests/schedulers/docker",  # docker_testing: dockerd of our own (the kubelet's too)
    "tests/schedulers/kubernetes",  # k8s_testing: a single-node Kubernetes
    "tests/schedulers/aws",  # moto_testing: moto_server
    "tests/remote",  # ssh_testing: the SSH login nodes
    "tests/dashboard",  # dashboard_testing: txctl dashboard and its browser
)


def add_to_path() -> None:
    """Puts the harnesses' folders first on sys.path (once)."""
    for folder in reversed(DIRS):
        path = str(ROOT / folder)
        if path not in sys.path:
            sys.path.insert(0, path)


if __name__ == "__main__":  # scripts/typecheck: the folders, for MYPYPATH
    print(":".join(str(ROOT / folder) for folder in DIRS))
