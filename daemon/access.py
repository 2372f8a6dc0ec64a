"""One access line per RPC, from a server interceptor on each door (the Unix socket's server and
the TCP listener's; the read door's process, daemon.readserver, writes its own through
write_line): the method, its gRPC status code, how long it took, the door it came through, the
peer where gRPC knows one (a TCP address; a Unix socket's peer is only "unix:"), and for streams
the messages each way. A stream's line is written when it ends.

Clients of `txctl --host ssh://...` come through the Unix socket (ssh forwards to it, or
`txd dial-stdio` relays to it): they are the door `unix`, like local ones.

Only the method and the outcome are logged, never a request or its metadata (a token rides in
`authorization`, a job's env and args in Run's request), nor an error's message (which may quote
a bad value). The line is at logsetup.access_level: INFO in JSON, DEBUG in text.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, cast

import grpc
from grpc_health.v1 import health_pb2
from txd.daemon import logsetup
from txd.v1 import runner_pb2

log = logging.getLogger("txd.access")

UNIX = "unix"
TCP = "tcp"
READ = "read"  # the read door's socket (daemon.readdoor)
WATCH_DOOR = "watch"  # the watch door's socket (daemon.watchdoor)
_MAX_METHOD = 200  # an unknown method's name is the client's choice: cut in the line


# go-grpc-prometheus's grpc_type values.
UNARY, CLIENT_STREAM, SERVER_STREAM, BIDI_STREAM = (
    "unary",
    "client_stream",
    "server_stream",
    "bidi_stream",
)


def _type(client_streaming: bool, server_streaming: bool) -> str:
    if client_streaming:
        return BIDI_STREAM if server_streaming else CLIENT_STREAM
    return SERVER_STREAM if server_streaming else UNARY


def _known() -> dict[str, str]:
    services = [
        runner_pb2.DESCRIPTOR.services_by_name["Runner"],
        health_pb2.DESCRIPTOR.services_by_name["Health"],
    ]
    names = {
        f"/{s.full_name}/{m.name}": _type(m.client_streaming, m.server_streaming)
        for s in services
        for m in s.methods
    }
    for version in ("v1", "v1alpha"):
        names[f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo"] = BIDI_STREAM
    return names


# The methods txd serves, with their types (the TCP listener's token check refuses every kind
# of call with one stream-stream handler: the line and the metrics still name the method's own
# type). Metrics are kept for these only, so that a client naming made-up methods cannot grow
# the label values without bound (its calls are logged all the same).
KNOWN = _known()


class Call:
    """One RPC as the access line and the metrics see it."""

    __slots__ = ("code", "door", "kind", "method", "peer", "received", "sent", "service", "start")

    def __init__(self, full_method: str, kind: str, door: str) -> None:
        service, _, method = full_method.lstrip("/").rpartition("/")
        self.service, self.method, self.kind, self.door = service, method, kind, door
        self.start = time.monotonic()
        self.code = grpc.StatusCode.OK
        self.received = self.sent = 0
        self.peer = ""

    @property
    def full_method(self) -> str:
        return f"/{self.service}/{self.method}"


class Observer:
    """What sees every call end: the access log, and the metrics where kept."""

    def started(self, call: Call) -> None:
        pass

    def received(self, call: Call) -> None:
        pass

    def sent(self, call: Call) -> None:
        pass

    def handled(self, call: Call, seconds: float) -> None:
        pass


def write_line(call: Call, seconds: float) -> None:
    level = logsetup.access_level
    if not log.isEnabledFor(level):
        return
    ms = round(seconds * 1000, 3)
    method = call.full_method[:_MAX_METHOD]
    fields: dict[str, Any] = {
        "method": method,
        "code": call.code.name,
        "ms": ms,
        "door": call.door,
        "type": call.kind,
    }
    if call.peer:
        fields["peer"] = call.peer
    if call.kind != UNARY:
        fields["received"], fields["sent"] = call.received, call.sent
    peer = f" from {call.peer}" if call.peer else ""
    log.log(
        level,
        "%s %s %.1f ms via %s%s",
        method,
        call.code.name,
        ms,
        call.door,
        peer,
        extra={"fields": fields},
    )


class _Counting:
    """The servicer context a reader/writer-style stream handler gets: counts what it reads
    and writes, and leaves everything else to the real context."""

    def __init__(self, context: grpc.aio.ServicerContext, call: Call, observer: Observer) -> None:
        self._context = context
        self._call = call
        self._observer = observer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def read(self) -> Any:
        message = await self._context.read()
        if message is not grpc.aio.EOF:  # type: ignore[attr-defined]
            self._call.received += 1
            self._observer.received(self._call)
        return message

    async def write(self, message: Any) -> None:
        await self._context.write(message)
        self._call.sent += 1
        self._observer.sent(self._call)


class AccessInterceptor(grpc.aio.ServerInterceptor):
    """Placed first (outermost) on a server, so it sees every call, those another interceptor
    refuses (the TCP listener's token check) included."""

    def __init__(self, door: str, observer: Observer | None = None) -> None:
        self.door = door
        self.observer = observer or Observer()
        # The wrapped handler of each method txd serves, made once: gRPC's generic handler
        # hands out the same handler for a method every time.
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method = details.method
        if handler is None:  # no such method: gRPC answers UNIMPLEMENTED
            call = Call(method, UNARY, self.door)
            call.code = grpc.StatusCode.UNIMPLEMENTED
            write_line(call, 0.0)
            return handler
        if method not in KNOWN:
            return _wrap(handler, method, self.door, Observer())
        made = self._wrapped.get(method)
        if made is None or made[0] is not handler:  # the first call, or a refusal's handler
            made = self._wrapped[method] = (
                handler,
                _wrap(handler, method, self.door, self.observer),
            )
        return made[1]


def _wrap(
    handler: grpc.RpcMethodHandler, method: str, door: str, observer: Observer
) -> grpc.RpcMethodHandler:
    kind = _type(handler.request_streaming, handler.response_streaming)
    shown = KNOWN.get(method, kind)  # as the method is declared

    def begin(context: grpc.aio.ServicerContext) -> Call:
        call = Call(method, shown, door)
        peer = context.peer()
        if peer and peer != "unix:":
            call.peer = peer
        observer.started(call)
        return call

    @contextlib.contextmanager
    def observed(context: grpc.aio.ServicerContext) -> Iterator[Call]:
        """One call from its start to its outcome (its error, if it raised): counted, timed
        and written as its access line."""
        call = begin(context)
        error: BaseException | None = None
        try:
            yield call
        except BaseException as e:
            error = e
            raise
        finally:
            call.code = _outcome(context, error)
            seconds = time.monotonic() - call.start
            observer.handled(call, seconds)
            write_line(call, seconds)

    def got(call: Call) -> None:
        call.received += 1
        observer.received(call)

    def put(call: Call) -> None:
        call.sent += 1
        observer.sent(call)

    async def requests(call: Call, iterator: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for request in iterator:
            got(call)
            yield request

    if kind == UNARY:
        unary = cast(Callable[..., Any], handler.unary_unary)  # grpc-stubs: the sync one

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with observed(context) as call:
                got(call)
                response = await unary(request, context)
                put(call)
                return response

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, handler.request_deserializer, handler.response_serializer
        )

    behavior = cast(
        Callable[..., Any],
        {
            CLIENT_STREAM: handler.stream_unary,
            SERVER_STREAM: handler.unary_stream,
            BIDI_STREAM: handler.stream_stream,
        }[kind],
    )
    streaming_in = kind in (CLIENT_STREAM, BIDI_STREAM)

    def arguments(call: Call, first: Any, context: grpc.aio.ServicerContext) -> Any:
        if streaming_in:
            return requests(call, first)
        got(call)
        return first

    if inspect.isasyncgenfunction(behavior):

        async def generator(first: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            with observed(context) as call:
                async for response in behavior(arguments(call, first, context), context):
                    yield response
                    put(call)

        wrapped: Callable[..., Any] = generator
    else:
        # A coroutine: it reads and writes through the context (or returns the one response
        # of a client stream).

        async def coroutine(first: Any, context: grpc.aio.ServicerContext) -> Any:
            with observed(context) as call:
                counting = _Counting(context, call, observer)
                response = await behavior(arguments(call, first, context), counting)
                if kind == CLIENT_STREAM:
                    put(call)
                return response

        wrapped = coroutine

    make = {
        CLIENT_STREAM: grpc.stream_unary_rpc_method_handler,
        SERVER_STREAM: grpc.unary_stream_rpc_method_handler,
        BIDI_STREAM: grpc.stream_stream_rpc_method_handler,
    }[kind]
    return make(wrapped, handler.request_deserializer, handler.response_serializer)


def _outcome(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    """The call's status code: the one the handler set or aborted with; CANCELLED when the
    call was cancelled (the client left, or its deadline passed); UNKNOWN for an exception
    that escaped (gRPC's own answer to it)."""
    code = _set_code(context)
    if code is not None:
        return code
    if isinstance(error, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    if error is not None:
        return grpc.StatusCode.UNKNOWN
    return grpc.StatusCode.OK


def _set_code(context: grpc.aio.ServicerContext) -> grpc.StatusCode | None:
    try:
        code = context.code()
    except Exception:  # an older grpcio without ServicerContext.code()
        return None
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, int):  # grpcio hands the number back on some paths
        for known in grpc.StatusCode:
            if known.value[0] == code:
                return known
    return None
