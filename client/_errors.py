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
    out.status_details = _status_details(err)
    return out


def _status_details(err: grpc.RpcError) -> bytes:
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    # (key, value) pairs at run time, sync and aio alike; grpc-stubs types them otherwise.
    for key, value in cast(Iterable[tuple[str, bytes]], trailers or ()):
        if key == "grpc-status-details-bin":
            return bytes(value)
    return b""
