"""Which schedulers exist: the built-in modules, imported only when first used, plus third-party
ones registered under the entry-point group `txd.schedulers`.

A factory has TorchX's signature, `create_scheduler(session_name, **kwargs) -> Scheduler`; the
daemon passes `settings` (the scheduler's section of the daemon config, a mapping checked by
`Scheduler.__init__`) and `state_dir` (a directory the scheduler may keep files in).

A module that fails to import is not remembered as failed: `Entry.load` imports it again (the
daemon does once `path_state` changed), so a package installed since makes the scheduler
usable; `import_error` says in one line what is missing and which extra installs it.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import Distribution, EntryPoint, entry_points
from typing import Any

from txd import install
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
# name -> the extra of txd (pyproject.toml's optional-dependencies) that installs what the
# built-in scheduler imports; local_cwd needs none.
EXTRAS: dict[str, str] = {
    "slurm": "slurm",
    "lsf": "lsf",
    "local_docker": "docker",
    "kubernetes": "kubernetes",
    "kubernetes_mcad": "kubernetes",
    "aws_batch": "aws",
    "aws_sagemaker": "aws",
}

Factory = Callable[..., Scheduler[Any, Any]]


@dataclass
class Entry:
    """A scheduler that can be built: `load()` imports its module and returns its factory.
    `install` is the command that installs the packages it imports, when known (txd.install's
    command for a built-in backend's extra); for an entry point, `dist` is the distribution
    that registered it."""

    name: str
    load: Callable[[], Factory]
    install: str = ""
    dist: Distribution | None = None


def _load(module: str) -> Factory:
    factory: Factory = importlib.import_module(module).create_scheduler
    return factory


def _load_entry_point(ep: EntryPoint) -> Factory:
    factory: Factory = ep.load()
    return factory


def discover() -> dict[str, Entry]:
    """Built-in schedulers, then entry points (which may not shadow a built-in name)."""
    found = {
        name: Entry(
            name,
            functools.partial(_load, module),
            install.command(EXTRAS[name]) if name in EXTRAS else "",
        )
        for name, module in BUILTIN.items()
    }
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in found:
            log.warning("entry point %s=%s ignored: %s is built in", ep.name, ep.value, ep.name)
            continue
        found[ep.name] = Entry(ep.name, functools.partial(_load_entry_point, ep), dist=ep.dist)
    return found


def before_retry() -> None:
    """Called before importing again a module that failed: the import system's directory
    caches may predate a package installed since."""
    importlib.invalidate_caches()


def path_state() -> tuple[tuple[str, int], ...]:
    """The modification time of each sys.path entry: installing a package changes the one it
    goes in, so a failed import is worth trying again only once this changed (cheaper than
    the import, a few stat calls)."""
    out = []
    for entry in sys.path:
        try:
            out.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            out.append((entry, -1))
    return tuple(out)


def import_error(entry: Entry, e: ImportError) -> str:
    """One line for a scheduler whose module failed to import: what is missing, and what to
    install: `No module named 'aiodocker': .../scripts/setup --venv ... docker installs it`."""
    said = " ".join(str(e).split()) or type(e).__name__
    if not isinstance(e, ModuleNotFoundError):
        return f"its module cannot be imported: {said}"
    command = entry.install or _extra_providing(entry.dist, e.name or "")
    if command:
        return f"{said}: {command} installs it"
    return f"{said}: install the package that provides it"


def _extra_providing(dist: Distribution | None, module: str) -> str:
    """`pip install 'dist[extra]'` when the plugin's distribution names, under one of its
    extras, a package whose name is the missing module's (told apart by case, '-', '_' and
    '.', as pip does)."""
    if dist is None or not module:
        return ""
    wanted = _normalized(module.partition(".")[0])
    for req in dist.requires or []:
        name = re.match(r"[A-Za-z0-9._-]+", req)
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", req)
        if name and extra and _normalized(name.group()) == wanted:
            return f"pip install '{dist.metadata['Name']}[{extra.group(1)}]'"
    return ""


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
