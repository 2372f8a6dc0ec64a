import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AppDef(_message.Message):
    __slots__ = ("name", "roles", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    roles: _containers.RepeatedCompositeFieldContainer[Role]
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., roles: _Optional[_Iterable[_Union[Role, _Mapping]]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Role(_message.Message):
    __slots__ = ("name", "image", "entrypoint", "args", "env", "num_replicas", "min_replicas", "max_retries", "retry_policy", "resource", "port_map", "metadata", "mounts")
    class RetryPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        APPLICATION: _ClassVar[Role.RetryPolicy]
        REPLICA: _ClassVar[Role.RetryPolicy]
        ROLE: _ClassVar[Role.RetryPolicy]
    APPLICATION: Role.RetryPolicy
    REPLICA: Role.RetryPolicy
    ROLE: Role.RetryPolicy
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class PortMapEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    NUM_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MIN_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    PORT_MAP_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    image: str
    entrypoint: str
    args: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    num_replicas: int
    min_replicas: int
    max_retries: int
    retry_policy: Role.RetryPolicy
    resource: Resource
    port_map: _containers.ScalarMap[str, int]
    metadata: _containers.ScalarMap[str, str]
    mounts: _containers.RepeatedCompositeFieldContainer[Mount]
    def __init__(self, name: _Optional[str] = ..., image: _Optional[str] = ..., entrypoint: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., num_replicas: _Optional[int] = ..., min_replicas: _Optional[int] = ..., max_retries: _Optional[int] = ..., retry_policy: _Optional[_Union[Role.RetryPolicy, str]] = ..., resource: _Optional[_Union[Resource, _Mapping]] = ..., port_map: _Optional[_Mapping[str, int]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., mounts: _Optional[_Iterable[_Union[Mount, _Mapping]]] = ...) -> None: ...

class Resource(_message.Message):
    __slots__ = ("cpu", "gpu", "mem_mb", "capabilities", "devices", "named")
    class CapabilitiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class DevicesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CPU_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    MEM_MB_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    NAMED_FIELD_NUMBER: _ClassVar[int]
    cpu: int
    gpu: int
    mem_mb: int
    capabilities: _containers.ScalarMap[str, str]
    devices: _containers.ScalarMap[str, int]
    named: str
    def __init__(self, cpu: _Optional[int] = ..., gpu: _Optional[int] = ..., mem_mb: _Optional[int] = ..., capabilities: _Optional[_Mapping[str, str]] = ..., devices: _Optional[_Mapping[str, int]] = ..., named: _Optional[str] = ...) -> None: ...

class BindMount(_message.Message):
    __slots__ = ("src_path", "dst_path", "read_only")
    SRC_PATH_FIELD_NUMBER: _ClassVar[int]
    DST_PATH_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    src_path: str
    dst_path: str
    read_only: bool
    def __init__(self, src_path: _Optional[str] = ..., dst_path: _Optional[str] = ..., read_only: _Optional[bool] = ...) -> None: ...

class VolumeMount(_message.Message):
    __slots__ = ("src", "dst_path", "read_only")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_PATH_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    src: str
    dst_path: str
    read_only: bool
    def __init__(self, src: _Optional[str] = ..., dst_path: _Optional[str] = ..., read_only: _Optional[bool] = ...) -> None: ...

class DeviceMount(_message.Message):
    __slots__ = ("src_path", "dst_path", "permissions")
    SRC_PATH_FIELD_NUMBER: _ClassVar[int]
    DST_PATH_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    src_path: str
    dst_path: str
    permissions: str
    def __init__(self, src_path: _Optional[str] = ..., dst_path: _Optional[str] = ..., permissions: _Optional[str] = ...) -> None: ...

class Mount(_message.Message):
    __slots__ = ("bind", "volume", "device")
    BIND_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    bind: BindMount
    volume: VolumeMount
    device: DeviceMount
    def __init__(self, bind: _Optional[_Union[BindMount, _Mapping]] = ..., volume: _Optional[_Union[VolumeMount, _Mapping]] = ..., device: _Optional[_Union[DeviceMount, _Mapping]] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("id", "state", "role", "hostname", "exit_code", "structured_error_msg")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_ERROR_MSG_FIELD_NUMBER: _ClassVar[int]
    id: int
    state: AppStatus.State
    role: str
    hostname: str
    exit_code: int
    structured_error_msg: str
    def __init__(self, id: _Optional[int] = ..., state: _Optional[_Union[AppStatus.State, str]] = ..., role: _Optional[str] = ..., hostname: _Optional[str] = ..., exit_code: _Optional[int] = ..., structured_error_msg: _Optional[str] = ...) -> None: ...

class RoleStatus(_message.Message):
    __slots__ = ("role", "replicas")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    role: str
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    def __init__(self, role: _Optional[str] = ..., replicas: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ...) -> None: ...

class AppStatus(_message.Message):
    __slots__ = ("state", "num_restarts", "msg", "structured_error_msg", "ui_url", "roles", "app_handle", "scheduler", "app_id", "name", "created", "updated", "stale_since", "stale_msg")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNSUBMITTED: _ClassVar[AppStatus.State]
        SUBMITTED: _ClassVar[AppStatus.State]
        PENDING: _ClassVar[AppStatus.State]
        RUNNING: _ClassVar[AppStatus.State]
        SUCCEEDED: _ClassVar[AppStatus.State]
        FAILED: _ClassVar[AppStatus.State]
        CANCELLED: _ClassVar[AppStatus.State]
        UNKNOWN: _ClassVar[AppStatus.State]
    UNSUBMITTED: AppStatus.State
    SUBMITTED: AppStatus.State
    PENDING: AppStatus.State
    RUNNING: AppStatus.State
    SUCCEEDED: AppStatus.State
    FAILED: AppStatus.State
    CANCELLED: AppStatus.State
    UNKNOWN: AppStatus.State
    STATE_FIELD_NUMBER: _ClassVar[int]
    NUM_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    MSG_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_ERROR_MSG_FIELD_NUMBER: _ClassVar[int]
    UI_URL_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    APP_HANDLE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    STALE_SINCE_FIELD_NUMBER: _ClassVar[int]
    STALE_MSG_FIELD_NUMBER: _ClassVar[int]
    state: AppStatus.State
    num_restarts: int
    msg: str
    structured_error_msg: str
    ui_url: str
    roles: _containers.RepeatedCompositeFieldContainer[RoleStatus]
    app_handle: str
    scheduler: str
    app_id: str
    name: str
    created: _timestamp_pb2.Timestamp
    updated: _timestamp_pb2.Timestamp
    stale_since: _timestamp_pb2.Timestamp
    stale_msg: str
    def __init__(self, state: _Optional[_Union[AppStatus.State, str]] = ..., num_restarts: _Optional[int] = ..., msg: _Optional[str] = ..., structured_error_msg: _Optional[str] = ..., ui_url: _Optional[str] = ..., roles: _Optional[_Iterable[_Union[RoleStatus, _Mapping]]] = ..., app_handle: _Optional[str] = ..., scheduler: _Optional[str] = ..., app_id: _Optional[str] = ..., name: _Optional[str] = ..., created: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., stale_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., stale_msg: _Optional[str] = ...) -> None: ...
