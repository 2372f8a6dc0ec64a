"""Errors the client raises: one class per gRPC status code the daemon uses."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import grpc


class TxdError(Exception):
    """A call failed. `code` is the gRPC status code name (e.g. "NOT_FOUND"); `status_details`
    the serialized google.rpc.Status the daemon sent with it (b"" when none)."""

    code = "UNKNOWN"
    status_details = b""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgumentError(TxdError):
    """A request field is invalid. `field` is its path in the request, e.g.
    "app.roles[0].num_replicas" (from google.rpc.BadRequest in the status details, read on
    first use), or None when the daemon named none."""

    code = "INVALID_ARGUMENT"

    @property
    def violations(self) -> list[tuple[str, str]]:
        """(field path, reason) of each invalid field the daemon named."""
        if not self.status_details:
            return []
        from txd.client._details import field_violations

        return field_violations(self.status_details)

    @property
    def field(self) -> str | None:
        violations = self.violations
        return violations[0][0] if violations else None


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


class UnauthenticatedError(TxdError):
    """A daemon's TCP listener refused the call's token (missing, unknown, revoked or expired)."""

    code = "UNAUTHENTICATED"


class PermissionDeniedError(TxdError):
    """A daemon's TCP listener took the token but its scope does not allow the call (a `read`
    token may observe jobs, not run, cancel or delete them)."""

    code = "PERMISSION_DENIED"


class DeadlineExceededError(TxdError):
    """The call's timeout ran out."""

    code = "DEADLINE_EXCEEDED"


class ResourceExhaustedError(TxdError):
    """The daemon refused for want of a resource (e.g. a request over the message size limit)."""

    code = "RESOURCE_EXHAUSTED"


class OutOfRangeError(TxdError):
    """An events cursor or time older than the events the daemon still holds (its retention
    dropped them): list again (or take a snapshot) and resume from `oldest_cursor`."""

    code = "OUT_OF_RANGE"

    @property
    def oldest_cursor(self) -> str:
        return str(self).rpartition("oldest cursor held: ")[2].strip()


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
        UnauthenticatedError,
        PermissionDeniedError,
        DeadlineExceededError,
        ResourceExhaustedError,
        OutOfRangeError,
        InternalError,
    )
}
_BACKEND_KEY = "txd-backend"  # txd.daemon.errorstatus.BACKEND_KEY


def from_rpc_error(err: grpc.RpcError) -> TxdError:
    code = err.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        for key, value in _trailers(err):
            if key == _BACKEND_KEY:
                return BackendUnavailableError(err.details() or code.name, str(value))
    return from_status(code.name, err.details() or "", _status_details(err))


def from_status(code: str, message: str, status_details: bytes = b"") -> TxdError:
    """The error of a gRPC status (its code's name), as a call that ended with it raises."""
    cls = _BY_CODE.get(code, TxdError)
    out = cls(message or code)
    if cls is TxdError:
        out.code = code
    out.status_details = status_details
    return out


def _trailers(err: grpc.RpcError) -> Iterable[tuple[str, str | bytes]]:
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    # (key, value) pairs at run time, sync and aio alike; grpc-stubs types them otherwise.
    return cast(Iterable[tuple[str, str | bytes]], trailers or ())


def _status_details(err: grpc.RpcError) -> bytes:
    for key, value in _trailers(err):
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            return value
    return b""
