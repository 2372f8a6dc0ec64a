"""txd.client: talk to the txd daemon from Python.

    from txd.client import Client
    from txd.v1 import AppDef, Role

    with Client() as c:
        handle = c.run(AppDef(name="hi", roles=[Role(name="echo", entrypoint="echo",
                                                     args=["hello"])]))
        print(c.wait(handle).state)

Imports grpc, protobuf and txd.v1 only: never the daemon, the schedulers or a backend library.
"""

from txd.client._async import AsyncClient
from txd.client._errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    TxdError,
    UnavailableError,
    UnimplementedError,
)
from txd.client._sync import Client

__all__ = [
    "AsyncClient",
    "Client",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "NotFoundError",
    "TxdError",
    "UnavailableError",
    "UnimplementedError",
]
