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
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from txd.daemon import sdnotify, wire
from txd.daemon.cache import Shown
from txd.daemon.core import NO_NATIVE_REQUEST, JobService, cfg_values
from txd.daemon.events import Acks
from txd.daemon.metrics import OPENMETRICS, PROMETHEUS
from txd.schedulers import errors
from txd.schedulers.exhaustion import exhausted
from txd.v1 import runner_pb2 as pb
from txd.v1 import runner_pb2_grpc

log = logging.getLogger(__name__)

_CODES: dict[type[errors.TxdError], grpc.StatusCode] = {
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    errors.Unsupported: grpc.StatusCode.UNIMPLEMENTED,
    errors.BackendUnavailable: grpc.StatusCode.UNAVAILABLE,
    errors.ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.OutOfRange: grpc.StatusCode.OUT_OF_RANGE,
}


# Trailing metadata naming the scheduler whose backend failed, on UNAVAILABLE. Its presence is
# how a client knows the daemon answered: gRPC also says UNAVAILABLE when it cannot connect.
BACKEND_KEY = "txd-backend"


def _code(e: Exception) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """(code, message, trailing metadata) for an exception raised by the job service."""
    for cls, code in _CODES.items():
        if isinstance(e, cls):
            backend = getattr(e, "backend", "")
            return code, str(e), ((BACKEND_KEY, backend),) if backend else ()
    if (why := exhausted(e)) is not None:
        log.warning("refused for want of a resource: %s", why)
        return grpc.StatusCode.RESOURCE_EXHAUSTED, why, ()
    log.exception("internal error")
    return grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}", ()


# The most UTF-8 bytes of an error's message, and of its field path and reason, sent to the
# client: they travel in trailers, which gRPC clients refuse over 8 to 16 KiB (percent-encoded,
# base64), and a message may quote a bad value of any size.
MAX_MESSAGE_BYTES = 1024
MAX_FIELD_BYTES = 256


def _cut(text: str, limit: int) -> str:
    """text, cut to at most `limit` UTF-8 bytes (whole characters), marked when cut."""
    data = text.encode(errors="replace")
    if len(data) <= limit:
        return text
    return data[: limit - 20].decode(errors="ignore") + f"... ({len(data)} bytes)"


def error_status(e: Exception) -> tuple[grpc.StatusCode, str, Any]:
    """The (code, message, trailing metadata) that end a call failed with `e`. An
    InvalidArgument also carries its field path machine-readably: google.rpc.BadRequest in the
    status details (the `grpc-status-details-bin` trailer), as Google's rich error model does,
    so clients need not parse the message."""
    code, message, trailers = _code(e)
    message = _cut(message, MAX_MESSAGE_BYTES)
    status = status_pb2.Status(code=code.value[0], message=message)
    if isinstance(e, errors.InvalidArgument):
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=_cut(e.field, MAX_FIELD_BYTES), description=_cut(e.reason, MAX_MESSAGE_BYTES)
        )
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
        status.details.append(detail)
    rich = rpc_status.to_status(status)
    return rich.code, rich.details, (*trailers, *rich.trailing_metadata)


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
        from importlib.metadata import version

        return cls(
            host=socket.gethostname(),
            socket=str(socket_path),
            state_dir=str(state_dir),
            version=version("txd"),
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
