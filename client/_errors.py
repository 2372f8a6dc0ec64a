"""Errors the client raises: one class per gRPC status code the daemon uses."""

from __future__ import annotations

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
    """The daemon (or the backend behind it) cannot be reached."""

    code = "UNAVAILABLE"


class DeadlineExceededError(TxdError):
    code = "DEADLINE_EXCEEDED"


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
    )
}


def from_rpc_error(err: grpc.RpcError) -> TxdError:
    code = err.code()
    cls = _BY_CODE.get(code.name, TxdError)
    out = cls(err.details() or code.name)
    if cls is TxdError:
        out.code = code.name
    return out
