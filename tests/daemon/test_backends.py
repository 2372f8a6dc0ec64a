"""The daemon's scheduler instances (daemon/backends.py): settings sections checked at first
use (and at start), capabilities reported as facts, unknown names with a hint."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from daemon_fakes import FakePusher, FakeScheduler, Tasks
from txd.daemon.backends import Backends, SettingsError
from txd.daemon.cache import StatusCache
from txd.daemon.jobstore import JobStore
from txd.schedulers import plugins
from txd.schedulers.errors import FailedPrecondition, NotFound
from txd.v1 import Capabilities


class ClaimsPush(FakeScheduler):
    """Claims push_status but does not implement changes(): it is polled."""

    name = "claims"
    capabilities = Capabilities(push_status=True, cancel=True)


class HidesPush(FakePusher):
    """Implements changes() but does not claim push_status: it pushes."""

    name = "hides"
    capabilities = Capabilities(cancel=True)


FACTORIES: dict[str, Callable[..., Any]] = {
    "fake": FakeScheduler,
    "claims": ClaimsPush,
    "hides": HidesPush,
}


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the fakes are registered."""
    entries = {
        name: plugins.Entry(name, lambda f=factory: f)  # type: ignore[misc]
        for name, factory in FACTORIES.items()
    }
    monkeypatch.setattr(plugins, "discover", lambda: entries)


@pytest.fixture
async def tasks() -> AsyncIterator[Tasks]:
    t = Tasks()
    yield t
    await t.aclose()


@pytest.fixture
def make(
    tmp_path: Path, store: JobStore, tasks: Tasks
) -> Callable[[dict[str, dict[str, Any]]], Backends]:
    def build(settings: dict[str, dict[str, Any]]) -> Backends:
        return Backends("s", tmp_path, settings, StatusCache(store), tasks)

    return build


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"bogus": 1}, "bogus"),
        ({"poll_interval": "often"}, "poll_interval"),
        ({"poll_interval": -1}, "poll_interval"),
    ],
)
async def test_a_bad_settings_section_fails_at_first_use_naming_the_key(
    make: Callable[..., Backends], section: dict[str, Any], key: str
) -> None:
    scheds = make({"fake": section})
    for _ in range(2):  # and again: the load error is kept
        with pytest.raises(FailedPrecondition) as e:
            await scheds.get("fake")
        assert "[schedulers.fake]" in str(e.value) and key in str(e.value)
    with pytest.raises(SettingsError, match=key):
        await make({"fake": section}).check_settings()


async def test_good_settings_reach_the_scheduler(make: Callable[..., Backends]) -> None:
    scheds = make({"fake": {"poll_interval": "2.5"}})
    await scheds.check_settings()
    assert (await scheds.get("fake")).settings.poll_interval == 2.5
    assert await scheds.get("fake") is await scheds.get("fake")


async def test_settings_of_an_unknown_scheduler_stop_the_daemon(
    make: Callable[..., Backends],
) -> None:
    with pytest.raises(SettingsError, match=r"unknown scheduler 'nope' \(known: "):
        await make({"nope": {"poll_interval": 1}}).check_settings()


async def test_push_status_is_what_changes_does(make: Callable[..., Backends]) -> None:
    infos = {i.name: i for i in await make({}).infos()}
    assert not infos["claims"].capabilities.push_status
    assert infos["claims"].capabilities.cancel
    assert infos["hides"].capabilities.push_status
    assert not infos["fake"].capabilities.push_status


async def test_each_scheduler_gets_the_feed_of_its_kind(make: Callable[..., Backends]) -> None:
    from txd.daemon.feeds import ChangeFeed, PollFeed

    scheds = make({})
    for name in ("claims", "hides"):
        await scheds.get(name)
    assert isinstance(scheds.feed("claims"), PollFeed)
    assert isinstance(scheds.feed("hides"), ChangeFeed)


async def test_an_unknown_scheduler_gets_a_hint(make: Callable[..., Backends]) -> None:
    scheds = make({})
    with pytest.raises(NotFound, match=r"unknown scheduler 'fak' \(known: claims, fake, hides\)"):
        await scheds.get("fak")
    with pytest.raises(NotFound) as e:
        scheds.check("fak")
    assert str(e.value).endswith("did you mean 'fake'?")
    with pytest.raises(NotFound) as e:
        scheds.check("zzzzzz")
    assert "did you mean" not in str(e.value)
