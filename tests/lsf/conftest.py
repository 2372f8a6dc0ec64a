"""Fixtures of the lsf scheduler tests. The doubles live in lsf_fakes.py, registered here as
the module `lsf_fakes` so the test files can import them."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest


def _load_fakes() -> Any:
    if "lsf_fakes" in sys.modules:
        return sys.modules["lsf_fakes"]
    spec = importlib.util.spec_from_file_location(
        "lsf_fakes", Path(__file__).with_name("lsf_fakes.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lsf_fakes"] = module
    spec.loader.exec_module(module)
    return module


lsf_fakes = _load_fakes()

# App ids the tests expect (the ones in recorded/bjobs_apps.stdout), by app name.
APP_IDS = {
    "ddp": "ddp-bcdfghjklmnp",
    "echo": "echo-cdfghjklmnpq",
    "fail": "fail-dfghjklmnpqr",
    "stop": "stop-fghjklmnpqrs",
    "susp": "susp-ghjklmnpqrst",
    "odd": "odd-hjklmnpqrstv",
}


@pytest.fixture(autouse=True)
def fixed_app_ids(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """make_unique without randomness: known names get their recorded id, others `<name>-x1`."""
    from txd.schedulers import lsf

    monkeypatch.setattr(lsf, "make_unique", lambda name: APP_IDS.get(name, f"{name}-x1"))
    yield


@pytest.fixture
def hosts() -> Any:
    return lsf_fakes.FakeHosts()


@pytest.fixture
def local(hosts: Any) -> Any:
    """The fake of this host, with the cluster's hosts and a submit that always succeeds."""
    host = hosts.get(None)
    host.reply("bhosts", lsf_fakes.Reply(lsf_fakes.recorded("bhosts.txt")))
    host.respond("/bin/bash", lsf_fakes.submitted)
    return host


@pytest.fixture
async def sched(hosts: Any, local: Any) -> AsyncIterator[Any]:
    from txd.schedulers.lsf import LsfScheduler

    s = LsfScheduler("test", hosts=hosts)
    try:
        yield s
    finally:
        await s.aclose()
