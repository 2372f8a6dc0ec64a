"""docker.pulls: which images a run pulls, per policy, from the engine's inspect data (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from txd.schedulers.docker import pulls
from txd.schedulers.errors import InvalidArgument

PULLED = {"RepoDigests": ["127.0.0.1:5000/team/app@sha256:" + "a" * 64]}
HUB = {"RepoDigests": ["busybox@sha256:" + "b" * 64]}
BUILT: dict[str, Any] = {"RepoDigests": []}
WORKSPACE = {**PULLED, "Config": {"Labels": {"txd.workspace": "1"}}}


@pytest.mark.parametrize(
    ("name", "repo"),
    [
        ("busybox", "busybox"),
        ("busybox:1.36", "busybox"),
        ("docker.io/library/busybox:latest", "busybox"),
        ("docker.io/me/app", "me/app"),
        ("127.0.0.1:5000/team/app", "127.0.0.1:5000/team/app"),
        ("127.0.0.1:5000/team/app:v2", "127.0.0.1:5000/team/app"),
        ("127.0.0.1:5000/team/app@sha256:abc", "127.0.0.1:5000/team/app"),
    ],
)
def test_repository(name: str, repo: str) -> None:
    assert pulls.repository(name) == repo


@pytest.mark.parametrize(
    ("name", "info", "policy", "wanted"),
    [
        # always: a tag of a registry's image, also when named as Docker Hub's full name
        ("127.0.0.1:5000/team/app:latest", PULLED, "always", True),
        ("docker.io/library/busybox:latest", HUB, "always", True),
        # ... but not one built here, or another repository's digest only (a docker tag)
        ("127.0.0.1:5000/team/app:latest", BUILT, "always", False),
        ("me/tool:latest", HUB, "always", False),
        # ... nor an id, a digest or a workspace image
        ("sha256:" + "c" * 64, PULLED, "always", False),
        ("127.0.0.1:5000/team/app@sha256:" + "a" * 64, PULLED, "always", False),
        ("127.0.0.1:5000/team/app:ws", WORKSPACE, "always", False),
        # missing and never: the engine's copy
        ("127.0.0.1:5000/team/app:latest", PULLED, "missing", False),
        ("127.0.0.1:5000/team/app:latest", PULLED, "never", False),
        # an image the engine lacks
        ("busybox", None, "always", True),
        ("busybox", None, "missing", True),
        ("busybox", None, "never", False),
    ],
)
def test_wants_pull(name: str, info: dict[str, Any] | None, policy: str, wanted: bool) -> None:
    assert pulls.wants_pull(name, info, policy) is wanted


def test_an_unknown_policy_is_named() -> None:
    with pytest.raises(InvalidArgument) as e:
        pulls.check("sometimes")
    assert str(e.value) == "cfg.pull: expected one of always, missing, never, got 'sometimes'"
