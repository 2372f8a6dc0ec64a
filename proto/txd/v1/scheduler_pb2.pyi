from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StringList(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, items: _Optional[_Iterable[str]] = ...) -> None: ...

class StringMap(_message.Message):
    __slots__ = ("items",)
    class ItemsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.ScalarMap[str, str]
    def __init__(self, items: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CfgValue(_message.Message):
    __slots__ = ("str", "int", "float", "bool", "list", "dict")
    STR_FIELD_NUMBER: _ClassVar[int]
    INT_FIELD_NUMBER: _ClassVar[int]
    FLOAT_FIELD_NUMBER: _ClassVar[int]
    BOOL_FIELD_NUMBER: _ClassVar[int]
    LIST_FIELD_NUMBER: _ClassVar[int]
    DICT_FIELD_NUMBER: _ClassVar[int]
    str: str
    int: int
    float: float
    bool: bool
    list: StringList
    dict: StringMap
    def __init__(self, str: _Optional[str] = ..., int: _Optional[int] = ..., float: _Optional[float] = ..., bool: _Optional[bool] = ..., list: _Optional[_Union[StringList, _Mapping]] = ..., dict: _Optional[_Union[StringMap, _Mapping]] = ...) -> None: ...

class RunOpt(_message.Message):
    __slots__ = ("name", "type", "default", "help", "required")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STR: _ClassVar[RunOpt.Type]
        INT: _ClassVar[RunOpt.Type]
        FLOAT: _ClassVar[RunOpt.Type]
        BOOL: _ClassVar[RunOpt.Type]
        LIST: _ClassVar[RunOpt.Type]
        DICT: _ClassVar[RunOpt.Type]
    STR: RunOpt.Type
    INT: RunOpt.Type
    FLOAT: RunOpt.Type
    BOOL: RunOpt.Type
    LIST: RunOpt.Type
    DICT: RunOpt.Type
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_FIELD_NUMBER: _ClassVar[int]
    HELP_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: RunOpt.Type
    default: CfgValue
    help: str
    required: bool
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[RunOpt.Type, str]] = ..., default: _Optional[_Union[CfgValue, _Mapping]] = ..., help: _Optional[str] = ..., required: _Optional[bool] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("logs", "log_follow", "log_since_until", "log_streams", "cancel", "delete", "list", "describe", "distributed", "mounts", "retries", "elastic", "push_status", "workspace")
    LOGS_FIELD_NUMBER: _ClassVar[int]
    LOG_FOLLOW_FIELD_NUMBER: _ClassVar[int]
    LOG_SINCE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    LOG_STREAMS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    LIST_FIELD_NUMBER: _ClassVar[int]
    DESCRIBE_FIELD_NUMBER: _ClassVar[int]
    DISTRIBUTED_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    ELASTIC_FIELD_NUMBER: _ClassVar[int]
    PUSH_STATUS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    logs: bool
    log_follow: bool
    log_since_until: bool
    log_streams: bool
    cancel: bool
    delete: bool
    list: bool
    describe: bool
    distributed: bool
    mounts: bool
    retries: bool
    elastic: bool
    push_status: bool
    workspace: bool
    def __init__(self, logs: _Optional[bool] = ..., log_follow: _Optional[bool] = ..., log_since_until: _Optional[bool] = ..., log_streams: _Optional[bool] = ..., cancel: _Optional[bool] = ..., delete: _Optional[bool] = ..., list: _Optional[bool] = ..., describe: _Optional[bool] = ..., distributed: _Optional[bool] = ..., mounts: _Optional[bool] = ..., retries: _Optional[bool] = ..., elastic: _Optional[bool] = ..., push_status: _Optional[bool] = ..., workspace: _Optional[bool] = ...) -> None: ...

class SchedulerInfo(_message.Message):
    __slots__ = ("name", "description", "capabilities", "load_error", "backend_calls", "settings", "not_ready")
    class BackendCallsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class SettingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: CfgValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[CfgValue, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    LOAD_ERROR_FIELD_NUMBER: _ClassVar[int]
    BACKEND_CALLS_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    NOT_READY_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    capabilities: Capabilities
    load_error: str
    backend_calls: _containers.ScalarMap[str, int]
    settings: _containers.MessageMap[str, CfgValue]
    not_ready: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., capabilities: _Optional[_Union[Capabilities, _Mapping]] = ..., load_error: _Optional[str] = ..., backend_calls: _Optional[_Mapping[str, int]] = ..., settings: _Optional[_Mapping[str, CfgValue]] = ..., not_ready: _Optional[str] = ...) -> None: ...
