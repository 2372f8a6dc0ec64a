"""local_docker: every replica is a container on a Docker engine (aiodocker).

Containers are named `{app_id}-{role}-{k}` and labelled (`txd.scheduler`, `txd.app_id`,
`txd.role`, `txd.replica_id`, `txd.session`, and `txd.roles`: the app's shape), so that list,
describe and a restarted daemon find every job by its labels alone. Status is pushed: one
subscription to the engine's event stream, filtered by the scheduler label, serves every job;
a batch of events the stream tells in full (containers made or started: docker.event_states)
is answered from the events alone, any other with one container listing. A cancel is
remembered on the engine, as a labelled marker volume (labels cannot change after create), so
a cancelled job is CANCELLED after a daemon restart too. Logs come from the engine (the `local`
log driver keeps bytes as written) with its timestamps, so since/until select lines exactly.

By default the replicas of an app of more than one replica share a bridge network of their
own, named after the app, created at submit and removed once the job has ended (or by delete);
a single replica joins the engine's default network, as `docker run` does (making and joining
a network of its own would triple its start-up). The `network` option picks another (`host`,
`none`, or an existing network). Replicas find rank 0 by its container name through the
engine's embedded DNS, which works on an engine with `"iptables": false` and `"bridge": "none"`
too (user-defined bridge networks are still created there); a single replica, and every
replica on `host` and `none`, has rank 0 at `localhost`.

What is created for an AppDef is built in docker.request; the engine's answers become statuses
in docker.status; docker.logs reads a replica's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import typing
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
    is_terminal,
)
from txd.schedulers.docker import pulls, request
from txd.schedulers.docker.event_states import EventStates
from txd.schedulers.docker.logs import LogReader
from txd.schedulers.docker.request import (
    CANCELLED_LABEL,
    NAME,
    STOPPED_LABEL,
    DockerJob,
    DockerOpts,
    network_name,
)
from txd.schedulers.docker.status import (
    LIVE,
    Batch,
    as_listed,
    by_app,
    from_containers,
    network_of,
)
from txd.schedulers.errors import BackendUnavailable, InvalidArgument, NotFound
from txd.schedulers.logfiles import selected
from txd.schedulers.options import opt
from txd.schedulers.workspace import images
from txd.schedulers.workspace.engine import DEFAULT_TIMEOUT as DEFAULT_ENGINE_TIMEOUT
from txd.schedulers.workspace.engine import Engine, EngineError
from txd.v1.app_pb2 import AppDef, AppStatus
from txd.v1.scheduler_pb2 import Capabilities

log = logging.getLogger(__name__)

SCHEDULER_LABEL = f"txd.scheduler={NAME}"
DEFAULT_HOST = "unix:///var/run/docker.sock"
NETWORK_TRIES = 5  # removals of an ended app's network (see _remove_network)
# Events that change a container's state (the stream is filtered to these).
EVENTS = ["create", "start", "restart", "die", "oom", "pause", "unpause", "destroy"]
# App ids deleted through txd, remembered so that their vanished containers read as "gone"
# rather than "removed behind txd's back" (the daemon itself forgets deleted jobs).
RECENT_DELETED = 1024
REMOVED = "its containers were removed outside txd; the last recorded state is kept"


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
        # An engine behind a Unix socket runs on this host: another login node that takes the
        # state dir over cannot reach its containers. One at tcp:// may serve either node.
        self.jobs_live_on_host = url.startswith("unix://")
        self._deleted: OrderedDict[str, None] = OrderedDict()  # see RECENT_DELETED
        self._events_seen = 0  # ns: the last event's time, or the first stream's (changes())

    # -- submission -------------------------------------------------------------------------

    async def _submit_dryrun(
        self, app: AppDef, opts: DockerOpts, ctx: SubmitContext
    ) -> DryRunInfo[DockerJob]:
        pulls.check(opts.pull)
        req = request.build(app, opts, ctx, self.session_name)
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
        await self._ensure_images(req, dryrun.opts.pull)
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

    async def _ensure_images(self, req: DockerJob, policy: str) -> None:
        """Pulls the images the `pull` policy asks for (docker.pulls), before anything is
        created; an image that still cannot run fails the run, naming it and why."""
        for image, path in req.images.items():
            info = await self.engine.image(image)
            if not pulls.wants_pull(image, info, policy):
                if info is None:
                    raise InvalidArgument(
                        path, f"image {image!r} is not on the Docker engine, and pull=never"
                    )
                continue
            try:
                await self.engine.pull(image)
            except EngineError as e:
                if info is None:
                    raise InvalidArgument(
                        path,
                        f"image {image!r} is not on the Docker engine and pulling it failed: {e}",
                    ) from e
                raise InvalidArgument(
                    path,
                    f"pulling image {image!r} failed: {e}. The engine's copy may be stale, and "
                    "pull=always asks for the registry's: set pull=missing to run the "
                    "engine's copy",
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
            by_id = {c["Id"]: as_listed(c) for c in fresh if c is not None}
            gone = {c for c, info in zip(exited, fresh, strict=True) if info is None}
            listed = [by_id.pop(c["Id"], c) for c in listed if c["Id"] not in gone]
        groups = {a: cs for a, cs in by_app(listed).items() if a in app_ids}
        found = await self._fold(groups)
        for a, status in found.items():
            own = network_name(a)
            if is_terminal(status.state) and any(network_of(c) == own for c in groups[a]):
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
        ended = [a for a, cs in groups.items() if any(c.get("State") not in LIVE for c in cs)]
        cancelled: dict[str, list[str]] = {}
        if ended:  # only then can a cancel marker matter
            for vol in await self.engine.volumes([CANCELLED_LABEL]):
                labels = vol.get("Labels") or {}
                cancelled[labels.get("txd.app_id", "")] = _stopped(labels)
        return {
            a: from_containers(a, cs, a in cancelled, cancelled.get(a, ()))
            for a, cs in groups.items()
        }

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
        # A stream after the first starts where the last one's events stopped: the engine
        # replays what it still holds since (after its own restart, what came since it is
        # back), so an exit between the two streams is pushed. The daemon's resync after
        # SUBSCRIBED cannot be trusted with it: the engine's listing shows an exit only a
        # while after its die event.
        since = self._events_seen
        opened = time.time_ns()
        async with self.engine.events(filters, since) as reads:
            self._events_seen = self._events_seen or opened
            yield SUBSCRIBED
            # Exit codes from die events, by container id, kept until the app is terminal: the
            # engine's listing shows an exit only a while after its die event.
            died: dict[str, tuple[str, int]] = {}
            # What the events alone tell: an app they tell in full costs no engine call.
            told = EventStates()
            # Each read's events (all that came while the last batch was answered) make one
            # batch, described with one listing: a burst of events costs one engine call.
            async for events in reads:
                batch = Batch()
                for event in events:
                    batch.add(event)
                    told.add(event)
                    self._events_seen = max(self._events_seen, int(event.get("timeNano", 0)))
                for container in batch.restarted:
                    died.pop(container, None)
                died.update(batch.codes)
                if not batch.apps:
                    continue
                known = {a: s for a in batch.apps if (s := told.status(a)) is not None}
                codes = {c: code for c, (_, code) in died.items()}
                if asked := [a for a in batch.apps if a not in known]:
                    known.update(await self._statuses(asked, batch.exited, codes))
                found = {a: known[a] for a in batch.apps if a in known}
                for app_id, status in found.items():
                    if is_terminal(status.state):
                        died = {c: v for c, v in died.items() if v[0] != app_id}
                        told.forget(app_id)
                    yield Change(app_id, status)
                for app_id in batch.apps:
                    if app_id not in found and app_id not in self._deleted:
                        # Its containers were removed outside txd: as describe_many says.
                        yield Change(app_id, NoAnswer(REMOVED))

    async def list(self) -> list[AppStatus]:
        groups = by_app(await self.engine.containers([SCHEDULER_LABEL]))
        return list((await self._fold(groups)).values())

    def log_iter(
        self, job: Job, role: str, k: int, query: LogQuery, ended: Ended
    ) -> AsyncIterator[bytes]:
        for c in job.native.get("containers", []):
            if c["role"] == role and c["replica_id"] == k:
                reader = LogReader(self.engine, c["name"], f"{role}/{k}", query)
                return selected(reader.pieces(ended), query)
        raise NotFound(f"{job.app_id} has no replica {role}/{k}")

    # -- control ----------------------------------------------------------------------------

    async def cancel(self, job: Job) -> None:
        containers = await self.engine.containers([f"txd.app_id={job.app_id}"])
        live = [c["Names"][0].lstrip("/") for c in containers if c.get("State") in LIVE]
        if not live:
            return
        # Before the stops: a container seen stopped is then known to be cancelled.
        await self.engine.create_volume(request.cancel_marker(job.app_id, live))
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
        await self.engine.remove_volume(request.marker_name(job.app_id))
        # The workspace image built for the job goes too, unless another job's container uses
        # it (remove_if_unused touches only images labelled as workspace images).
        for image in sorted({c["Image"] for c in containers}):
            self.engine.calls["images.delete"] += 1
            await images.remove_if_unused(self.engine.client(), image)

    async def aclose(self) -> None:
        await self.engine.aclose()

    def backend_calls(self) -> dict[str, int]:
        return dict(self.engine.calls)

    async def readiness(self) -> str:
        socket = self.engine.url.removeprefix("unix://")
        if socket != self.engine.url and not os.path.exists(socket):
            return f"no Docker engine: nothing at {socket} (start one, or set DOCKER_HOST)"
        try:
            await self.engine.ping()
        except BackendUnavailable as e:
            return f"no Docker engine answers: {e}"
        return ""


def _stopped(labels: Mapping[str, str]) -> list[str]:
    """The containers a cancel marker says the cancel stopped (none on a marker made before
    txd recorded them)."""
    try:
        names = json.loads(labels.get(STOPPED_LABEL) or "[]")
    except ValueError:
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


def create_scheduler(session_name: str, **kwargs: Any) -> DockerScheduler:
    return DockerScheduler(session_name, kwargs.get("settings"))
