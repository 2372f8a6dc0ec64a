"""Which schedulers exist: the built-in modules, imported only when first used, plus third-party
ones registered under the entry-point group `txd.schedulers`.

A factory has TorchX's signature, `create_scheduler(session_name, **kwargs) -> Scheduler`; the
daemon passes `settings` (the scheduler's section of the daemon config, a mapping checked by
`Scheduler.__init__`) and `state_dir` (a directory the scheduler may keep files in).
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from txd.schedulers.api import Scheduler

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "txd.schedulers"
DEFAULT_SCHEDULER = "local_cwd"

# name -> module defining create_scheduler; the first is the default.
BUILTIN: dict[str, str] = {
    "local_cwd": "txd.schedulers.local.local_cwd",
    "slurm": "txd.schedulers.hpc.slurm",
    "lsf": "txd.schedulers.hpc.lsf",
    "local_docker": "txd.schedulers.docker.local_docker",
    "kubernetes": "txd.schedulers.kubernetes.kubernetes",
    "kubernetes_mcad": "txd.schedulers.kubernetes.kubernetes_mcad",
    "aws_batch": "txd.schedulers.aws.aws_batch",
    "aws_sagemaker": "txd.schedulers.aws.aws_sagemaker",
}

Factory = Callable[..., Scheduler[Any, Any]]


@dataclass
class Entry:
    """A scheduler that can be built: `load()` imports its module and returns its factory."""

    name: str
    load: Callable[[], Factory]


def _load(module: str) -> Factory:
    factory: Factory = importlib.import_module(module).create_scheduler
    return factory


def discover() -> dict[str, Entry]:
    """Built-in schedulers, then entry points (which may not shadow a built-in name)."""
    found = {
        name: Entry(name, functools.partial(_load, module)) for name, module in BUILTIN.items()
    }
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in found:
            log.warning("entry point %s=%s ignored: %s is built in", ep.name, ep.value, ep.name)
            continue
        found[ep.name] = Entry(ep.name, ep.load)
    return found
