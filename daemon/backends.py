"""The daemon's scheduler instances: each built on first use (a backend's module is imported only
when it is used) with its settings section, started in the daemon's task group, and paired with
its status feed.

A module that failed to import is imported again at a later use, once a directory of sys.path
changed (a package installed), so installing a missing extra needs no restart; the failure is
logged once, in one line naming what to install (no traceback: a missing package is no bug).
A bad settings section, or a scheduler that fails to build for another reason, stays unusable
until a restart."""

from __future__ import annotations

import asyncio
import difflib
import logging
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from txd.daemon.cache import StatusCache
from txd.daemon.feeds import Feed, feed_for
from txd.schedulers import options, plugins
from txd.schedulers.api import Scheduler, TaskGroupLike
from txd.schedulers.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    TxdError,
)
from txd.v1.scheduler_pb2 import Capabilities, SchedulerInfo

log = logging.getLogger(__name__)

# How long Schedulers waits for one scheduler's readiness check (they run at once).
READINESS_TIMEOUT = 3.0


class SettingsError(Exception):
    """A scheduler's settings section is wrong: the daemon refuses to start."""


class Backends:
    def __init__(
        self,
        session: str,
        state_dir: Path,
        settings: dict[str, dict[str, Any]],
        cache: StatusCache,
        tasks: TaskGroupLike,
        entries: dict[str, plugins.Entry] | None = None,
    ) -> None:
        self.session = session
        self._state_dir = state_dir
        self._settings = settings
        self._cache = cache
        self._tasks = tasks  # the daemon's task group
        self._entries = plugins.discover() if entries is None else entries
        self._instances: dict[str, Scheduler[Any, Any]] = {}
        self._feeds: dict[str, Feed] = {}
        self._load_errors: dict[str, str] = {}  # lasting: settings, a failed build
        # The last failed import and plugins.path_state() before it: tried again once that
        # changed (a package installed since).
        self._import_errors: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = {}
        self._building: dict[str, asyncio.Lock] = {}

    def names(self) -> list[str]:
        return list(self._entries)

    def check(self, name: str) -> None:
        """Raises NotFound for a scheduler nobody registered."""
        if name not in self._entries:
            close = difflib.get_close_matches(name, self._entries, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = ", ".join(sorted(self._entries))
            raise NotFound(f"unknown scheduler {name!r} (known: {known}){hint}")

    async def check_settings(self) -> None:
        """Builds every scheduler that has a settings section, so a wrong one stops the daemon
        at start instead of surfacing at the first Run."""
        for name in self._settings:
            if name not in self._entries:
                known = ", ".join(sorted(self._entries))
                raise SettingsError(f"settings for unknown scheduler {name!r} (known: {known})")
            try:
                await self.get(name)
            except TxdError as e:
                raise SettingsError(str(e)) from None

    async def get(self, name: str) -> Scheduler[Any, Any]:
        """The scheduler called `name`, built and started on first use."""
        if (sched := self._instances.get(name)) is not None:
            return sched
        self.check(name)
        async with self._building.setdefault(name, asyncio.Lock()):
            if (sched := self._instances.get(name)) is not None:
                return sched
            if name in self._load_errors:
                raise FailedPrecondition(f"scheduler {name} is unusable: {self._load_errors[name]}")
            factory = await self._import(name)
            try:
                sched = factory(
                    self.session,
                    settings=self._settings.get(name, {}),
                    state_dir=self._state_dir / "schedulers" / name,
                )
                await sched.start(self._tasks)
            except InvalidArgument as e:  # a bad settings key or value
                self._load_errors[name] = f"settings [schedulers.{name}] {e}"
                raise FailedPrecondition(self._load_errors[name]) from None
            except Exception as e:
                self._load_errors[name] = f"{type(e).__name__}: {e}"
                log.exception("scheduler %s failed to load", name)
                raise FailedPrecondition(
                    f"scheduler {name} is unusable: {self._load_errors[name]}"
                ) from None
            self._instances[name] = sched
            self._feeds[name] = feed_for(name, sched, self._cache, self._tasks)
            return sched

    async def _load(self, name: str) -> Any:
        """The entry point's factory, imported in a thread: a backend's client library takes
        about a second to import (kubernetes_asyncio, aioboto3), which on the event loop would
        hold up every other call and every status push. Only on first use, never ahead: every
        backend's libraries together are about 60 MiB of the daemon's memory (59 MiB of a
        daemon running local jobs at 49ae975, 111 MiB with them all preloaded)."""
        if name in self._import_errors:
            plugins.before_retry()
        return await asyncio.to_thread(self._entries[name].load)

    async def _import(self, name: str) -> Any:
        """The factory (_load); an import that fails raises FailedPrecondition naming what to
        install, and is tried again at a later use once sys.path's directories changed."""
        paths = plugins.path_state()
        failed = self._import_errors.get(name)
        if failed is not None and failed[1] == paths:  # nothing installed since
            raise FailedPrecondition(f"scheduler {name} is unusable: {failed[0]}")
        try:
            factory = await self._load(name)
        except ImportError as e:
            reason = plugins.import_error(self._entries[name], e)
            last = self._import_errors.get(name)  # as now: another use may have failed too
            if last is None or last[0] != reason:  # logged once, not at every use
                log.warning("scheduler %s is unusable: %s", name, reason)
            self._import_errors[name] = (reason, paths)
            raise FailedPrecondition(f"scheduler {name} is unusable: {reason}") from None
        except OSError as e:  # out of fds or memory while reading its files: for now only
            log.warning("scheduler %s could not be imported now: %s", name, e)
            raise ResourceExhausted(f"scheduler {name} could not be imported now: {e}") from None
        except Exception as e:  # the module itself is broken: a bug, for good
            self._load_errors[name] = f"{type(e).__name__}: {e}"
            log.exception("scheduler %s failed to load", name)
            raise FailedPrecondition(
                f"scheduler {name} is unusable: {self._load_errors[name]}"
            ) from None
        if self._import_errors.pop(name, None) is not None:
            log.info("scheduler %s: its module imports now", name)
        return factory

    def feed(self, name: str) -> Feed:
        """The status feed of a scheduler already built (every followed job's is)."""
        return self._feeds[name]

    async def infos(self, *, check: bool = False) -> list[SchedulerInfo]:
        """Every scheduler: usable or why not; with `check`, whether a usable one's backend
        is ready (not_ready), the checks run at once, each within READINESS_TIMEOUT."""
        out = []
        ready: list[Awaitable[str]] = []
        for name in self._entries:
            try:
                sched = await self.get(name)
            except TxdError as e:
                failed = self._import_errors.get(name)
                reason = self._load_errors.get(name) or (failed[0] if failed else str(e))
                out.append(SchedulerInfo(name=name, load_error=reason))
                continue
            caps = Capabilities()
            caps.CopyFrom(sched.capabilities)
            caps.push_status = sched.pushes()  # a fact, whatever the class claims
            out.append(
                SchedulerInfo(
                    name=name,
                    description=sched.description,
                    capabilities=caps,
                    backend_calls=sched.backend_calls(),
                    settings=options.as_cfg(sched.settings),
                )
            )
            if check:
                ready.append(_readiness(name, sched))
        reasons = iter(await asyncio.gather(*ready))
        for info in out:
            if check and not info.load_error:
                info.not_ready = next(reasons)
        return out

    # -- shutdown, in order -----------------------------------------------------------------

    async def shutdown(self, grace: float) -> None:
        """Each scheduler ends what it runs on this host; then the final statuses of pushing
        schedulers' jobs (this host's processes and containers) are settled through their
        feeds, within `grace` seconds: what can be recorded is. Polled jobs live on a cluster
        and keep running. Backend errors are logged, never raised."""
        for name, sched in self._instances.items():
            try:
                await sched.shutdown(grace)
            except TxdError as e:  # the backend's trouble, not a bug: no traceback
                log.warning("%s: shutdown: %s", name, e)
            except Exception:
                log.exception("%s: shutdown failed", name)
        try:
            async with asyncio.timeout(grace):
                for name, feed in self._feeds.items():
                    jobs = self._cache.followed(name)
                    if jobs and self._instances[name].pushes():
                        await feed.refresh(jobs)
        except TimeoutError:
            log.warning("shutdown: could not settle every job's status within %g s", grace)

    async def stop_feeds(self) -> None:
        for feed in self._feeds.values():
            await feed.stop()

    async def aclose(self) -> None:
        """Closes schedulers in reverse order of creation; a failure is logged and skipped."""
        for name, sched in reversed(self._instances.items()):
            try:
                await sched.aclose()
            except Exception:
                log.exception("%s: close failed", name)


async def _readiness(name: str, sched: Scheduler[Any, Any]) -> str:
    """The scheduler's readiness (Scheduler.readiness) in one line, within READINESS_TIMEOUT.
    A check that fails is itself the reason; one that fails unexpectedly is logged."""
    try:
        async with asyncio.timeout(READINESS_TIMEOUT):
            reason = await sched.readiness()
    except TimeoutError:
        return f"its backend did not say within {READINESS_TIMEOUT:g} s whether it answers"
    except TxdError as e:
        reason = str(e)
    except Exception as e:
        log.exception("%s: readiness check failed", name)
        reason = f"its readiness check failed: {type(e).__name__}: {e}"
    return " ".join(reason.split())  # one line
