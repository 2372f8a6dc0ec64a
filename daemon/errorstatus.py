"""A job service error as the gRPC status that ends the call: its code, a message cut to what
trailers carry, and for InvalidArgument the field machine-readably. One mapping for every door
(the socket's servicer and the read door's process)."""

from __future__ import annotations

import logging
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from txd.daemon.jobstore import Fenced
from txd.schedulers import errors
from txd.schedulers.exhaustion import exhausted

log = logging.getLogger("txd.daemon.servicer")  # the name its lines had before the move

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
    if isinstance(e, Fenced):  # as if no daemon answered: the client finds the one that does
        return grpc.StatusCode.UNAVAILABLE, str(e), ()
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
