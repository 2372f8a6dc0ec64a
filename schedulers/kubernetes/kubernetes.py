"""kubernetes: an app as Kubernetes objects, its status from one watch per namespace and kind.

Without a Volcano `queue` an app is a headless Service (the root) and one batch/v1 Job per
replica owned by it (an Indexed Job per role on Kubernetes >= 1.21), so it runs on any cluster;
with a queue it is one Volcano Job, exactly as TorchX makes it (txd.schedulers.kubernetes.objects,
crds).
App ids are `<namespace>:<name>`, as TorchX's.

Status is pushed: while the daemon listens (`changes`), one Informer per namespace and
collection (pods, and the apps' controller objects: Jobs, Volcano Jobs, AppWrappers) keeps
every txd object of this scheduler in memory, whatever the number of jobs and clients; each
change is folded into the app's status (txd.schedulers.kubernetes.status) from those stores, and
describe_many answers from them without an API call. A watch whose version was compacted away
(410 Gone) lists again and reports only the differences (txd.schedulers.kubernetes.informer).

The cluster is the daemon's (the contract's credential rule): `kubeconfig` and `context` in the
scheduler's settings, else $KUBECONFIG, ~/.kube/config, or the in-cluster service account.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import re
import time
import typing
from collections import Counter, OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from txd.schedulers.api import (
    SUBSCRIBED,
    Change,
    Described,
    DryRunInfo,
    Ended,
    Job,
    LogQuery,
    NoAnswer,
    Scheduler,
    Settings,
    SubmitContext,
    Submitted,
    Subscribed,
)
from txd.schedulers.errors import (
    AlreadyExists,
    BackendUnavailable,
    InvalidArgument,
    NotFound,
    Unsupported,
)
from txd.schedulers.kubernetes import crds, names, objects
from txd.schedulers.kubernetes.client import Kube, KubeError
from txd.schedulers.kubernetes.informer import SYNCED, Event, Informer
from txd.schedulers.kubernetes.opts import KubernetesOpts
from txd.schedulers.kubernetes.status import (
    CANCELLED_ANNOTATION,
    app_id_of,
    app_status,
    newest,
    pod_key,
)
from txd.schedulers.logfiles import selected
from txd.schedulers.options import opt
from txd.schedulers.workspace import images
from txd.v1 import TERMINAL_STATES, AppState, Stream
from txd.v1.app_pb2 import AppDef, AppStatus
from txd.v1.scheduler_pb2 import Capabilities

log = logging.getLogger(__name__)

NAME = "kubernetes"
REMOVED = "its objects were deleted outside txd; the last recorded state is kept"
RECENT_DELETED = 1024  # app ids deleted through txd (see local_docker)
SYNC_TIMEOUT = 30.0  # how long describe_many waits for a new watch's first list
UNSEEN_GRACE = 60.0  # a submitted app the watch has not shown yet is SUBMITTED this long
_TS = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z ")
_TS_INNER = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z ")
PARTIAL = 16 * 1024  # Docker's json-file log driver splits longer lines (see _timed)


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
VOLCANO_JOBS = Collection(crds.VOLCANO_API, "jobs")
_PLURALS = {"Service": "services", "Job": "jobs", "AppWrapper": "appwrappers", "Pod": "pods"}


def collection_of(obj: Mapping[str, Any]) -> Collection:
    return Collection(str(obj["apiVersion"]), _PLURALS[str(obj["kind"])])


@dataclass
class KubeSettings(Settings):
    kubeconfig: str = opt(
        "", "the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)"
    )
    context: str = opt("", "the kubeconfig context (default: its current context)")
    namespace: str = opt("", "the namespace of runs that name none (default: the context's)")
    docker_host: str = images.docker_host_setting()
    api_timeout: float = opt(
        10.0,
        "while jobs are watched, seconds between checks that the API server answers (GET "
        "/version), and how long one may take: a watch is as quiet as a hung API server, "
        "which thus marks the jobs' statuses stale within twice this",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.api_timeout > 0:
            raise ValueError(f"api_timeout must be > 0, got {self.api_timeout!r}")


@dataclass
class KubeRequest:
    """Every object of a submission, in creation order (the root first)."""

    app_id: str  # <namespace>:<name>
    namespace: str
    name: str
    shape: str  # plain, indexed, volcano, appwrapper
    objects: list[dict[str, Any]]
    owners: Collection  # the collection of the objects status is read from

    def render(self) -> str:
        head = f"namespace {self.namespace}; every object after the first is owned by it"
        return objects.render_yaml(self.objects, header=head)


@dataclass
class _Feed:
    """The informers' tasks while a changes() generator listens, and what they report."""

    queue: asyncio.Queue[str | KubeError] = field(default_factory=asyncio.Queue)
    tasks: dict[tuple[str, Collection], asyncio.Task[None]] = field(default_factory=dict)
    probe: asyncio.Task[None] | None = None  # see _probe


class KubernetesScheduler(Scheduler[Any, KubeRequest]):
    name = NAME
    description = "Kubernetes: batch/v1 Jobs, or Volcano Jobs with a queue, one watch for all"
    capabilities = Capabilities(
        logs=True,
        log_follow=True,
        log_since_until=True,
        cancel=True,
        delete=True,
        list=True,
        describe=True,
        distributed=True,
        mounts=True,
        retries=True,
        push_status=True,
        workspace=True,
    )
    Opts: ClassVar[type] = KubernetesOpts
    Settings = KubeSettings

    def __init__(self, session_name: str, settings: Mapping[str, Any] | None = None) -> None:
        super().__init__(session_name, settings)
        self._kube: Kube | None = None
        self._connecting = asyncio.Lock()
        self._version: tuple[int, int] | None = None
        self._informers: dict[tuple[str, Collection], Informer] = {}
        self._synced: dict[tuple[str, Collection], asyncio.Event] = {}
        self._feed: _Feed | None = None
        self._pods_changed = asyncio.Condition()
        self._unseen: dict[str, float] = {}  # app id -> when submitted, until a watch shows it
        self._deleted: OrderedDict[str, None] = OrderedDict()
        self._images = images.Builder(typing.cast(KubeSettings, self.settings).docker_host)

    # -- the connection ---------------------------------------------------------------------

    async def kube(self) -> Kube:
        """The cluster connection, made on first use (BackendUnavailable when it cannot be)."""
        if self._kube is None:
            async with self._connecting:
                if self._kube is None:
                    s = typing.cast(KubeSettings, self.settings)
                    try:
                        self._kube = await Kube.connect(s.kubeconfig, s.context)
                    except KubeError as e:
                        raise BackendUnavailable(f"{self.name}: {e}") from e
        return self._kube

    async def _call(
        self,
        method: str,
        path: str,
        *,
        missing_ok: bool = False,
        forbidden_ok: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """One API call; unreachable or failing -> BackendUnavailable, 404 -> {} if missing_ok,
        403 -> {} if forbidden_ok, a POST's 409 (the name is taken) -> AlreadyExists."""
        kube = await self.kube()
        try:
            return await kube.request(method, path, **kwargs)
        except KubeError as e:
            if (missing_ok and e.status == 404) or (forbidden_ok and e.status == 403):
                return {}
            if e.status == 409 and method == "POST":
                raise AlreadyExists(f"{self.name}: {e}") from e
            if e.status in (400, 403, 404, 409, 422):
                raise InvalidArgument("app", f"the Kubernetes API refused it: {e}") from e
            raise BackendUnavailable(f"{self.name}: {e}") from e

    async def _server_version(self) -> tuple[int, int]:
        if self._version is None:
            info = await self._call("GET", "/version")
            minor = re.match(r"\d+", str(info.get("minor", "0")))
            self._version = (int(info.get("major", 0) or 0), int(minor.group() if minor else 0))
        return self._version

    async def _namespace(self, requested: str) -> str:
        s = typing.cast(KubeSettings, self.settings)
        return requested or s.namespace or (await self.kube()).namespace

    # -- submission -------------------------------------------------------------------------

    async def _submit_dryrun(
        self, app: AppDef, opts: Any, ctx: SubmitContext
    ) -> DryRunInfo[KubeRequest]:
        name = names.app_id_for(app.name, app.roles)
        kw = {"scheduler": self.name, "session": self.session_name}
        shape, objs = await self._objects(app, name, opts, kw)
        ns = await self._namespace(opts.namespace)
        req = KubeRequest(
            app_id=f"{ns}:{name}",
            namespace=ns,
            name=name,
            shape=shape,
            objects=objs,
            owners=collection_of(objs[1] if shape in ("plain", "indexed") else objs[0]),
        )
        return DryRunInfo(app=app, request=req, opts=opts, render=req.render)

    async def _objects(
        self, app: AppDef, name: str, opts: Any, kw: dict[str, str]
    ) -> tuple[str, list[dict[str, Any]]]:
        if opts.queue:
            return "volcano", crds.volcano_objects(app, name, opts, **kw)
        if await self._server_version() >= (1, 21):
            return "indexed", objects.indexed_objects(app, name, opts, **kw)
        return "plain", objects.plain_objects(app, name, opts, **kw)

    async def prepare_workspace(
        self, app: AppDef, opts: Any, ctx: SubmitContext, *, dryrun: bool
    ) -> tuple[AppDef, str]:
        """Role 0 runs an image built FROM its own with the workspace in it, on the Docker
        engine of the `docker_host` setting, and pushed to `image_repo` so the cluster's
        nodes can pull it (without image_repo it stays on that engine: enough for a node
        that shares it)."""
        return await self._images.prepare_app(
            app, ctx.workspace, image_repo=opts.image_repo, dryrun=dryrun
        )

    async def schedule(self, dryrun: DryRunInfo[KubeRequest]) -> Submitted:
        req = dryrun.request
        root, rest = req.objects[0], req.objects[1:]
        root_coll = collection_of(root)
        made = await self._call("POST", root_coll.path(req.namespace), body=root)
        self._unseen[req.app_id] = time.monotonic()
        try:
            uid = str(made["metadata"]["uid"])
            for obj in objects.owned(rest, root, uid):
                await self._call("POST", collection_of(obj).path(req.namespace), body=obj)
        except BaseException:
            # Nothing is left behind: the root goes, and the collector takes what it owns.
            with contextlib.suppress(Exception):
                await self._delete_root(req.namespace, root_coll, req.name)
            self._unseen.pop(req.app_id, None)
            raise
        native = {
            "namespace": req.namespace,
            "name": req.name,
            "shape": req.shape,
            "root": [root_coll.api, root_coll.plural],
            "owners": [req.owners.api, req.owners.plural],
        }
        self._want(req.namespace, req.owners)
        return Submitted(req.app_id, native)

    # -- observation ------------------------------------------------------------------------

    @staticmethod
    def _owners(job: Job) -> Collection:
        api, plural = job.native.get("owners") or ("batch/v1", "jobs")
        return Collection(str(api), str(plural))

    def _want(self, namespace: str, owners: Collection) -> list[tuple[str, Collection]]:
        """Makes sure the namespace's pods and `owners` are watched while the daemon listens."""
        keys = [(namespace, PODS), (namespace, owners)]
        for key in keys:
            if key not in self._informers:
                ns, coll = key
                self._informers[key] = Informer(
                    typing.cast(Kube, self._kube),
                    coll.path(ns),
                    f"{names.SCHEDULER_LABEL}={self.name}",
                    f"{coll.plural} in {ns}",
                )
                self._synced[key] = asyncio.Event()
            if self._feed is not None and key not in self._feed.tasks:
                self._start(self._feed, key)
        return keys

    def _start(self, feed: _Feed, key: tuple[str, Collection]) -> None:
        feed.tasks[key] = asyncio.get_running_loop().create_task(
            self._pump(feed, key), name=f"{self.name} watch {key[1].plural} in {key[0]}"
        )

    async def _pump(self, feed: _Feed, key: tuple[str, Collection]) -> None:
        """Feeds one informer's changes to the queue, as the app ids they concern."""
        informer = self._informers[key]
        pods = key[1] == PODS
        try:
            # aclosing: a cancelled pump closes its watch's connection at once, not at GC.
            async with contextlib.aclosing(informer.events()) as events:
                async for item in events:
                    if item is SYNCED:  # a (re)list: what it found is reported too
                        self._synced[key].set()
                        for obj in informer.store.values():
                            if app_id := app_id_of(obj):
                                feed.queue.put_nowait(app_id)
                        continue
                    assert isinstance(item, Event)
                    if app_id := app_id_of(item.obj):
                        feed.queue.put_nowait(app_id)
                    if pods:
                        async with self._pods_changed:
                            self._pods_changed.notify_all()
        except KubeError as e:
            self._synced[key].clear()
            feed.queue.put_nowait(e)
        except Exception as e:  # an answer it cannot read: changes() ends, the daemon resyncs
            log.warning("%s: the watch of %s in %s failed: %r", self.name, key[1].plural, key[0], e)
            self._synced[key].clear()
            feed.queue.put_nowait(KubeError(0, type(e).__name__, str(e)))

    def _status(self, app_id: str, namespace: str, owners: Collection) -> AppStatus | None:
        """The app's status from the informers' stores."""
        name = app_id.partition(":")[2]
        found = []
        for coll in (owners, PODS):
            informer = self._informers.get((namespace, coll))
            store = informer.store if informer is not None else {}
            found.append(
                [
                    o
                    for o in store.values()
                    if (o["metadata"].get("labels") or {}).get(names.APP_ID_LABEL) == name
                ]
            )
        status = app_status(app_id, found[0], found[1])
        if status is not None:
            self._unseen.pop(app_id, None)
        return status

    def _status_any(self, app_id: str) -> AppStatus | None:
        """The app's status from whichever controller collection of its namespace holds it."""
        ns = app_id.partition(":")[0]
        for n, coll in [*self._informers]:
            if n == ns and coll != PODS and (status := self._status(app_id, ns, coll)):
                return status
        return None

    def _absent(self, job: Job) -> Described:
        """A job none of whose objects the watch holds."""
        submitted = self._unseen.get(job.app_id)
        if submitted is not None and time.monotonic() - submitted < UNSEEN_GRACE:
            return AppStatus(app_id=job.app_id, state=AppState.SUBMITTED)
        if job.app_id in self._deleted or not job.native.get("name"):
            return None
        return NoAnswer(REMOVED)

    async def describe_many(self, jobs: Sequence[Job]) -> dict[str, Described]:
        if not jobs:
            return {}
        await self.kube()
        keys = set()
        for job in jobs:
            keys.update(self._want(str(job.native.get("namespace", "")), self._owners(job)))
        if self._feed is not None:
            # The watches answer: wait (bounded) for the first list of a new one.
            try:
                async with asyncio.timeout(SYNC_TIMEOUT):
                    for key in keys:
                        await self._synced[key].wait()
            except TimeoutError:
                raise BackendUnavailable(
                    f"{self.name}: the watch did not list its objects in {SYNC_TIMEOUT:.0f} s"
                ) from None
        else:  # nobody listens: one list per collection answers for every job
            for key in keys:
                try:
                    await self._informers[key].refresh()
                except KubeError as e:
                    raise BackendUnavailable(f"{self.name}: {e}") from e
        out: dict[str, Described] = {}
        for job in jobs:
            ns = str(job.native.get("namespace", ""))
            status = self._status(job.app_id, ns, self._owners(job))
            out[job.app_id] = status if status is not None else self._absent(job)
        return out

    async def _probe(self, kube: Kube, feed: _Feed) -> None:
        """Checks every api_timeout seconds that the API server answers (Kube.answers), and
        reports the first check that fails, ending the feed: a watch cannot tell a quiet
        collection from a hung server before its own read timeout (timeoutSeconds + 30)."""
        timeout = typing.cast(KubeSettings, self.settings).api_timeout
        while True:
            await asyncio.sleep(timeout)
            try:
                await kube.answers(timeout)
            except KubeError as e:
                feed.queue.put_nowait(e)
                return

    async def changes(self) -> AsyncGenerator[Change | Subscribed, None]:
        kube = await self.kube()
        feed = _Feed()
        self._feed = feed
        last: dict[str, AppStatus] = {}
        try:
            feed.probe = asyncio.get_running_loop().create_task(
                self._probe(kube, feed), name=f"{self.name} probe"
            )
            for key in list(self._informers):
                self._start(feed, key)
            yield SUBSCRIBED
            while True:
                apps = {await feed.queue.get()}
                while not feed.queue.empty():
                    apps.add(feed.queue.get_nowait())
                errors = [a for a in apps if isinstance(a, KubeError)]
                if errors:
                    raise BackendUnavailable(f"{self.name}: {errors[0]}")
                vanished = False
                for app_id in sorted(typing.cast(set[str], apps)):
                    status = self._status_any(app_id)
                    if status is None:
                        # Gone for good only when every watch of its namespace has listed
                        # (and not just submitted: a pod may be seen before its Job).
                        ns = app_id.partition(":")[0]
                        listed = all(e.is_set() for (n, _), e in self._synced.items() if n == ns)
                        vanished = vanished or (
                            listed and app_id not in self._deleted and app_id not in self._unseen
                        )
                        last.pop(app_id, None)
                    elif status.roles and last.get(app_id) != status:
                        last[app_id] = status
                        yield Change(app_id, status)
                if vanished:  # deleted outside txd: a resync has describe_many mark them
                    yield SUBSCRIBED
        finally:
            self._feed = None
            tasks = [*feed.tasks.values(), *([feed.probe] if feed.probe else [])]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            for event in self._synced.values():
                event.clear()

    async def list(self) -> list[AppStatus]:
        ns = await self._namespace("")
        selector = {"labelSelector": f"{names.SCHEDULER_LABEL}={self.name}"}
        pods = (await self._call("GET", PODS.path(ns), query=selector)).get("items") or []
        out = []
        for coll in self._listed_owners():
            # A kind the account may not see (no RBAC for Volcano Jobs) holds no app of its.
            found = await self._call(
                "GET", coll.path(ns), query=selector, missing_ok=True, forbidden_ok=True
            )
            groups: dict[str, list[dict[str, Any]]] = {}
            for obj in found.get("items") or []:
                obj["metadata"]["namespace"] = ns
                obj.setdefault("kind", str(found.get("kind", "")).removesuffix("List"))
                obj.setdefault("apiVersion", coll.api)
                groups.setdefault(app_id_of(obj), []).append(obj)
            for app_id, owned_objs in groups.items():
                name = app_id.partition(":")[2]
                app_pods = [
                    p for p in pods if p["metadata"]["labels"].get(names.APP_ID_LABEL) == name
                ]
                for p in app_pods:
                    p["metadata"]["namespace"] = ns
                if (status := app_status(app_id, owned_objs, app_pods)) is not None:
                    out.append(status)
        return out

    def _listed_owners(self) -> Sequence[Collection]:
        return [JOBS, VOLCANO_JOBS]

    # -- logs -------------------------------------------------------------------------------

    def log_iter(
        self, job: Job, role: str, k: int, query: LogQuery, ended: Ended
    ) -> AsyncIterator[bytes]:
        if query.stream != Stream.COMBINED:
            raise Unsupported(
                f"{self.name}: the pod log API does not keep stdout and stderr apart; "
                "read both (the combined stream)"
            )
        return selected(self._log_pieces(job, role, k, query, ended), query)

    async def _pod_of(self, job: Job, role: str, k: int) -> dict[str, Any] | None:
        """The replica's newest pod, or None when it has none yet."""
        ns, name = str(job.native["namespace"]), str(job.native["name"])
        query = {"labelSelector": f"{names.APP_ID_LABEL}={name}"}
        pods = (await self._call("GET", PODS.path(ns), query=query)).get("items") or []
        roles = {role: role, names.dns_name(role): role}
        mine = [p for p in pods if pod_key(p, roles) == (role, k)]
        return newest(mine) if mine else None

    async def _log_pieces(
        self, job: Job, role: str, k: int, query: LogQuery, ended: Ended
    ) -> AsyncGenerator[tuple[bytes, int], None]:
        ns = str(job.native["namespace"])
        pod = await self._wait_started(job, role, k, query, ended)
        if pod is None:
            return
        params: dict[str, Any] = {"timestamps": "true"}
        if query.follow:
            params["follow"] = "true"
        if query.since is not None:  # whole seconds: the exact cut is selected's
            params["sinceTime"] = query.since.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if query.tail is not None and not query.regex and query.until is None:
            params["tailLines"] = query.tail
        path = PODS.path(ns, pod["metadata"]["name"]) + "/log"
        kube = await self.kube()
        try:
            async with kube.stream(path, params) as chunks:
                async for piece in _timed_lines(chunks):
                    yield piece
        except KubeError as e:
            raise BackendUnavailable(f"{self.name}: logs of {role}/{k}: {e}") from e
        if query.follow:
            await ended()

    async def _wait_started(
        self, job: Job, role: str, k: int, query: LogQuery, ended: Ended
    ) -> dict[str, Any] | None:
        """The replica's pod once its container has started (or ended); None if it never
        will (not following, or the job ended first)."""
        known = any(r == role and k < n for r, n in (self._shape_of(job) or [(role, k + 1)]))
        if not known:
            raise NotFound(f"{job.app_id} has no replica {role}/{k}")
        done = asyncio.ensure_future(ended())
        try:
            for _ in range(10_000):  # bounded: a watch event (or 2 s) per round
                over = done.done()  # before the look: a pod that started first is still found
                pod = await self._pod_of(job, role, k)
                if pod is not None and _started(pod):
                    return pod
                if over:
                    done.result()  # ended() failing is its error, not "the job is over"
                if over or not query.follow:
                    return None
                async with self._pods_changed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._pods_changed.wait(), 2.0)
            return None
        finally:
            done.cancel()

    def _shape_of(self, job: Job) -> Sequence[tuple[str, int]]:
        ns = str(job.native.get("namespace", ""))
        status = self._status(job.app_id, ns, self._owners(job))
        if status is None:
            return []
        return [(r.role, len(r.replicas)) for r in status.roles]

    # -- control ----------------------------------------------------------------------------

    async def cancel(self, job: Job) -> None:
        if not job.native.get("name"):
            return  # not made by this scheduler: nothing to stop
        ns, name = str(job.native["namespace"]), str(job.native["name"])
        shape = job.native.get("shape", "plain")
        if shape == "volcano":
            # As TorchX: the Job's phase set to Aborted; Volcano's controller stops the pods.
            # Not once every pod has ended: the app is reported over, and it stays so.
            if await self._ended(job):
                return
            await self._call(
                "PATCH",
                VOLCANO_JOBS.path(ns, name) + "/status",
                body={"status": {"state": {"phase": "Aborted"}}},
                content_type="application/merge-patch+json",
                missing_ok=True,
            )
            return
        # Plain and indexed Jobs: parallelism 0 has the job controller delete their pods, and
        # the annotation tells a cancel from a failure; the objects stay, as the record.
        query = {"labelSelector": f"{names.APP_ID_LABEL}={name}"}
        found = await self._call("GET", JOBS.path(ns), query=query)
        patch = {
            "metadata": {"annotations": {CANCELLED_ANNOTATION: "true"}},
            "spec": {"parallelism": 0},
        }
        for obj in found.get("items") or []:
            conditions = (obj.get("status") or {}).get("conditions") or []
            if any(c.get("status") == "True" for c in conditions):
                continue  # ended: nothing to stop, nothing to relabel
            await self._call(
                "PATCH",
                JOBS.path(ns, obj["metadata"]["name"]),
                body=patch,
                content_type="application/merge-patch+json",
                missing_ok=True,
            )

    async def _ended(self, job: Job) -> bool:
        """Whether the app is reported terminal (a controller's app whose pods all succeeded
        is, before the controller's phase says so)."""
        status = (await self.describe_many([job])).get(job.app_id)
        return isinstance(status, AppStatus) and status.state in TERMINAL_STATES

    async def _delete_root(self, ns: str, coll: Collection, name: str) -> None:
        await self._call(
            "DELETE",
            coll.path(ns, name),
            body={"propagationPolicy": "Background"},
            missing_ok=True,
        )

    async def delete(self, job: Job) -> None:
        self._deleted[job.app_id] = None
        while len(self._deleted) > RECENT_DELETED:
            self._deleted.popitem(last=False)
        if not job.native.get("name"):
            return
        api, plural = job.native.get("root") or ("v1", "services")
        await self._delete_root(
            str(job.native["namespace"]), Collection(str(api), str(plural)), job.native["name"]
        )

    async def aclose(self) -> None:
        if self._kube is not None:
            await self._kube.aclose()
        await self._images.aclose()

    def backend_calls(self) -> dict[str, int]:
        calls = Counter(self._kube.calls if self._kube is not None else {})
        calls.update(self._images.calls)
        return dict(calls)


def _started(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's container has started, so that its log can be read."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    state = (statuses[0] if statuses else {}).get("state") or {}
    return "running" in state or "terminated" in state


async def _timed_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[bytes, int]]:
    """The log API's `<RFC 3339 time> <line>` lines (timestamps=true) as (line, ns) pieces,
    and (b"", 0) after each chunk read: caught up with what has arrived (logfiles.batched
    sends what it holds then, so a followed log flows line by line)."""
    rest = b""
    async for chunk in chunks:
        rest += chunk
        *lines, rest = rest.split(b"\n")
        for line in lines:
            yield _timed(line + b"\n")
        yield b"", 0
    if rest:
        yield _timed(rest)


def _timed(line: bytes) -> tuple[bytes, int]:
    m = _TS.match(line)
    if m is None:
        return line, 0
    body = line[m.end() :]
    # Docker's json-file driver stores a line over 16 KiB in pieces, and the log API prefixes
    # each piece with its own time: those inner stamps are not the program's bytes.
    at = PARTIAL
    while at < len(body) and (inner := _TS_INNER.match(body, at)) is not None:
        body = body[:at] + body[inner.end() :]
        at += PARTIAL
    when = dt.datetime.strptime(m.group(1).decode(), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    frac = (m.group(2) or b"0").decode().ljust(9, "0")
    return body, int(when.timestamp()) * 1_000_000_000 + int(frac)


def create_scheduler(session_name: str, **kwargs: Any) -> KubernetesScheduler:
    return KubernetesScheduler(session_name, kwargs.get("settings"))
