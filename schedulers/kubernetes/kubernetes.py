"""kubernetes: an app as Kubernetes objects, its status from one watch per namespace and kind.

Without a Volcano `queue` an app is a headless Service (the root) and one batch/v1 Job per
replica owned by it (an Indexed Job per role on Kubernetes >= 1.21), so it runs on any cluster;
with a queue it is one Volcano Job, exactly as TorchX makes it (txd.schedulers.kubernetes.objects
and crds). App ids are `<namespace>:<name>`, as TorchX's.

Status is pushed: while the daemon listens (`changes`), one Informer per namespace and
collection (pods, and the apps' controller objects: Jobs, Volcano Jobs, AppWrappers) keeps
every txd object of this scheduler in memory, whatever the number of jobs and clients
(txd.schedulers.kubernetes.watching); each change is folded into the app's status
(txd.schedulers.kubernetes.status) from the app's objects in those stores, and describe_many
answers from them without an API call. A watch whose version was compacted away (410 Gone)
lists again and reports only the differences (txd.schedulers.kubernetes.informer). An app
deleted outside txd is reported as no answer (its last status kept, marked stale). Logs come
from the pod log API (txd.schedulers.kubernetes.logs).

The cluster is the daemon's (the contract's credential rule): `kubeconfig` and `context` in the
scheduler's settings, else $KUBECONFIG, ~/.kube/config, or the in-cluster service account.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from txd.schedulers.kubernetes import crds, logs, names, objects
from txd.schedulers.kubernetes.client import Kube, KubeError
from txd.schedulers.kubernetes.opts import KubernetesOpts
from txd.schedulers.kubernetes.status import (
    CANCELLED_ANNOTATION,
    app_status,
    listed_statuses,
    newest,
    pod_key,
)
from txd.schedulers.kubernetes.watching import (
    JOBS,
    PODS,
    VOLCANO_JOBS,
    Collection,
    Key,
    Watches,
    collection_of,
)
from txd.schedulers.logfiles import selected
from txd.schedulers.options import opt
from txd.schedulers.workspace import images
from txd.v1 import TERMINAL_STATES, AppState, Stream
from txd.v1.app_pb2 import AppDef, AppStatus
from txd.v1.scheduler_pb2 import Capabilities

NAME = "kubernetes"
REMOVED = "its objects were deleted outside txd; the last recorded state is kept"
RECENT_DELETED = 1024  # app ids deleted through txd (see local_docker)
SYNC_TIMEOUT = 30.0  # how long describe_many waits for a new watch's first list
UNSEEN_GRACE = 60.0  # a submitted app the watch has not shown yet is SUBMITTED this long
# What a dry run that cannot ask the API server builds for: every supported Kubernetes is newer.
ASSUMED_VERSION = (1, 21)
ASSUMED_NAMESPACE = "default"


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
    # What the cluster could not be asked and was assumed (only a dry run goes on without it),
    # one line each; and why it could not be asked, which schedule() raises.
    assumed: list[str] = field(default_factory=list)
    unreachable: str = ""
    # What was chosen and why, where TorchX's users may expect otherwise (the namespace).
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        head = f"namespace {self.namespace}; every object after the first is owned by it"
        notes = "".join(f"# {line}\n" for line in [*self.assumed, *self.notes])
        return notes + objects.render_yaml(self.objects, header=head)


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
        push_status=True,  # the contract suite checks the claim against changes()
        workspace=True,
    )
    Opts: ClassVar[type] = KubernetesOpts
    Settings = KubeSettings

    def __init__(self, session_name: str, settings: Mapping[str, Any] | None = None) -> None:
        super().__init__(session_name, settings)
        self._kube: Kube | None = None
        self._connecting = asyncio.Lock()
        self._version: tuple[int, int] | None = None
        self._watches = Watches(self.name)
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
        """The API server's version; BackendUnavailable when it does not answer within
        api_timeout (a dry run then assumes one)."""
        if self._version is None:
            timeout = typing.cast(KubeSettings, self.settings).api_timeout
            try:
                async with asyncio.timeout(timeout):
                    info = await self._call("GET", "/version")
            except TimeoutError:
                raise BackendUnavailable(
                    f"{self.name}: the Kubernetes API server did not answer GET /version "
                    f"within {timeout:g} s"
                ) from None
            minor = re.match(r"\d+", str(info.get("minor", "0")))
            self._version = (int(info.get("major", 0) or 0), int(minor.group() if minor else 0))
        return self._version

    async def _namespace(self, requested: str) -> str:
        return (await self._namespace_from(requested))[0]

    async def _namespace_from(self, requested: str) -> tuple[str, str]:
        """(the namespace, a note saying where it came from); TorchX's is always `default`,
        txd's the daemon's setting, else the kubeconfig context's, as kubectl's."""
        if requested:
            return requested, f"namespace {requested!r}: -c namespace"
        s = typing.cast(KubeSettings, self.settings)
        if s.namespace:
            ns, origin = s.namespace, f"the daemon's setting [schedulers.{self.name}] namespace"
        else:
            kube = await self.kube()
            ns, origin = kube.namespace, kube.namespace_from
        note = f"namespace {ns!r}: {origin}"
        if ns != ASSUMED_NAMESPACE:
            note += f"; TorchX's would be {ASSUMED_NAMESPACE!r} (-c namespace=default)"
        return ns, note

    # -- submission -------------------------------------------------------------------------

    async def _submit_dryrun(
        self, app: AppDef, opts: Any, ctx: SubmitContext
    ) -> DryRunInfo[KubeRequest]:
        """The objects to create. What only the cluster can say (its version, the context's
        namespace) is assumed, and the assumption stated, when it cannot be asked: a dry run
        works offline, and a Run built on an assumption is refused by schedule()."""
        name = names.app_id_for(app.name, app.roles)
        kw = {"scheduler": self.name, "session": self.session_name}
        assumed: list[str] = []
        unreachable = ""
        notes: list[str] = []
        try:
            shape, objs = await self._objects(app, name, opts, kw)
        except Offline as e:
            shape, objs = await self._objects(app, name, opts, kw, offline=True)
            unreachable = e.reason
            assumed.append(self._offline_note(shape, e.reason))
        try:
            ns, said = await self._namespace_from(opts.namespace)
            notes.append(said)
        except BackendUnavailable as e:
            ns, unreachable = ASSUMED_NAMESPACE, unreachable or unavailable_reason(e, self.name)
            assumed.append(
                f"namespace {ns!r} assumed: no cluster configuration to take it from "
                f"({unavailable_reason(e, self.name)}); give one with -c namespace=NS"
            )
        req = KubeRequest(
            app_id=f"{ns}:{name}",
            namespace=ns,
            name=name,
            shape=shape,
            objects=objs,
            owners=collection_of(objs[1] if shape in ("plain", "indexed") else objs[0]),
            assumed=assumed,
            unreachable=unreachable,
            notes=notes,
        )
        return DryRunInfo(app=app, request=req, opts=opts, render=req.render)

    async def _objects(
        self,
        app: AppDef,
        name: str,
        opts: Any,
        kw: dict[str, str],
        *,
        offline: bool = False,
    ) -> tuple[str, list[dict[str, Any]]]:
        """(shape, objects); raises Offline when the shape needs the server's version, the
        server_version option does not give it, and the server cannot be asked; `offline`:
        built for ASSUMED_VERSION instead of asking."""
        if opts.queue:
            return "volcano", crds.volcano_objects(app, name, opts, **kw)
        version = ASSUMED_VERSION if offline else _parse_version(opts.server_version)
        if version is None:
            try:
                version = await self._server_version()
            except BackendUnavailable as e:
                raise Offline(unavailable_reason(e, self.name)) from None
        if version >= (1, 21):
            return "indexed", objects.indexed_objects(app, name, opts, **kw)
        return "plain", objects.plain_objects(app, name, opts, **kw)

    def _offline_note(self, shape: str, reason: str) -> str:
        """The dry run's note on what _objects(offline=True) assumed."""
        return (
            f"the API server's version could not be asked ({reason}): built for Kubernetes "
            f"{_dotted(ASSUMED_VERSION)} or later ({shape} shape); for an older server give "
            "-c server_version=MAJOR.MINOR"
        )

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
        if req.assumed:  # built without the cluster: fit for a dry run only
            raise BackendUnavailable(f"{self.name}: {req.unreachable}")
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
        self._watches.want(await self.kube(), req.namespace, req.owners)
        return Submitted(req.app_id, native)

    # -- observation ------------------------------------------------------------------------

    @staticmethod
    def _owners(job: Job) -> Collection:
        api, plural = job.native.get("owners") or ("batch/v1", "jobs")
        return Collection(str(api), str(plural))

    def _status(self, app_id: str, namespace: str, owners: Collection) -> AppStatus | None:
        """The app's status from the watches' stores (its objects only)."""
        name = app_id.partition(":")[2]
        status = app_status(
            app_id,
            self._watches.objects(namespace, owners, name),
            self._watches.objects(namespace, PODS, name),
        )
        if status is not None:
            self._unseen.pop(app_id, None)
        return status

    def _status_any(self, app_id: str) -> AppStatus | None:
        """The app's status from whichever controller collection of its namespace holds it."""
        ns = app_id.partition(":")[0]
        for coll in self._watches.controllers(ns):
            if status := self._status(app_id, ns, coll):
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
        kube = await self.kube()
        keys: set[Key] = set()
        for job in jobs:
            ns = str(job.native.get("namespace", ""))
            keys.update(self._watches.want(kube, ns, self._owners(job)))
        if self._watches.listening:
            # The watches answer: wait (bounded) for the first list of a new one.
            try:
                await self._watches.synced(keys, SYNC_TIMEOUT)
            except TimeoutError:
                raise BackendUnavailable(
                    f"{self.name}: the watch did not list its objects in {SYNC_TIMEOUT:.0f} s"
                ) from None
        else:  # nobody listens: one list per collection answers for every job
            try:
                await self._watches.refresh(keys)
            except KubeError as e:
                raise BackendUnavailable(f"{self.name}: {e}") from e
        out: dict[str, Described] = {}
        for job in jobs:
            ns = str(job.native.get("namespace", ""))
            status = self._status(job.app_id, ns, self._owners(job))
            out[job.app_id] = status if status is not None else self._absent(job)
        return out

    async def changes(self) -> AsyncGenerator[Change | Subscribed, None]:
        kube = await self.kube()
        timeout = typing.cast(KubeSettings, self.settings).api_timeout
        last: dict[str, Described] = {}
        async with self._watches.listening_to(kube, timeout, self.spawn) as listener:
            yield SUBSCRIBED
            while True:
                try:
                    apps = await listener.changed()
                except KubeError as e:
                    raise BackendUnavailable(f"{self.name}: {e}") from None
                for app_id in sorted(apps):
                    found = self._status_any(app_id)
                    status: Described = found
                    if found is None and self._vanished(app_id):
                        status = NoAnswer(REMOVED)
                    elif found is None:
                        last.pop(app_id, None)
                        continue
                    elif not found.roles:
                        continue
                    if last.get(app_id) != status:
                        last[app_id] = status
                        yield Change(app_id, status)

    def _vanished(self, app_id: str) -> bool:
        """Whether an app none of whose objects the watches hold was deleted outside txd: only
        once every watch of its namespace has listed, and not just submitted (a pod may be
        seen before its Job)."""
        ns = app_id.partition(":")[0]
        return (
            self._watches.listed(ns) and app_id not in self._deleted and app_id not in self._unseen
        )

    async def list(self) -> list[AppStatus]:
        ns = await self._namespace("")
        selector = {"labelSelector": f"{names.SCHEDULER_LABEL}={self.name}"}
        pods = (await self._call("GET", PODS.path(ns), query=selector)).get("items") or []
        out: list[AppStatus] = []
        for coll in self._listed_owners():
            # A kind the account may not see (no RBAC for Volcano Jobs) holds no app of its.
            found = await self._call(
                "GET", coll.path(ns), query=selector, missing_ok=True, forbidden_ok=True
            )
            items = found.get("items") or []
            for obj in items:
                obj.setdefault("kind", str(found.get("kind", "")).removesuffix("List"))
                obj.setdefault("apiVersion", coll.api)
            out.extend(listed_statuses(ns, items, pods))
        # Two versions of one group list the same objects (one AppWrapper CRD serving both).
        first: dict[str, AppStatus] = {}
        for status in out:
            first.setdefault(status.app_id, status)
        return list(first.values())

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
        known = any(r == role and k < n for r, n in (self._shape_of(job) or [(role, k + 1)]))
        if not known:
            raise NotFound(f"{job.app_id} has no replica {role}/{k}")
        kube = await self.kube()
        async for piece in logs.pieces(
            kube,
            str(job.native["namespace"]),
            lambda: self._pod_of(job, role, k),
            self._watches.pods_changed,
            query,
            ended,
            f"{self.name}: logs of {role}/{k}",
        ):
            yield piece

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

    async def readiness(self) -> str:
        """A cluster configured (kubeconfig or in-cluster), whose API server answers."""
        try:
            kube = await self.kube()
        except BackendUnavailable as e:
            return f"no cluster configured: {unavailable_reason(e, self.name)}"
        try:
            await kube.answers(min(typing.cast(KubeSettings, self.settings).api_timeout, 2.0))
        except KubeError as e:
            return f"the cluster of {kube.source} does not answer: {e}"
        return ""

    def backend_calls(self) -> dict[str, int]:
        calls = Counter(self._kube.calls if self._kube is not None else {})
        calls.update(self._images.calls)
        return dict(calls)


class Offline(Exception):
    """The objects depend on what only the cluster can say (the API server's version, the
    AppWrapper API it serves), and it cannot be asked."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def unavailable_reason(e: BackendUnavailable, scheduler: str) -> str:
    """Why the cluster could not be asked, without the scheduler's name before it."""
    return str(e).removeprefix(f"{scheduler}: ")


def _parse_version(text: str | None) -> tuple[int, int] | None:
    """The server_version option, MAJOR.MINOR (a trailing .PATCH or +suffix is ignored)."""
    if not text:
        return None
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:[.+-].*)?", text.strip())
    if m is None:
        raise InvalidArgument("cfg.server_version", f"expected MAJOR.MINOR like 1.30, got {text!r}")
    return int(m[1]), int(m[2])


def _dotted(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def create_scheduler(session_name: str, **kwargs: Any) -> KubernetesScheduler:
    return KubernetesScheduler(session_name, kwargs.get("settings"))
