"""The gRPC face of the daemon: one thin method per RPC, errors mapped at one boundary."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
from txd.daemon import sdnotify, wire
from txd.daemon.cache import Shown
from txd.daemon.core import NO_NATIVE_REQUEST, JobService, cfg_values
from txd.daemon.errorstatus import error_status
from txd.daemon.events import Acks
from txd.daemon.metrics import OPENMETRICS, PROMETHEUS
from txd.v1 import runner_pb2 as pb
from txd.v1 import runner_pb2_grpc

log = logging.getLogger(__name__)


def _mapped(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Parses the request (raw bytes, see txd.daemon.wire) and turns TxdError (and anything
    unexpected) into a gRPC status, for unary and streams. A stream's method returns an async
    iterator (or is an async generator); its items are served as they come, through this one
    generator: every layer is held for as long as the stream is open."""
    method = wire.RUNNER.methods_by_name[fn.__name__]
    cls = getattr(pb, method.input_type.name)
    if method.server_streaming:

        @functools.wraps(fn)
        async def stream(self: Any, raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            try:
                async for item in fn(self, wire.parse(cls, raw), context):
                    yield item
            except Exception as e:
                await context.abort(*error_status(e))

        return stream

    @functools.wraps(fn)
    async def unary(self: Any, raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await fn(self, wire.parse(cls, raw), context)
        except Exception as e:
            await context.abort(*error_status(e))

    return unary


@dataclasses.dataclass(frozen=True)
class About:
    """What `Where` tells of this daemon; fixed at start but for the uptime."""

    host: str
    socket: str
    state_dir: str
    version: str
    pid: int
    user: str
    started: float  # time.time() at start
    started_mono: float  # time.monotonic() at start
    systemd_unit: str = ""  # the service it runs in, if systemd started it

    @classmethod
    def here(cls, socket_path: Path, state_dir: Path) -> About:
        import getpass
        import socket

        from txd.install import version

        return cls(
            host=socket.gethostname(),
            socket=str(socket_path),
            state_dir=str(state_dir),
            version=version(),
            pid=os.getpid(),
            user=getpass.getuser(),
            started=time.time(),
            started_mono=time.monotonic(),
            systemd_unit=sdnotify.systemd_unit(),
        )

    def response(self) -> pb.WhereResponse:
        resp = pb.WhereResponse(
            host=self.host,
            socket=self.socket,
            state_dir=self.state_dir,
            version=self.version,
            pid=self.pid,
            user=self.user,
            systemd_unit=self.systemd_unit,
        )
        resp.started.FromNanoseconds(int(self.started * 1e9))
        resp.uptime.FromNanoseconds(int((time.monotonic() - self.started_mono) * 1e9))
        return resp


class RunnerServicer(runner_pb2_grpc.RunnerServicer):
    # How a method's items become bytes where it is not the response's SerializeToString.
    SERIALIZERS: dict[str, Callable[[Any], bytes]] = {
        "Watch": Shown.wire,
        "Events": bytes,  # serialized once per event for every subscriber (daemon.events)
    }

    def __init__(self, service: JobService, about: About) -> None:
        self.service = service
        self.about = about

    @_mapped
    async def Run(self, request: pb.RunRequest, context: Any) -> pb.RunResponse:
        handle, app_id = await self.service.run(request)
        return pb.RunResponse(app_handle=handle, app_id=app_id)

    @_mapped
    async def DryRun(self, request: pb.DryRunRequest, context: Any) -> pb.DryRunResponse:
        run = pb.RunRequest(
            app=request.app,
            scheduler=request.scheduler,
            cfg=request.cfg,
            cwd=request.cwd,
            env=request.env,
            workspace=request.workspace,
        )
        app, scheduler, text, workspace = await self.service.dryrun(run)
        return pb.DryRunResponse(app=app, scheduler=scheduler, request=text, workspace=workspace)

    @_mapped
    async def Status(self, request: pb.StatusRequest, context: Any) -> pb.StatusResponse:
        return pb.StatusResponse(status=self.service.status(request.app_handle))

    @_mapped
    async def Wait(self, request: pb.WaitRequest, context: Any) -> pb.WaitResponse:
        return pb.WaitResponse(status=await self.service.wait(request.app_handle))

    @_mapped
    def Watch(self, request: pb.WatchRequest, context: Any) -> AsyncIterator[Shown]:
        # The statuses come serialized, shared by every stream of the job (SERIALIZERS).
        return self.service.watch(request.app_handle)

    async def Events(self, requests: Any, context: grpc.aio.ServicerContext) -> None:
        # The first message says what to stream, the later ones acknowledge (daemon.events).
        try:
            raw = await context.read()
            if raw is grpc.aio.EOF:  # type: ignore[attr-defined]
                return
            request = wire.parse(pb.EventsRequest, raw)
            handles = [
                h if "://" in h else self.service.resolve(h) for h in request.app_handles[:1001]
            ]

            acks = Acks()

            async def read_acks() -> None:
                try:
                    while (more := await context.read()) is not grpc.aio.EOF:  # type: ignore[attr-defined]
                        acks.take(wire.parse(pb.EventsRequest, more).received)
                except Exception:  # a bad message, the call gone: no more acknowledgements
                    pass
                finally:
                    acks.close()

            # Not cancelled at the end: a cancelled read holds the call's status back (grpcio);
            # the read ends with the call.
            self.service.tasks.create_task(read_acks(), name="events acks")
            await self.service.events.serve(request, handles, context.write, acks)
        except Exception as e:
            # Set, not abort(): the acknowledgements' read may be pending (read_acks).
            code, details, trailers = error_status(e)
            context.set_code(code)
            context.set_details(details)
            if trailers:
                context.set_trailing_metadata(trailers)

    @_mapped
    async def Describe(self, request: pb.DescribeRequest, context: Any) -> pb.DescribeResponse:
        rec = self.service.lookup(request.app_handle)
        resp = pb.DescribeResponse(app=rec.app, status=rec.status, cfg=cfg_values(rec.cfg))
        if request.native:
            text = self.service.native_request(rec)
            resp.native.recorded = text is not None
            if text is not None:
                resp.native.text = text
            else:
                resp.native.missing = NO_NATIVE_REQUEST
        return resp

    @_mapped
    async def List(self, request: pb.ListRequest, context: Any) -> pb.ListResponse:
        apps, next_page_token = await self.service.list(request)
        return pb.ListResponse(apps=apps, next_page_token=next_page_token)

    @_mapped
    async def Cancel(self, request: pb.CancelRequest, context: Any) -> pb.CancelResponse:
        return pb.CancelResponse(status=await self.service.cancel(request.app_handle))

    @_mapped
    async def Delete(self, request: pb.DeleteRequest, context: Any) -> pb.DeleteResponse:
        await self.service.delete(request.app_handle)
        return pb.DeleteResponse()

    @_mapped
    async def Prune(self, request: pb.PruneRequest, context: Any) -> pb.PruneResponse:
        pruned, failed, more = await self.service.prune(request)
        return pb.PruneResponse(pruned=pruned, failed=failed, more=more)

    @_mapped
    async def Logs(self, request: pb.LogsRequest, context: Any) -> AsyncIterator[pb.LogsResponse]:
        async for chunk in self.service.logs(request):
            yield chunk

    @_mapped
    async def Schedulers(
        self, request: pb.SchedulersRequest, context: Any
    ) -> pb.SchedulersResponse:
        return pb.SchedulersResponse(
            schedulers=await self.service.scheduler_infos(check=request.check_backends),
            default_scheduler=self.service.default_scheduler,
        )

    @_mapped
    async def RunOpts(self, request: pb.RunOptsRequest, context: Any) -> pb.RunOptsResponse:
        opts = await self.service.run_opts(request.scheduler)
        return pb.RunOptsResponse(scheduler=request.scheduler, opts=opts)

    @_mapped
    async def Where(self, request: pb.WhereRequest, context: Any) -> pb.WhereResponse:
        return self.about.response()

    @_mapped
    async def Metrics(self, request: pb.MetricsRequest, context: Any) -> pb.MetricsResponse:
        fmt = PROMETHEUS if request.format == pb.MetricsRequest.PROMETHEUS else OPENMETRICS
        text, content_type = self.service.metrics.render(fmt)
        return pb.MetricsResponse(text=text.decode(), content_type=content_type)
