import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from txd.v1 import app_pb2 as _app_pb2
from txd.v1 import scheduler_pb2 as _scheduler_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunRequest(_message.Message):
    __slots__ = ("app", "scheduler", "cfg", "cwd", "env", "request_id", "workspace")
    class CfgEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _scheduler_pb2.CfgValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_scheduler_pb2.CfgValue, _Mapping]] = ...) -> None: ...
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    APP_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    CFG_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    app: _app_pb2.AppDef
    scheduler: str
    cfg: _containers.MessageMap[str, _scheduler_pb2.CfgValue]
    cwd: str
    env: _containers.ScalarMap[str, str]
    request_id: str
    workspace: str
    def __init__(self, app: _Optional[_Union[_app_pb2.AppDef, _Mapping]] = ..., scheduler: _Optional[str] = ..., cfg: _Optional[_Mapping[str, _scheduler_pb2.CfgValue]] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., workspace: _Optional[str] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("app_handle", "app_id")
    APP_HANDLE_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    app_handle: str
    app_id: str
    def __init__(self, app_handle: _Optional[str] = ..., app_id: _Optional[str] = ...) -> None: ...

class DryRunRequest(_message.Message):
    __slots__ = ("app", "scheduler", "cfg", "cwd", "env", "workspace")
    class CfgEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _scheduler_pb2.CfgValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_scheduler_pb2.CfgValue, _Mapping]] = ...) -> None: ...
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    APP_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    CFG_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    app: _app_pb2.AppDef
    scheduler: str
    cfg: _containers.MessageMap[str, _scheduler_pb2.CfgValue]
    cwd: str
    env: _containers.ScalarMap[str, str]
    workspace: str
    def __init__(self, app: _Optional[_Union[_app_pb2.AppDef, _Mapping]] = ..., scheduler: _Optional[str] = ..., cfg: _Optional[_Mapping[str, _scheduler_pb2.CfgValue]] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., workspace: _Optional[str] = ...) -> None: ...

class DryRunResponse(_message.Message):
    __slots__ = ("app", "scheduler", "request", "workspace")
    APP_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    app: _app_pb2.AppDef
    scheduler: str
    request: str
    workspace: str
    def __init__(self, app: _Optional[_Union[_app_pb2.AppDef, _Mapping]] = ..., scheduler: _Optional[str] = ..., request: _Optional[str] = ..., workspace: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("app_handle",)
    APP_HANDLE_FIELD_NUMBER: _ClassVar[int]
    app_handle: str
    def __init__(self, app_handle: _Optional[str] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _app_pb2.AppStatus
    def __init__(self, status: _Optional[_Union[_app_pb2.AppStatus, _Mapping]] = ...) -> None: ...

class ReadReply(_message.Message):
    __slots__ = ("status", "error")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    status: StatusResponse
    error: ReadError
    def __init__(self, status: _Optional[_Union[StatusResponse, _Mapping]] = ..., error: _Optional[_Union[ReadError, _Mapping]] = ...) -> None: ...

class ReadError(_message.Message):
    __slots__ = ("code", "message", "status_details")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_DETAILS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    status_details: bytes
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., status_details: _Optional[bytes] = ...) -> None: ...

class WaitRequest(_message.Message):
    __slots__ = ("app_handle",)
    APP_HANDLE_FIELD_NUMBER: _ClassVar[int]
    app_handle: str
    def __init__(self, app_handle: _Optional[str] = ...) -> None: ...

class WaitResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _app_pb2.AppStatus
    def __init__(self, status: _Optional[_Union[_app_pb2.AppStatus, _Mapping]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("app_handle",)
    APP_HANDLE_FIELD_NUMBER: _ClassVar[int]
    app_handle: str
    def __init__(self, app_handle: _Optional[str] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _app_pb2.AppStatus
    def __init__(self, status: _Optional[_Union[_app_pb2.AppStatus, _Mapping]] = ...) -> None: ...

class DescribeRequest(_message.Message):
    __slots__ = ("app_handle", "native")
    APP_HANDLE_FIELD_NUMBER: _ClassVar[int]
    NATIVE_FIELD_NUMBER: _ClassVar[int]
    app_handle: str
    native: bool
    def __init__(self, app_handle: _Optional[str] = ..., native: _Optional[bool] = ...) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ("app", "status", "cfg", "native")
    class CfgEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _scheduler_pb2.CfgValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_scheduler_pb2.CfgValue, _Mapping]] = ...) -> None: ...
    APP_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CFG_FIELD_NUMBER: _ClassVar[int]
    NATIVE_FIELD_NUMBER: _ClassVar[int]
    app: _app_pb2.AppDef
    status: _app_pb2.AppStatus
    cfg: _containers.MessageMap[str, _scheduler_pb2.CfgValue]
    native: NativeRequest
    def __init__(self, app: _Optional[_Union[_app_pb2.AppDef, _Mapping]] = ..., status: _Optional[_Union[_app_pb2.AppStatus, _Mapping]] = ..., cfg: _Optional[_Mapping[str, _scheduler_pb2.CfgValue]] = ..., native: _Optional[_Union[NativeRequest, _Mapping]] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("scheduler", "backend", "page_size", "page_token", "states", "created_since")
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    CREATED_SINCE_FIELD_NUMBER: _ClassVar[int]
    scheduler: str
    backend: bool
    page_size: int
    page_token: str
    states: _containers.RepeatedScalarFieldContainer[_app_pb2.AppStatus.State]
    created_since: _timestamp_pb2.Timestamp
    def __init__(self, scheduler: _Optional[str] = ..., backend: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_app_pb2.AppStatus.State, str]]] = ..., created_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("apps", "next_page_token")
    APPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    apps: _containers.RepeatedCompositeFieldContainer[_app_pb2.AppStatus]
    next_page_token: str
    def __init__(self, apps: _Optional[_Iterable[_Union[_app_pb2.AppStatus, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("app_handle",)
    APP_HANDLE_FIELD_NUMBER: _ClassVar[int]
    app_handle: str
    def __init__(self, app_handle: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _app_pb2.AppStatus
    def __init__(self, status: _Optional[_Union[_app_pb2.AppStatus, _Mapping]] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("app_handle",)
    APP_HANDLE_FIELD_NUMBER: _ClassVar[int]
    app_handle: str
    def __init__(self, app_handle: _Optional[str] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PruneRequest(_message.Message):
    __slots__ = ("created_before", "scheduler", "dry_run")
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    created_before: _timestamp_pb2.Timestamp
    scheduler: str
    dry_run: bool
    def __init__(self, created_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., scheduler: _Optional[str] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class PruneResponse(_message.Message):
    __slots__ = ("pruned", "failed", "more")
    class FailedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PRUNED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    pruned: _containers.RepeatedCompositeFieldContainer[_app_pb2.AppStatus]
    failed: _containers.ScalarMap[str, str]
    more: bool
    def __init__(self, pruned: _Optional[_Iterable[_Union[_app_pb2.AppStatus, _Mapping]]] = ..., failed: _Optional[_Mapping[str, str]] = ..., more: _Optional[bool] = ...) -> None: ...

class LogsRequest(_message.Message):
    __slots__ = ("app_handle", "role", "replica", "regex", "since", "until", "follow", "streams", "tail", "offsets", "replicas")
    class Stream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        COMBINED: _ClassVar[LogsRequest.Stream]
        STDOUT: _ClassVar[LogsRequest.Stream]
        STDERR: _ClassVar[LogsRequest.Stream]
    COMBINED: LogsRequest.Stream
    STDOUT: LogsRequest.Stream
    STDERR: LogsRequest.Stream
    APP_HANDLE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    REGEX_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    app_handle: str
    role: str
    replica: int
    regex: str
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    follow: bool
    streams: LogsRequest.Stream
    tail: int
    offsets: _containers.RepeatedCompositeFieldContainer[ReplicaOffset]
    replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, app_handle: _Optional[str] = ..., role: _Optional[str] = ..., replica: _Optional[int] = ..., regex: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., follow: _Optional[bool] = ..., streams: _Optional[_Union[LogsRequest.Stream, str]] = ..., tail: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[ReplicaOffset, _Mapping]]] = ..., replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class LogsResponse(_message.Message):
    __slots__ = ("data", "role", "replica", "long_line", "unreadable")
    DATA_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    LONG_LINE_FIELD_NUMBER: _ClassVar[int]
    UNREADABLE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    role: str
    replica: int
    long_line: LongLine
    unreadable: str
    def __init__(self, data: _Optional[bytes] = ..., role: _Optional[str] = ..., replica: _Optional[int] = ..., long_line: _Optional[_Union[LongLine, _Mapping]] = ..., unreadable: _Optional[str] = ...) -> None: ...

class LongLine(_message.Message):
    __slots__ = ("offset", "length")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    length: int
    def __init__(self, offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class SchedulersRequest(_message.Message):
    __slots__ = ("check_backends",)
    CHECK_BACKENDS_FIELD_NUMBER: _ClassVar[int]
    check_backends: bool
    def __init__(self, check_backends: _Optional[bool] = ...) -> None: ...

class SchedulersResponse(_message.Message):
    __slots__ = ("schedulers", "default_scheduler")
    SCHEDULERS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    schedulers: _containers.RepeatedCompositeFieldContainer[_scheduler_pb2.SchedulerInfo]
    default_scheduler: str
    def __init__(self, schedulers: _Optional[_Iterable[_Union[_scheduler_pb2.SchedulerInfo, _Mapping]]] = ..., default_scheduler: _Optional[str] = ...) -> None: ...

class RunOptsRequest(_message.Message):
    __slots__ = ("scheduler",)
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    scheduler: str
    def __init__(self, scheduler: _Optional[str] = ...) -> None: ...

class RunOptsResponse(_message.Message):
    __slots__ = ("scheduler", "opts")
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    scheduler: str
    opts: _containers.RepeatedCompositeFieldContainer[_scheduler_pb2.RunOpt]
    def __init__(self, scheduler: _Optional[str] = ..., opts: _Optional[_Iterable[_Union[_scheduler_pb2.RunOpt, _Mapping]]] = ...) -> None: ...

class WhereRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhereResponse(_message.Message):
    __slots__ = ("host", "socket", "state_dir", "version", "pid", "started", "uptime", "user", "systemd_unit")
    HOST_FIELD_NUMBER: _ClassVar[int]
    SOCKET_FIELD_NUMBER: _ClassVar[int]
    STATE_DIR_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    UPTIME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    SYSTEMD_UNIT_FIELD_NUMBER: _ClassVar[int]
    host: str
    socket: str
    state_dir: str
    version: str
    pid: int
    started: _timestamp_pb2.Timestamp
    uptime: _duration_pb2.Duration
    user: str
    systemd_unit: str
    def __init__(self, host: _Optional[str] = ..., socket: _Optional[str] = ..., state_dir: _Optional[str] = ..., version: _Optional[str] = ..., pid: _Optional[int] = ..., started: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., uptime: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., user: _Optional[str] = ..., systemd_unit: _Optional[str] = ...) -> None: ...

class ReplicaOffset(_message.Message):
    __slots__ = ("role", "replica", "offset")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    role: str
    replica: int
    offset: int
    def __init__(self, role: _Optional[str] = ..., replica: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class EventsRequest(_message.Message):
    __slots__ = ("since_cursor", "since_time", "snapshot", "scheduler", "states", "app_handles", "follow", "bookmark_interval", "received", "batch")
    SINCE_CURSOR_FIELD_NUMBER: _ClassVar[int]
    SINCE_TIME_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    APP_HANDLES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    BOOKMARK_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    since_cursor: str
    since_time: _timestamp_pb2.Timestamp
    snapshot: bool
    scheduler: str
    states: _containers.RepeatedScalarFieldContainer[_app_pb2.AppStatus.State]
    app_handles: _containers.RepeatedScalarFieldContainer[str]
    follow: bool
    bookmark_interval: _duration_pb2.Duration
    received: int
    batch: int
    def __init__(self, since_cursor: _Optional[str] = ..., since_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., snapshot: _Optional[bool] = ..., scheduler: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_app_pb2.AppStatus.State, str]]] = ..., app_handles: _Optional[_Iterable[str]] = ..., follow: _Optional[bool] = ..., bookmark_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., received: _Optional[int] = ..., batch: _Optional[int] = ...) -> None: ...

class EventsResponse(_message.Message):
    __slots__ = ("kind", "cursor", "status", "time", "window", "more", "removed")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[EventsResponse.Kind]
        CHANGED: _ClassVar[EventsResponse.Kind]
        DELETED: _ClassVar[EventsResponse.Kind]
        SNAPSHOT: _ClassVar[EventsResponse.Kind]
        SYNCED: _ClassVar[EventsResponse.Kind]
        BOOKMARK: _ClassVar[EventsResponse.Kind]
        GAP: _ClassVar[EventsResponse.Kind]
    KIND_UNSPECIFIED: EventsResponse.Kind
    CHANGED: EventsResponse.Kind
    DELETED: EventsResponse.Kind
    SNAPSHOT: EventsResponse.Kind
    SYNCED: EventsResponse.Kind
    BOOKMARK: EventsResponse.Kind
    GAP: EventsResponse.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    kind: EventsResponse.Kind
    cursor: str
    status: _app_pb2.AppStatus
    time: _timestamp_pb2.Timestamp
    window: int
    more: _containers.RepeatedCompositeFieldContainer[EventsResponse]
    removed: int
    def __init__(self, kind: _Optional[_Union[EventsResponse.Kind, str]] = ..., cursor: _Optional[str] = ..., status: _Optional[_Union[_app_pb2.AppStatus, _Mapping]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., window: _Optional[int] = ..., more: _Optional[_Iterable[_Union[EventsResponse, _Mapping]]] = ..., removed: _Optional[int] = ...) -> None: ...

class NativeRequest(_message.Message):
    __slots__ = ("recorded", "text", "missing")
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    recorded: bool
    text: str
    missing: str
    def __init__(self, recorded: _Optional[bool] = ..., text: _Optional[str] = ..., missing: _Optional[str] = ...) -> None: ...

class MetricsRequest(_message.Message):
    __slots__ = ("format",)
    class Format(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FORMAT_UNSPECIFIED: _ClassVar[MetricsRequest.Format]
        OPENMETRICS: _ClassVar[MetricsRequest.Format]
        PROMETHEUS: _ClassVar[MetricsRequest.Format]
    FORMAT_UNSPECIFIED: MetricsRequest.Format
    OPENMETRICS: MetricsRequest.Format
    PROMETHEUS: MetricsRequest.Format
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    format: MetricsRequest.Format
    def __init__(self, format: _Optional[_Union[MetricsRequest.Format, str]] = ...) -> None: ...

class MetricsResponse(_message.Message):
    __slots__ = ("text", "content_type")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    text: str
    content_type: str
    def __init__(self, text: _Optional[str] = ..., content_type: _Optional[str] = ...) -> None: ...
