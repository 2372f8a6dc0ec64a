"""local_docker: every replica is a container on a Docker engine (aiodocker).

Containers are named `{app_id}-{role}-{k}` and labelled (`txd.scheduler`, `txd.app_id`,
`txd.role`, `txd.replica_id`, `txd.session`, and `txd.roles`: the app's shape), so that list,
describe and a restarted daemon find every job by its labels alone. Status is pushed: one
subscription to the engine's event stream, filtered by the scheduler label, serves every job;
each batch of events is answered with one container listing. A cancel is remembered on the
engine, as a labelled marker volume (labels cannot change after create), so a cancelled job is
CANCELLED after a daemon restart too. Logs come from the engine (the `local` log driver keeps
bytes as written) with its timestamps, so since/until select lines exactly.

By default the replicas of an app share a bridge network of their own, named after the app,
created at submit and removed once the job has ended (or by delete); the `network` option
picks another (`host`, `none`, or an existing network). Replicas find rank 0 by its container
name through the engine's embedded DNS, which works on an engine with `"iptables": false` and
`"bridge": "none"` too (user-defined bridge networks are still created there); on `host` and
`none` rank 0 is `localhost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import logging
import os
import re
import typing
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from txd.schedulers.api import (
    SUBSCRIBED,
    Change,
    Described,
    DryRunInfo,
    Ended,
    Job,
    LogQuery,
    Macros,
    NoAnswer,
    Scheduler,
    Settings,
    SubmitContext,
    Submitted,
    Subscribed,
    is_terminal,
    make_unique,
    num_replicas,
)
from txd.schedulers.errors import InvalidArgument, NotFound
from txd.schedulers.fold import fold, group_replicas
from txd.schedulers.logfiles import selected
from txd.schedulers.options import opt
from txd.schedulers.workspace import images
from txd.schedulers.workspace.engine import DEFAULT_TIMEOUT as DEFAULT_ENGINE_TIMEOUT
from txd.schedulers.workspace.engine import Engine, EngineError
from txd.v1 import AppState, Stream
from txd.v1.app_pb2 import AppDef, AppStatus, ReplicaStatus, Role
from txd.v1.scheduler_pb2 import Capabilities

log = logging.getLogger(__name__)

NAME = "local_docker"
RANK0_ENV = "TORCHX_RANK0_HOST"
SCHEDULER_LABEL = f"txd.scheduler={NAME}"
CANCELLED_LABEL = "txd.cancelled"
DEFAULT_HOST = "unix:///var/run/docker.sock"
# Container states that can still change; the others are final.
LIVE = {"created", "running", "restarting", "paused", "removing"}
# Events that change a container's state (the stream is filtered to these).
NETWORK_TRIES = 5  # removals of an ended app's network (see _remove_network)
EVENTS = ["create", "start", "restart", "die", "oom", "pause", "unpause", "destroy"]
# App ids deleted through txd, remembered so that their vanished containers read as "gone"
# rather than "removed behind txd's back" (the daemon itself forgets deleted jobs).
RECENT_DELETED = 1024
REMOVED = "its containers were removed outside txd; the last recorded state is kept"
_EXITED = re.compile(r"Exited \((-?\d+)\)")
_SIZE = re.compile(r"(\d+)([bkmg]?)", re.IGNORECASE)
_NAME_BAD = re.compile(r"[^a-zA-Z0-9_.-]")


@dataclass
class DockerSettings(Settings):
    docker_host: str = opt(
        "",
        "the Docker engine's address (unix:///path or tcp://host:port; default: $DOCKER_HOST "
        f"in txd's environment, else {DEFAULT_HOST})",
    )
    engine_timeout: float = opt(
        DEFAULT_ENGINE_TIMEOUT,
        "seconds an engine call may take, and between pings of the engine while its event "
        "stream is open; an engine that answers nothing for that long (a hung dockerd) counts "
        "as not answering: its jobs' statuses go stale until it answers again",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.engine_timeout > 0:
            raise ValueError(f"engine_timeout must be > 0, got {self.engine_timeout!r}")


@dataclass
class DockerOpts:
    copy_env: list[str] = opt(
        [], "glob patterns of the caller's environment variables to pass to every replica"
    )
    env: dict[str, str] = opt(
        {}, "environment variables for every replica (over copy_env; the role's env wins)"
    )
    privileged: bool = opt(False, "run the containers privileged")
    network: str | None = opt(
        None,
        "the network the containers join: host, none or an existing network (default: a "
        "network of the app's own, removed when the job is deleted)",
    )
    shm_size: str | None = opt(
        None, "size of /dev/shm (bytes, or with k, m, g; default: the role's memory if set)"
    )
    stop_timeout: int = opt(2, "seconds a cancelled container gets after SIGTERM before SIGKILL")
    image_repo: str | None = opt(
        None,
        "with a workspace: tag its image <image_repo>:<key> and push it there "
        "(e.g. 127.0.0.1:5000/me/app), for backends that pull it elsewhere",
    )


@dataclass
class ContainerSpec:
    name: str
    role: str
    replica_id: int
    body: dict[str, Any]


@dataclass
class DockerJob:
    """Every create request of a submission, in the engine's JSON, as DryRun prints them."""

    app_id: str
    network: dict[str, Any] | None  # the app's own network, None when joining another
    containers: list[ContainerSpec] = field(default_factory=list)
    images: dict[str, str] = field(default_factory=dict)  # image -> field path, for errors

    def render(self) -> str:
        data = {
            "app_id": self.app_id,
            "network_create": self.network,
            "container_create": [{"name": c.name, "body": c.body} for c in self.containers],
        }
        return json.dumps(data, indent=2)


def container_name(app_id: str, role: str, k: int) -> str:
    """TorchX's rule: the app id's last 30 characters, the role's first 30, the replica; valid
    as a container name and as a host name (under 64 characters)."""
    name = _NAME_BAD.sub("-", f"{app_id[-30:]}-{role[:30]}-{k}")
    return name.lstrip("_.-")


def _network_name(app_id: str) -> str:
    return _NAME_BAD.sub("-", app_id).lstrip("_.-")


def _marker_name(app_id: str) -> str:
    return f"{_network_name(app_id)}-cancelled"


def _size(text: str, field_path: str) -> int:
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise InvalidArgument(field_path, f"expected a size such as 67108864, 64m or 1g: {text!r}")
    return int(m.group(1)) * 1024 ** "bkmg".index((m.group(2) or "b").lower())


def _mounts(role: Role, cwd: str, field_path: str) -> tuple[list[Any], list[Any]]:
    """The role's bind and volume mounts (Mounts) and device mounts (Devices)."""
    mounts: list[Any] = []
    devices: list[Any] = []
    for i, m in enumerate(role.mounts):
        kind = m.WhichOneof("kind")
        if kind == "bind":
            src = str(Path(cwd, m.bind.src_path))  # relative: to the caller's directory
            target, ro = m.bind.dst_path, m.bind.read_only
            mounts.append({"Type": "bind", "Source": src, "Target": target, "ReadOnly": ro})
        elif kind == "volume":
            target, ro = m.volume.dst_path, m.volume.read_only
            mounts.append(
                {"Type": "volume", "Source": m.volume.src, "Target": target, "ReadOnly": ro}
            )
        elif kind == "device":
            devices.append(
                {
                    "PathOnHost": m.device.src_path,
                    "PathInContainer": m.device.dst_path or m.device.src_path,
                    "CgroupPermissions": m.device.permissions or "rwm",
                }
            )
        else:
            raise InvalidArgument(f"{field_path}.mounts[{i}]", "a mount of no kind")
    return mounts, devices


def _host_config(role: Role, opts: DockerOpts, network: str, cwd: str, path: str) -> dict[str, Any]:
    mounts, devices = _mounts(role, cwd, path)
    host: dict[str, Any] = {
        "NetworkMode": network,
        "Init": True,  # a shell as PID 1 would ignore SIGTERM
        "LogConfig": {"Type": "local", "Config": {}},  # keeps bytes as written (not JSON text)
        "Privileged": opts.privileged,
        "Mounts": mounts,
        "Devices": devices,
        "RestartPolicy": (
            {"Name": "on-failure", "MaximumRetryCount": role.max_retries}
            if role.max_retries > 0
            else {"Name": "no"}
        ),
    }
    res = role.resource
    if res.devices:
        raise InvalidArgument(
            f"{path}.resource.devices",
            f"local_docker maps no named devices ({', '.join(res.devices)}): use device mounts",
        )
    if res.cpu > 0:
        host["NanoCpus"] = res.cpu * 10**9
    if res.mem_mb > 0:
        host["Memory"] = host["ShmSize"] = res.mem_mb * 2**20  # TorchX: shm as big as memory
    if opts.shm_size:
        host["ShmSize"] = _size(opts.shm_size, "cfg.shm_size")
    if res.gpu > 0:
        host["DeviceRequests"] = [
            {"Driver": "", "Count": res.gpu, "Capabilities": [["compute", "utility"]]}
        ]
    return host


def _exit_code(c: Mapping[str, Any]) -> int | None:
    m = _EXITED.search(c.get("Status", ""))
    return int(m.group(1)) if m else None


def _replica(
    role: str, k: int, name: str, c: Mapping[str, Any] | None, cancelled: bool
) -> ReplicaStatus:
    rep = ReplicaStatus(id=k, role=role, hostname=name)
    if c is None:
        rep.state = AppState.FAILED
        rep.structured_error_msg = f"container {name} was removed outside txd"
        return rep
    state = c.get("State", "")
    if state == "running":
        rep.state = AppState.RUNNING
    elif state == "created":
        rep.state = AppState.SUBMITTED
    elif state in LIVE:  # restarting (retries), paused, removing
        rep.state = AppState.PENDING
    else:  # exited, dead
        code = _exit_code(c)
        if code is not None:
            rep.exit_code = code
        if code == 0:
            rep.state = AppState.SUCCEEDED
        else:
            rep.state = AppState.CANCELLED if cancelled else AppState.FAILED
    return rep


def app_status(app_id: str, containers: Sequence[Mapping[str, Any]], cancelled: bool) -> AppStatus:
    """The app's status from its containers (at least one): every replica its labels name,
    those whose container is gone as FAILED."""
    by_key = {}
    for c in containers:
        labels = c.get("Labels") or {}
        with contextlib.suppress(KeyError, ValueError):
            by_key[(labels["txd.role"], int(labels["txd.replica_id"]))] = c
    try:
        shape = [(str(r), int(n)) for r, n in json.loads(containers[0]["Labels"]["txd.roles"])]
    except (KeyError, ValueError, TypeError):  # not made by txd: what is there
        counts: dict[str, int] = {}
        for r, k in sorted(by_key):
            counts[r] = max(counts.get(r, 0), k + 1)
        shape = list(counts.items())
    replicas = []
    for role, n in shape:
        for k in range(n):
            found = by_key.get((role, k))
            name = found["Names"][0].lstrip("/") if found else container_name(app_id, role, k)
            replicas.append(_replica(role, k, name, found, cancelled))
    state = fold([r.state for r in replicas])
    out = AppStatus(state=state, app_id=app_id)
    if state == AppState.CANCELLED:
        out.msg = "cancelled by request"
    elif state == AppState.FAILED:
        out.msg = ", ".join(
            f"{r.role}/{r.id} "
            + (f"exited with {r.exit_code}" if r.HasField("exit_code") else r.structured_error_msg)
            for r in replicas
            if r.state == AppState.FAILED
        )
    out.roles.extend(group_replicas(replicas))
    return out


def _as_listed(info: Mapping[str, Any]) -> dict[str, Any]:
    """A container's inspect data in the form the container listing has."""
    state = info.get("State") or {}
    out = {
        "Id": info["Id"],
        "Names": [info.get("Name", "")],
        "Labels": (info.get("Config") or {}).get("Labels") or {},
        "HostConfig": {"NetworkMode": (info.get("HostConfig") or {}).get("NetworkMode", "")},
        "State": state.get("Status", ""),
        "Status": "",
    }
    if out["State"] in ("exited", "dead"):
        out["Status"] = f"Exited ({state.get('ExitCode', 0)})"
    return out


def _network_of(c: Mapping[str, Any]) -> str:
    return str((c.get("HostConfig") or {}).get("NetworkMode", ""))


def _group(containers: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for c in containers:
        if app_id := (c.get("Labels") or {}).get("txd.app_id"):
            out.setdefault(app_id, []).append(c)
    return out


@dataclass
class _Batch:
    """Events read since the last look: the apps they name (in order), the containers that
    exited, and whether the stream ended, or failed."""

    apps: list[str] = field(default_factory=list)
    exited: list[str] = field(default_factory=list)
    codes: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> (app, die code)
    restarted: list[str] = field(default_factory=list)  # containers a retry started again
    ended: bool = False
    error: BaseException | None = None

    def add(self, item: tuple[str, str, str, str] | BaseException | None) -> None:
        """Adds one event: (app id, container id, action, the die event's exit code)."""
        if item is None:
            self.ended = True
        elif isinstance(item, BaseException):
            self.error = item
        else:
            app_id, container, action, code = item
            if app_id not in self.apps:
                self.apps.append(app_id)
            if action in ("die", "oom") and container not in self.exited:
                self.exited.append(container)
            if action == "die" and code.lstrip("-").isdigit():
                self.codes[container] = (app_id, int(code))
            elif action in ("start", "restart"):  # a retry: it runs again
                self.codes.pop(container, None)
                self.restarted.append(container)
                if container in self.exited:
                    self.exited.remove(container)


class DockerScheduler(Scheduler[DockerOpts, DockerJob]):
    name = NAME
    description = "containers on a Docker engine, one per replica"
    capabilities = Capabilities(
        logs=True,
        log_follow=True,
        log_since_until=True,
        log_streams=True,
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
    Opts = DockerOpts
    Settings = DockerSettings

    def __init__(self, session_name: str, settings: Mapping[str, Any] | None = None) -> None:
        super().__init__(session_name, settings)
        resolved = typing.cast(DockerSettings, self.settings)
        url = resolved.docker_host or os.environ.get("DOCKER_HOST") or DEFAULT_HOST
        self.engine = Engine(url, resolved.engine_timeout)
        self._deleted: OrderedDict[str, None] = OrderedDict()  # see RECENT_DELETED

    # -- submission -------------------------------------------------------------------------

    async def _submit_dryrun(
        self, app: AppDef, opts: DockerOpts, ctx: SubmitContext
    ) -> DryRunInfo[DockerJob]:
        if opts.stop_timeout < 0:
            raise InvalidArgument("cfg.stop_timeout", f"must be >= 0, got {opts.stop_timeout}")
        app_id = make_unique(app.name)
        network = opts.network or _network_name(app_id)
        req = DockerJob(app_id=app_id, network=None)
        if opts.network is None:
            req.network = {
                "Name": network,
                "Driver": "bridge",
                "CheckDuplicate": True,
                "Labels": {
                    "txd.scheduler": NAME,
                    "txd.app_id": app_id,
                    "txd.session": self.session_name,
                },
            }
        if not app.roles:
            raise InvalidArgument("app.roles", "an app needs at least one role")
        rank0 = container_name(app_id, app.roles[0].name, 0)
        rank0_host = "localhost" if network in ("host", "none") else rank0
        copied = {
            k: v
            for k, v in ctx.env.items()
            if any(fnmatch.fnmatchcase(k, p) for p in opts.copy_env)
        }
        shape = json.dumps([[r.name, num_replicas(r)] for r in app.roles])
        for i, role in enumerate(app.roles):
            path = f"app.roles[{i}]"
            if not role.image:
                raise InvalidArgument(
                    f"{path}.image", "local_docker runs images: set the role's image"
                )
            req.images.setdefault(role.image, f"{path}.image")
            for k in range(num_replicas(role)):
                macros = Macros(img_root="", app_id=app_id, replica_id=str(k), rank0_env=RANK0_ENV)
                r = macros.apply(role)
                env = {**copied, **opts.env, **r.env, RANK0_ENV: rank0_host}
                name = container_name(app_id, role.name, k)
                body: dict[str, Any] = {
                    "Image": role.image,
                    "Cmd": [r.entrypoint, *r.args],
                    "Env": [f"{key}={value}" for key, value in env.items()],
                    "Labels": {
                        "txd.scheduler": NAME,
                        "txd.session": self.session_name,
                        "txd.app_id": app_id,
                        "txd.role": role.name,
                        "txd.replica_id": str(k),
                        "txd.roles": shape,
                    },
                    "StopTimeout": opts.stop_timeout,
                    "HostConfig": _host_config(r, opts, network, ctx.cwd, path),
                }
                if network != "host":
                    body["Hostname"] = name
                if role.port_map:  # exposed, as TorchX does; nothing is published
                    body["ExposedPorts"] = {f"{p}/tcp": {} for p in role.port_map.values()}
                req.containers.append(ContainerSpec(name, role.name, k, body))
        return DryRunInfo(app=app, request=req, opts=opts, render=req.render)

    async def prepare_workspace(
        self, app: AppDef, opts: DockerOpts, ctx: SubmitContext, *, dryrun: bool
    ) -> tuple[AppDef, str]:
        """Role 0 runs an image built FROM its own with the workspace in it, cached by content
        (workspace.images); with image_repo it is pushed there too."""
        self.engine.calls["workspace.build"] += 1
        return await images.prepare_app(
            self.engine.client(), app, ctx.workspace, image_repo=opts.image_repo, dryrun=dryrun
        )

    async def schedule(self, dryrun: DryRunInfo[DockerJob]) -> Submitted:
        req = dryrun.request
        await self._ensure_images(req)
        network_made = False
        made: list[str] = []
        try:
            if req.network is not None:
                await self.engine.create_network(req.network)
                network_made = True
            for spec in req.containers:
                await self.engine.create_container(spec.name, spec.body)
                made.append(spec.name)
            for spec in req.containers:
                await self.engine.start(spec.name)
        except BaseException as e:
            # Nothing is left behind: what was made is removed, whatever went wrong.
            for name in made:
                with contextlib.suppress(Exception):
                    await self.engine.remove(name)
            if network_made and req.network is not None:
                with contextlib.suppress(Exception):
                    await self.engine.remove_network(req.network["Name"])
            if isinstance(e, EngineError):
                raise InvalidArgument("app", f"the Docker engine refused the job: {e}") from e
            raise
        native = {
            "containers": [
                {"name": c.name, "role": c.role, "replica_id": c.replica_id} for c in req.containers
            ],
            "network": req.network["Name"] if req.network is not None else None,
        }
        return Submitted(req.app_id, native)

    async def _ensure_images(self, req: DockerJob) -> None:
        """Pulls the images the engine lacks, before anything is created."""
        for image, path in req.images.items():
            if await self.engine.has_image(image):
                continue
            try:
                await self.engine.pull(image)
            except EngineError as e:
                raise InvalidArgument(
                    path, f"image {image!r} is not on the Docker engine and pulling it failed: {e}"
                ) from e

    # -- observation ------------------------------------------------------------------------

    async def _statuses(
        self,
        app_ids: Sequence[str],
        exited: Sequence[str] = (),
        codes: Mapping[str, int] | None = None,
    ) -> dict[str, AppStatus]:
        """The status of each of these apps that has containers: one listing (of the app's
        containers for one app, of every txd container for more), and the cancel markers.
        The engine sends a die event before its listing shows the exit: containers in `exited`
        (an event named them) take their exit code from the die event (`codes`, by container
        id), or else are inspected, which waits for the exit to be recorded."""
        codes = codes or {}
        labels = [f"txd.app_id={app_ids[0]}"] if len(app_ids) == 1 else [SCHEDULER_LABEL]
        listed = [
            {**c, "State": "exited", "Status": f"Exited ({codes[c['Id']]})"}
            if c["Id"] in codes
            else c
            for c in await self.engine.containers(labels)
        ]
        exited = [c for c in exited if c not in codes]
        if exited:
            fresh = await asyncio.gather(*(self.engine.inspect(c) for c in exited))
            by_id = {c["Id"]: _as_listed(c) for c in fresh if c is not None}
            gone = {c for c, info in zip(exited, fresh, strict=True) if info is None}
            listed = [by_id.pop(c["Id"], c) for c in listed if c["Id"] not in gone]
        groups = {a: cs for a, cs in _group(listed).items() if a in app_ids}
        found = await self._fold(groups)
        for a, status in found.items():
            own = _network_name(a)
            if is_terminal(status.state) and any(_network_of(c) == own for c in groups[a]):
                # Nothing will run on it again: free its addresses now (an engine has room for
                # a few dozen bridge networks), not only when the job is deleted.
                early = [c["Id"] for c in groups[a] if c["Id"] in codes]
                self.spawn(self._remove_network(own, early), f"remove network {own}")
        return found

    async def _remove_network(self, name: str, early: Sequence[str] = ()) -> None:
        """Removes an ended app's network. `early`: containers known exited from their die
        event only; the engine detaches them from the network a moment later, so they are
        inspected first (which waits for the exit to be recorded), and an "active endpoints"
        refusal is tried again a few times (bounded)."""
        await asyncio.gather(*(self.engine.inspect(c) for c in early))
        for attempt in range(NETWORK_TRIES):
            try:
                await self.engine.remove_network(name)
                return
            except Exception as e:  # delete tries again
                if "active endpoints" not in str(e) or attempt == NETWORK_TRIES - 1:
                    log.warning("could not remove network %s: %s", name, e)
                    return
            await asyncio.sleep(0.1 * (attempt + 1))

    async def _fold(
        self, groups: Mapping[str, Sequence[Mapping[str, Any]]]
    ) -> dict[str, AppStatus]:
        stopped = [
            a
            for a, cs in groups.items()
            if any(_exit_code(c) not in (0, None) or c.get("State") == "dead" for c in cs)
        ]
        cancelled: set[str] = set()
        if stopped:  # only then can a cancel marker matter
            for vol in await self.engine.volumes([CANCELLED_LABEL]):
                cancelled.add((vol.get("Labels") or {}).get("txd.app_id", ""))
        return {a: app_status(a, cs, a in cancelled) for a, cs in groups.items()}

    def _vanished(self, job: Job) -> Described:
        """A job with no container left: unknown if txd never made or deleted it; else removed
        behind txd's back (NoAnswer: the daemon keeps its last state, marked)."""
        if job.app_id in self._deleted or not job.native.get("containers"):
            return None
        return NoAnswer(REMOVED)

    async def describe_many(self, jobs: Sequence[Job]) -> dict[str, Described]:
        if not jobs:
            return {}
        found = await self._statuses([j.app_id for j in jobs])
        return {j.app_id: found.get(j.app_id) or self._vanished(j) for j in jobs}

    async def changes(self) -> AsyncGenerator[Change | Subscribed, None]:
        filters = {"type": ["container"], "label": [SCHEDULER_LABEL], "event": EVENTS}
        async with self.engine.events(filters) as events:
            yield SUBSCRIBED
            # A reader queues the app ids events name; each batch is described with one listing,
            # so a burst of events costs one engine call.
            queue: asyncio.Queue[tuple[str, str, str, str] | BaseException | None]
            queue = asyncio.Queue()

            async def read() -> None:
                try:
                    async for event in events:
                        actor = event.get("Actor") or {}
                        attrs = actor.get("Attributes") or {}
                        if app_id := attrs.get("txd.app_id"):
                            action, code = event.get("Action", ""), attrs.get("exitCode", "")
                            queue.put_nowait((app_id, actor.get("ID", ""), action, code))
                    queue.put_nowait(None)
                except Exception as e:  # the engine went away: the consumer raises it
                    queue.put_nowait(e)

            reader = asyncio.get_running_loop().create_task(read(), name="local_docker events")
            # Exit codes from die events, by container id, kept until the app is terminal: the
            # engine's listing shows an exit only a while after its die event.
            died: dict[str, tuple[str, int]] = {}
            try:
                while True:
                    batch = _Batch()
                    batch.add(await queue.get())
                    while not queue.empty():
                        batch.add(queue.get_nowait())
                    for container in batch.restarted:
                        died.pop(container, None)
                    died.update(batch.codes)
                    if batch.apps:
                        codes = {c: code for c, (_, code) in died.items()}
                        found = await self._statuses(batch.apps, batch.exited, codes)
                        gone = [a for a in batch.apps if a not in found and a not in self._deleted]
                        for app_id, status in found.items():
                            if is_terminal(status.state):
                                died = {c: v for c, v in died.items() if v[0] != app_id}
                            yield Change(app_id, status)
                        if gone:
                            # Removed outside txd: a resync has describe_many mark them.
                            yield SUBSCRIBED
                    if batch.error is not None:
                        raise batch.error
                    if batch.ended:
                        return
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader

    async def list(self) -> list[AppStatus]:
        groups = _group(await self.engine.containers([SCHEDULER_LABEL]))
        return list((await self._fold(groups)).values())

    def log_iter(
        self, job: Job, role: str, k: int, query: LogQuery, ended: Ended
    ) -> AsyncIterator[bytes]:
        for c in job.native.get("containers", []):
            if c["role"] == role and c["replica_id"] == k:
                return self._logs(c["name"], query, ended)
        raise NotFound(f"{job.app_id} has no replica {role}/{k}")

    def _logs(self, name: str, query: LogQuery, ended: Ended) -> AsyncIterator[bytes]:
        return selected(self._log_pieces(name, query, ended), query)

    async def _log_pieces(
        self, name: str, query: LogQuery, ended: Ended
    ) -> AsyncGenerator[tuple[bytes, int], None]:
        """The container's messages; following, until the container stops, then (once the job
        has ended) whatever a restarted container wrote after that."""
        streams = {
            "stdout": query.stream in (Stream.COMBINED, Stream.STDOUT),
            "stderr": query.stream in (Stream.COMBINED, Stream.STDERR),
        }
        last = 0
        async for piece in self.engine.logs(name, follow=query.follow, **streams):
            last = piece[1] or last
            yield piece
        if query.follow:
            await ended()
            async for piece in self.engine.logs(
                name, follow=False, since_ns=last + 1 if last else 0, **streams
            ):
                yield piece

    # -- control ----------------------------------------------------------------------------

    async def cancel(self, job: Job) -> None:
        containers = await self.engine.containers([f"txd.app_id={job.app_id}"])
        live = [c["Names"][0].lstrip("/") for c in containers if c.get("State") in LIVE]
        if not live:
            return
        # Before the stops: a container seen stopped is then known to be cancelled.
        await self.engine.create_volume(
            {
                "Name": _marker_name(job.app_id),
                "Labels": {"txd.scheduler": NAME, "txd.app_id": job.app_id, CANCELLED_LABEL: "1"},
            }
        )
        for name in live:  # returns at once; the stops are pushed as they happen
            self.spawn(self._stop(name), f"stop {name}")

    async def _stop(self, name: str) -> None:
        try:
            await self.engine.stop(name)
        except Exception as e:  # reported by the status; nothing waits on this task
            log.warning("could not stop container %s: %s", name, e)

    async def delete(self, job: Job) -> None:
        self._deleted[job.app_id] = None
        while len(self._deleted) > RECENT_DELETED:
            self._deleted.popitem(last=False)
        containers = await self.engine.containers([f"txd.app_id={job.app_id}"])
        names = [c["Names"][0].lstrip("/") for c in containers]
        # Stopped with their grace period, then removed.
        await asyncio.gather(*(self.engine.stop(n) for n in names))
        await asyncio.gather(*(self.engine.remove(n) for n in names))
        if network := job.native.get("network"):
            await self.engine.remove_network(network)
        await self.engine.remove_volume(_marker_name(job.app_id))
        # The workspace image built for the job goes too, unless another job's container uses
        # it (remove_if_unused touches only images labelled as workspace images).
        for image in sorted({c["Image"] for c in containers}):
            self.engine.calls["images.delete"] += 1
            await images.remove_if_unused(self.engine.client(), image)

    async def aclose(self) -> None:
        await self.engine.aclose()

    def backend_calls(self) -> dict[str, int]:
        return dict(self.engine.calls)


def create_scheduler(session_name: str, **kwargs: Any) -> DockerScheduler:
    return DockerScheduler(session_name, kwargs.get("settings"))
