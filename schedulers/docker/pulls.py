"""Which images a local_docker run pulls before it creates anything: the `pull` option.

- `always` (the default, TorchX 0.7's: it pulls every image on every run): a tag moved in its
  registry (a rebuilt `:latest` pushed again) runs what the registry holds now. Not pulled, as
  nothing newer can be there: an image named by id (`sha256:...`, as TorchX) or by digest
  (`name@sha256:...`), a workspace image txd built for the run, and an image the engine has
  under this name only from a build or a `docker tag` (no digest of this repository: it was
  never pulled or pushed under this name, so a registry has nothing of it, or something else
  under the same name, which a pull would put in the local build's place). A failed pull of an
  image the engine has fails the run with the engine's reason: the copy may be stale, and
  `always` asked for the registry's (TorchX warns in its log and runs the local copy).
- `missing`: only images the engine lacks are pulled (`docker run`'s default).
- `never`: nothing is pulled; an image the engine lacks fails the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from txd.schedulers.errors import InvalidArgument
from txd.schedulers.workspace.images import LABEL as WORKSPACE_LABEL

ALWAYS = "always"
MISSING = "missing"
NEVER = "never"
POLICIES = (ALWAYS, MISSING, NEVER)
_HUB_PREFIXES = ("docker.io/library/", "index.docker.io/library/", "docker.io/", "index.docker.io/")


def check(policy: str) -> None:
    if policy not in POLICIES:
        raise InvalidArgument("cfg.pull", f"expected one of {', '.join(POLICIES)}, got {policy!r}")


def repository(name: str) -> str:
    """The repository of an image reference, as the engine writes it in RepoTags and
    RepoDigests: without tag or digest, Docker Hub's `docker.io/library/` dropped."""
    repo = name.split("@", 1)[0]
    slash = repo.rfind("/")
    colon = repo.rfind(":")
    if colon > slash:  # a tag (a colon before the last slash is a registry's port)
        repo = repo[:colon]
    for prefix in _HUB_PREFIXES:
        if repo.startswith(prefix):
            return repo[len(prefix) :]
    return repo


def immutable(name: str) -> bool:
    """Named by image id or by digest: the same bytes wherever it is pulled from."""
    return name.startswith("sha256:") or "@" in name


def from_registry(name: str, info: Mapping[str, Any]) -> bool:
    """Whether the engine's image was pulled or pushed under this name's repository."""
    repo = repository(name)
    return any(repository(d) == repo for d in info.get("RepoDigests") or [])


def wants_pull(name: str, info: Mapping[str, Any] | None, policy: str) -> bool:
    """Whether a run pulls image `name`, given the engine's inspect data of it (None: the
    engine lacks it)."""
    if info is None:
        return policy != NEVER
    if policy != ALWAYS or immutable(name):
        return False
    labels = (info.get("Config") or {}).get("Labels") or {}
    if labels.get(WORKSPACE_LABEL) == "1":
        return False
    return from_registry(name, info)
