"""The txd API, generated from the .proto files beside this one (scripts/gen_protos.py).

The messages are re-exported here so a component file can write
`from txd.v1 import AppDef, Role, Resource`. Every enum is nested in the message it belongs to
(AppStatus.State, Role.RetryPolicy, LogsRequest.Stream, RunOpt.Type), so its values are scoped
by that message in every language; Python code names them by the shorter aliases below.
The gRPC stubs (runner_pb2_grpc) need grpcio and are imported explicitly by the client and
the daemon.
"""

from txd.v1.app_pb2 import (
    AppDef,
    AppStatus,
    BindMount,
    DeviceMount,
    Mount,
    ReplicaStatus,
    Resource,
    Role,
    RoleStatus,
    VolumeMount,
)
from txd.v1.runner_pb2 import LogsRequest
from txd.v1.scheduler_pb2 import Capabilities, CfgValue, RunOpt, SchedulerInfo

AppState = AppStatus.State
RetryPolicy = Role.RetryPolicy
Stream = LogsRequest.Stream
OptType = RunOpt.Type

TERMINAL_STATES = frozenset({AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED})

__all__ = [
    "TERMINAL_STATES",
    "AppDef",
    "AppState",
    "AppStatus",
    "BindMount",
    "Capabilities",
    "CfgValue",
    "DeviceMount",
    "Mount",
    "OptType",
    "ReplicaStatus",
    "Resource",
    "RetryPolicy",
    "Role",
    "RoleStatus",
    "RunOpt",
    "SchedulerInfo",
    "Stream",
    "VolumeMount",
]
