"""The kubernetes schedulers' watches: one Informer (txd.schedulers.kubernetes.informer) per
namespace and collection (pods, and the apps' controller objects: Jobs, Volcano Jobs,
AppWrappers), their stores indexed by the app-id label, so that one app's objects are found
without a scan of every object.

While the daemon listens (the scheduler's `changes`), `Watches.listening` runs one pump per
informer and a probe of the API server, in the scheduler's task group, and fans what they
report into one `Listener`: the app ids whose objects changed, or the error that ends the
stream. Without a listener, `refresh` lists a collection once instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from txd.schedulers.kubernetes.client import Kube, KubeError
from txd.schedulers.kubernetes.crds import VOLCANO_API
from txd.schedulers.kubernetes.informer import SYNCED, Event, Informer
from txd.schedulers.kubernetes.names import APP_ID_LABEL, SCHEDULER_LABEL
from txd.schedulers.kubernetes.status import app_id_of
from txd.schedulers.pulse import Pulse

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Collection:
    """A namespaced collection of the API, such as pods or batch/v1 jobs."""

    api: str  # "v1", "batch/v1", "batch.volcano.sh/v1alpha1" ...
    plural: str

    def path(self, namespace: str, name: str = "") -> str:
        prefix = "/api/v1" if self.api == "v1" else f"/apis/{self.api}"
        tail = f"/{name}" if name else ""
        return f"{prefix}/namespaces/{namespace}/{self.plural}{tail}"


PODS = Collection("v1", "pods")
SERVICES = Collection("v1", "services")
JOBS = Collection("batch/v1", "jobs")
VOLCANO_JOBS = Collection(VOLCANO_API, "jobs")
_PLURALS = {"Service": "services", "Job": "jobs", "AppWrapper": "appwrappers", "Pod": "pods"}

Key = tuple[str, Collection]  # (namespace, collection): one informer
Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


def collection_of(obj: Mapping[str, Any]) -> Collection:
    return Collection(str(obj["apiVersion"]), _PLURALS[str(obj["kind"])])


@dataclass
class Listener:
    """What the pumps and the probe report while the daemon listens: the ids of the apps whose
    objects changed, or the error that ends the stream; and the tasks that report."""

    queue: asyncio.Queue[str | KubeError] = field(default_factory=asyncio.Queue)
    tasks: dict[Key | None, asyncio.Task[None]] = field(default_factory=dict)  # None: probe

    async def changed(self) -> set[str]:
        """The app ids reported since the last call (waits for one); raises the first error
        reported instead."""
        found = {await self.queue.get()}
        while not self.queue.empty():
            found.add(self.queue.get_nowait())
        for item in found:
            if isinstance(item, KubeError):
                raise item
        return {str(app_id) for app_id in found}


class Watches:
    """The informers of one scheduler (the objects labelled with its `scheduler` name), made
    on demand (`want`), and what has listed since the listener started (`listed`)."""

    def __init__(self, scheduler: str) -> None:
        self.scheduler = scheduler
        self._informers: dict[Key, Informer] = {}
        self._listed: set[Key] = set()  # has listed while listened to: its store answers
        self._lists = Pulse()  # fired when a store was listed
        self.pods_changed = Pulse()  # fired on each change of a pod
        self._listener: Listener | None = None
        self._spawn: Spawn | None = None

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def want(self, kube: Kube, namespace: str, owners: Collection) -> list[Key]:
        """Makes sure the namespace's pods and `owners` are watched while the daemon listens."""
        keys = [(namespace, PODS), (namespace, owners)]
        for key in keys:
            if key not in self._informers:
                ns, coll = key
                self._informers[key] = Informer(
                    kube,
                    coll.path(ns),
                    f"{SCHEDULER_LABEL}={self.scheduler}",
                    f"{coll.plural} in {ns}",
                    index_label=APP_ID_LABEL,
                )
            if self._listener is not None and key not in self._listener.tasks:
                self._start(self._listener, key)
        return keys

    def objects(self, namespace: str, coll: Collection, name: str) -> list[dict[str, Any]]:
        """The objects of app `name` in the store of (namespace, coll); [] if none is kept."""
        informer = self._informers.get((namespace, coll))
        return informer.labelled(name) if informer is not None else []

    def controllers(self, namespace: str) -> list[Collection]:
        """The controller collections watched in the namespace (every one but pods)."""
        return [coll for ns, coll in self._informers if ns == namespace and coll != PODS]

    def listed(self, namespace: str) -> bool:
        """Whether every watch of the namespace has listed since the listener started."""
        return all(key in self._listed for key in self._informers if key[0] == namespace)

    async def synced(self, keys: Iterable[Key], timeout: float) -> None:
        """Waits (at most `timeout` s: TimeoutError) until each of these watches has listed."""
        keys = list(keys)
        async with asyncio.timeout(timeout):
            while True:  # bounded by the timeout
                seen = self._lists.gen
                if all(key in self._listed for key in keys):
                    return
                await self._lists.wait_past(seen)

    async def refresh(self, keys: Iterable[Key]) -> None:
        """One list per collection, for callers when nobody listens (KubeError if one fails)."""
        for key in keys:
            await self._informers[key].refresh()

    @contextlib.asynccontextmanager
    async def listening_to(
        self, kube: Kube, api_timeout: float, spawn: Spawn
    ) -> AsyncIterator[Listener]:
        """A pump per watch (and per watch wanted later) and the probe, in `spawn`'s task
        group, reporting to the listener this yields; all of them stop when it closes."""
        listener = Listener()
        self._listener, self._spawn = listener, spawn
        try:
            listener.tasks[None] = spawn(self._probe(kube, api_timeout, listener), "probe")
            for key in list(self._informers):
                self._start(listener, key)
            yield listener
        finally:
            self._listener = self._spawn = None
            tasks = list(listener.tasks.values())
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._listed.clear()

    def _start(self, listener: Listener, key: Key) -> None:
        assert self._spawn is not None
        name = f"watch {key[1].plural} in {key[0]}"
        listener.tasks[key] = self._spawn(self._pump(listener, key), name)

    async def _pump(self, listener: Listener, key: Key) -> None:
        """Reports one informer's changes to the listener, as the app ids they concern."""
        ns, coll = key
        informer = self._informers[key]
        pods = coll == PODS
        try:
            # aclosing: a cancelled pump closes its watch's connection at once, not at GC.
            async with contextlib.aclosing(informer.events()) as events:
                async for item in events:
                    if item is SYNCED:  # a (re)list: what it found is reported too
                        self._listed.add(key)
                        self._lists.fire()
                        for obj in informer.store.values():
                            _report(listener, obj)
                        continue
                    assert isinstance(item, Event)
                    _report(listener, item.obj)
                    if pods:
                        self.pods_changed.fire()
        except KubeError as e:
            self._failed(key)
            listener.queue.put_nowait(e)
        except Exception as e:  # an answer it cannot read: changes() ends, the daemon resyncs
            log.warning("%s: the watch of %s in %s failed: %r", self.scheduler, coll.plural, ns, e)
            self._failed(key)
            listener.queue.put_nowait(KubeError(0, type(e).__name__, str(e)))

    def _failed(self, key: Key) -> None:
        self._listed.discard(key)  # describe_many waits (bounded) for its next list

    @staticmethod
    async def _probe(kube: Kube, timeout: float, listener: Listener) -> None:
        """Checks every `timeout` seconds that the API server answers (Kube.answers), and
        reports the first check that fails, ending the stream: a watch cannot tell a quiet
        collection from a hung server before its own read timeout (timeoutSeconds + 30)."""
        while True:
            await asyncio.sleep(timeout)
            try:
                await kube.answers(timeout)
            except KubeError as e:
                listener.queue.put_nowait(e)
                return


def _report(listener: Listener, obj: Mapping[str, Any]) -> None:
    if app_id := app_id_of(obj):
        listener.queue.put_nowait(app_id)
