"""Errors the client raises: one class per gRPC status code the daemon uses."""

from __future__ import annotations

from typing import Any

import grpc


class TxdError(Exception):
    """A call failed. `code` is the gRPC status code name (e.g. "NOT_FOUND")."""

    code = "UNKNOWN"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgumentError(TxdError):
    code = "INVALID_ARGUMENT"


class NotFoundError(TxdError):
    code = "NOT_FOUND"


class AlreadyExistsError(TxdError):
    """A request id given to Run already belongs to another job."""

    code = "ALREADY_EXISTS"


class FailedPreconditionError(TxdError):
    code = "FAILED_PRECONDITION"


class UnimplementedError(TxdError):
    code = "UNIMPLEMENTED"


class UnavailableError(TxdError):
    """The daemon cannot be reached (or is shutting down); see BackendUnavailableError."""

    code = "UNAVAILABLE"


class BackendUnavailableError(UnavailableError):
    """The daemon answered, but the backend of scheduler `backend` (its commands, its login
    node) could not: the daemon marks these with trailing metadata `txd-backend`."""

    def __init__(self, message: str, backend: str) -> None:
        super().__init__(message)
        self.backend = backend


class DeadlineExceededError(TxdError):
    """The call's timeout ran out."""

    code = "DEADLINE_EXCEEDED"


class ResourceExhaustedError(TxdError):
    """The daemon refused for want of a resource (e.g. a request over the message size limit)."""

    code = "RESOURCE_EXHAUSTED"


class InternalError(TxdError):
    """A bug in the daemon (its log has the traceback)."""

    code = "INTERNAL"


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        AlreadyExistsError,
        FailedPreconditionError,
        UnimplementedError,
        UnavailableError,
        DeadlineExceededError,
        ResourceExhaustedError,
        InternalError,
    )
}
_BACKEND_KEY = "txd-backend"  # txd.daemon.servicer.BACKEND_KEY


def from_rpc_error(err: grpc.RpcError) -> TxdError:
    code = err.code()
    message = err.details() or code.name
    if code == grpc.StatusCode.UNAVAILABLE:
        # (key, value) pairs, whether the error came from a grpc.aio or a blocking call
        trailing: Any = err.trailing_metadata()
        for key, value in trailing or ():
            if key == _BACKEND_KEY:
                return BackendUnavailableError(message, str(value))
    cls = _BY_CODE.get(code.name, TxdError)
    out = cls(message)
    if cls is TxdError:
        out.code = code.name
    return out
