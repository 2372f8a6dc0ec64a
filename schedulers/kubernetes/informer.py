"""The informer: one collection (pods, jobs, ...) of one namespace kept in memory by list+watch.

`Informer.events()` LISTs the objects matching a label selector (page by page), then WATCHes
from the list's resourceVersion, keeping `store` (objects by name) current and yielding each
change once. The watch ends now and then (its timeoutSeconds, a dropped connection, an
apiserver restart): it resumes from the last resourceVersion seen (bookmarks advance it). When
that version is gone (410 Gone: etcd compacted it), the informer lists again and yields the
difference between what it held and what it finds, so no transition is lost and none repeated.
kubernetes_asyncio's Watch is not used: it retries a 410 once with the same version, then
raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from txd.schedulers.kubernetes.client import Kube, KubeError

# The statuses worth retrying the same request for: unreachable, throttled, server trouble.
_TRANSIENT = frozenset({0, 429, 500, 502, 503, 504})
# Pages of a LIST; a collection larger than _PAGE_SIZE * _MAX_PAGES is refused.
_PAGE_SIZE = 500
_MAX_PAGES = 10_000
# A watch that ends sooner than this having delivered nothing counts as a failed attempt.
_SHORT_WATCH = 1.0


@dataclass(frozen=True, slots=True)
class Event:
    """A change to one object: `type` ADDED, MODIFIED or DELETED; `obj` the object as the
    apiserver sent it (for a DELETED found by a relist, its last state known here)."""

    type: str
    obj: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


class Synced(enum.Enum):
    """The store holds the whole collection (after a list, and after the events of a relist)."""

    SYNCED = "synced"


SYNCED = Synced.SYNCED


def _uid(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("uid", ""))


def _version(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def diff(old: Mapping[str, dict[str, Any]], new: Mapping[str, dict[str, Any]]) -> list[Event]:
    """The events that turn store `old` into `new` (both by name): DELETED for each object gone
    (or replaced by another of the same name: another uid), then ADDED for each new object and
    MODIFIED for each whose resourceVersion changed."""
    events = [
        Event("DELETED", obj)
        for name, obj in old.items()
        if name not in new or _uid(new[name]) != _uid(obj)
    ]
    for name, obj in new.items():
        prev = old.get(name)
        if prev is None or _uid(prev) != _uid(obj):
            events.append(Event("ADDED", obj))
        elif _version(prev) != _version(obj):
            events.append(Event("MODIFIED", obj))
    return events


class _Retries:
    """A bound on consecutive failures: at most `attempts` of them within `seconds`, with a
    growing pause between; a success starts a new count."""

    def __init__(self, attempts: int, seconds: float) -> None:
        self.attempts, self.seconds = attempts, seconds
        self._count, self._since = 0, 0.0

    def reset(self) -> None:
        self._count = 0

    async def pause_or_raise(self, error: KubeError) -> None:
        now = time.monotonic()
        if self._count == 0:
            self._since = now
        self._count += 1
        if self._count > self.attempts or now - self._since > self.seconds:
            raise error
        await asyncio.sleep(min(0.1 * 2 ** (self._count - 1), 2.0))


class Informer:
    """List+watch of the collection at `path` (e.g. /api/v1/namespaces/default/pods, or
    /apis/batch.volcano.sh/v1alpha1/namespaces/NS/jobs), objects matching label `selector`.

    `kind` names the collection in messages ("pods"). `store` holds the current objects by
    metadata.name; `resource_version` is the last version seen. With `index_label`, the
    objects are also indexed by that label's value (`labelled`: one app's objects without a
    scan of the whole store). Counters: `lists` (every LIST
    of the whole collection), `relists` (those after the first, each followed by a diff),
    `gone` (410 Gone answers), `watches` (WATCH requests made).

    One consumer at a time: `events()` is a generator of the changes, to iterate until done.
    """

    def __init__(
        self,
        kube: Kube,
        path: str,
        selector: str,
        kind: str,
        *,
        timeout_seconds: int = 300,
        retry_attempts: int = 12,
        retry_seconds: float = 30.0,
        index_label: str = "",
    ) -> None:
        self.kube, self.path, self.selector, self.kind = kube, path, selector, kind
        # The apiserver ends each watch after about this long; the informer then resumes it.
        self.timeout_seconds = timeout_seconds
        self.retry_attempts, self.retry_seconds = retry_attempts, retry_seconds
        self.store: dict[str, dict[str, Any]] = {}
        self.index_label = index_label
        self._index: dict[str, dict[str, dict[str, Any]]] = {}  # label value -> name -> object
        self.resource_version = ""
        self.lists = self.relists = self.gone = self.watches = 0
        self._listed = False

    async def events(self) -> AsyncGenerator[Event | Synced, None]:
        """LIST, replace the store and yield SYNCED; then yield each change the WATCH brings.
        When the store was filled before (an earlier events() call) or the watch's version is
        gone (410), the LIST's difference from the store is yielded first, then SYNCED.

        Transient failures (unreachable, 429, 5xx) are retried, at most `retry_attempts` in a
        row within `retry_seconds`; then, and on any other failure, KubeError is raised: the
        caller may call events() again later, which relists and diffs as above."""
        retries = _Retries(self.retry_attempts, self.retry_seconds)
        relist = True
        while True:
            if relist:
                try:
                    found, version = await self._list()
                except KubeError as e:
                    # 410 here: a list's continue token expired midway; list again.
                    if e.status not in _TRANSIENT and e.status != 410:
                        raise
                    await retries.pause_or_raise(e)
                    continue
                retries.reset()
                changes = diff(self.store, found) if self._listed else []
                self.relists += int(self._listed)
                self._replace(found)
                self.resource_version, self._listed = version, True
                for change in changes:
                    yield change
                yield SYNCED
                relist = False
            started, seen = time.monotonic(), 0
            try:
                async with contextlib.aclosing(self._watch()) as watch:
                    async for item in watch:
                        seen += 1
                        if isinstance(item, Event):
                            yield item
                        else:
                            retries.reset()  # connected, or a bookmark: the watch works
            except KubeError as e:
                if e.status == 410:
                    self.gone += 1
                    relist = True
                elif e.status in _TRANSIENT:
                    await retries.pause_or_raise(e)
                else:
                    raise
                continue
            if not seen and time.monotonic() - started < _SHORT_WATCH:
                what = f"the watch of {self.kind} at {self.path} keeps ending at once"
                await retries.pause_or_raise(KubeError(0, "WatchEnded", what))

    async def refresh(self) -> None:
        """One LIST that replaces the store, for a caller that is not watching (a later
        events() reports the changes since, as after any relist)."""
        found, self.resource_version = await self._list()
        self._replace(found)

    def labelled(self, value: str) -> list[dict[str, Any]]:
        """The stored objects whose `index_label` label is `value`."""
        return list(self._index.get(value, {}).values())

    def _replace(self, store: dict[str, dict[str, Any]]) -> None:
        self.store, self._index = store, {}
        for name, obj in store.items():
            self._indexed(name, obj, add=True)

    def _label(self, obj: Mapping[str, Any]) -> str:
        if not self.index_label:
            return ""
        return str((obj.get("metadata", {}).get("labels") or {}).get(self.index_label) or "")

    def _indexed(self, name: str, obj: dict[str, Any], *, add: bool) -> None:
        """Adds the object to the index, or removes it."""
        value = self._label(obj)
        if not value:
            return
        if add:
            self._index.setdefault(value, {})[name] = obj
        elif (group := self._index.get(value)) is not None:
            group.pop(name, None)
            if not group:
                del self._index[value]

    async def _list(self) -> tuple[dict[str, dict[str, Any]], str]:
        """The whole collection by name, and the resourceVersion it was read at."""
        self.lists += 1
        found: dict[str, dict[str, Any]] = {}
        token = ""
        for _ in range(_MAX_PAGES):
            query = {"labelSelector": self.selector or None, "limit": _PAGE_SIZE}
            page = await self.kube.request("GET", self.path, query={**query, "continue": token})
            # Items of a list carry no kind and apiVersion; watch events' objects do.
            kind = str(page.get("kind", "")).removesuffix("List")
            for obj in page.get("items") or []:
                obj.setdefault("kind", kind)
                obj.setdefault("apiVersion", page.get("apiVersion", ""))
                found[obj["metadata"]["name"]] = obj
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                return found, str(meta.get("resourceVersion", ""))
        raise KubeError(0, "TooLarge", f"{self.kind} at {self.path}: more than {_MAX_PAGES} pages")

    async def _watch(self) -> AsyncGenerator[Event | None, None]:
        """One WATCH from `resource_version`: each change applied to the store and yielded once
        (a repeat is dropped); None when connected and for each bookmark. Ends when the server
        ends the watch; raises KubeError for a failure (410: the version is gone)."""
        query = {
            "watch": "true",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.timeout_seconds,
            "labelSelector": self.selector or None,
        }
        self.watches += 1
        # A silent connection longer than the watch's own timeout is a dead one.
        read_timeout = self.timeout_seconds + 30
        async with self.kube.stream(self.path, query, read_timeout=read_timeout) as chunks:
            yield None
            async for line in _lines(chunks):
                try:
                    event = json.loads(line)
                except ValueError as e:
                    msg = f"a watch event that is no JSON: {line[:200]!r}"
                    raise KubeError(0, "BadEvent", msg) from e
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":  # a Status: 410 when the version was compacted away
                    raise KubeError(
                        int(obj.get("code") or 0),
                        str(obj.get("reason") or "Error"),
                        str(obj.get("message") or "the watch failed"),
                        what=f"watch {self.kind} at {self.path}",
                    )
                self.resource_version = _version(obj) or self.resource_version
                if kind == "BOOKMARK":
                    yield None
                    continue
                change = self._apply(str(kind), obj)
                if change is not None:
                    yield change

    def _apply(self, kind: str, obj: dict[str, Any]) -> Event | None:
        """Updates the store with one watch event; None when it holds that version already."""
        name = str(obj["metadata"]["name"])
        held = self.store.get(name)
        if kind == "DELETED":
            if held is None:
                return None
            del self.store[name]
            self._indexed(name, held, add=False)
        elif kind in ("ADDED", "MODIFIED"):
            if held is not None and _version(held) == _version(obj):
                return None
            if held is not None and self._label(held) != self._label(obj):
                self._indexed(name, held, add=False)
            self.store[name] = obj
            self._indexed(name, obj, add=True)  # in place when held: the store's order
        else:
            return None
        return Event(kind, obj)


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The newline-ended lines of a chunked body (a watch sends one JSON event a line)."""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if pending.strip():
        yield pending
