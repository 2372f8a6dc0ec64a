"""Fixtures of the lsf scheduler tests. The doubles live in lsf_fakes.py, a module of its own:
pyproject's pytest `pythonpath` puts this folder on sys.path."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import lsf_fakes
import pytest

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
    from txd.schedulers.hpc import lsf

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
    host.respond("bqueues", lsf_fakes.bqueues)
    host.respond("sh", lsf_fakes.shared_jobdirs)
    return host


@pytest.fixture
async def sched(hosts: Any, local: Any) -> AsyncIterator[Any]:
    from txd.schedulers.hpc.lsf import LsfScheduler

    s = LsfScheduler("test", hosts=hosts)
    try:
        yield s
    finally:
        await s.aclose()
