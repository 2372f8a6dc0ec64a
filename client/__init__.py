"""txd.client: talk to the txd daemon from Python.

    from txd.client import AppState, Client
    from txd.v1 import AppDef, Role

    with Client() as c:
        handle = c.run(AppDef(name="hi", roles=[Role(name="echo", entrypoint="echo",
                                                     args=["hello"])]))
        print(AppState(c.wait(handle).state))   # SUCCEEDED

Imports grpc, protobuf and txd.v1 only: never the daemon, the schedulers or a backend library.
The names below load on first use, so `txctl --help` (which lives in this package) starts
without importing gRPC.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from txd.client._async import AsyncClient
    from txd.client._errors import (
        AlreadyExistsError,
        BackendUnavailableError,
        DeadlineExceededError,
        FailedPreconditionError,
        InternalError,
        InvalidArgumentError,
        NotFoundError,
        OutOfRangeError,
        PermissionDeniedError,
        ResourceExhaustedError,
        TxdError,
        UnauthenticatedError,
        UnavailableError,
        UnimplementedError,
    )
    from txd.client._resume import ResumePolicy
    from txd.client._state import AppState
    from txd.client._sync import Client

_WHERE = {
    "AppState": "_state",
    "AsyncClient": "_async",
    "Client": "_sync",
    "ResumePolicy": "_resume",
    **dict.fromkeys(
        [
            "AlreadyExistsError",
            "BackendUnavailableError",
            "DeadlineExceededError",
            "FailedPreconditionError",
            "InternalError",
            "InvalidArgumentError",
            "NotFoundError",
            "OutOfRangeError",
            "PermissionDeniedError",
            "ResourceExhaustedError",
            "TxdError",
            "UnauthenticatedError",
            "UnavailableError",
            "UnimplementedError",
        ],
        "_errors",
    ),
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'txd.client' has no attribute {name!r}")
    return getattr(importlib.import_module(f"txd.client.{_WHERE[name]}"), name)
