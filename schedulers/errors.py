"""The closed set of errors a scheduler or the daemon core raises.

Each class maps to one gRPC status code at the daemon's edge (txd.daemon.servicer); anything
else is an internal error. Messages are for people: say what is wrong and, where possible, what
to do instead.
"""

from __future__ import annotations


class TxdError(Exception):
    """Base class. `str(err)` is the message sent to the client."""


class InvalidArgument(TxdError):
    """A request field is invalid. `field` is its path, e.g. `app.roles[0].num_replicas`."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class NotFound(TxdError):
    """An unknown app handle, scheduler, role or replica."""


class LogGone(NotFound):
    """One replica's log can no longer be read (its container was removed outside txd): the
    daemon sends the other replicas' logs and names this one (LogsResponse.unreadable)."""


class AlreadyExists(TxdError):
    """Something the request would create exists already (a request id used for another job)."""


class FailedPrecondition(TxdError):
    """The request is valid but cannot be carried out in the current state."""


class Unsupported(TxdError):
    """The scheduler does not implement this operation."""


class BackendUnavailable(TxdError):
    """The backend cannot be reached (or the daemon itself is shutting down: ShuttingDown).

    `backend` names the scheduler whose backend failed; the daemon core sets it around its
    calls into a scheduler, and the servicer sends it to the client as trailing metadata, so
    that a client tells "the backend failed" from "no daemon answers" (both UNAVAILABLE)."""

    backend = ""


class ShuttingDown(BackendUnavailable):
    """The daemon is shutting down: no new job, and waits and watches end. Never a backend's."""


class ResourceExhausted(TxdError):
    """The host ran out of something the request needs (disk space, file descriptors):
    the request may succeed once the load or the full disk is gone."""


class OutOfRange(TxdError):
    """A position asked for lies outside what is held (an events cursor older than the
    retention): the caller must start again from what the message names."""
