"""Python values <-> CfgValue messages, for the client and the schedulers alike."""

from __future__ import annotations

from txd.v1.scheduler_pb2 import CfgValue, StringList, StringMap

CfgVal = str | int | float | bool | list[str] | dict[str, str] | None


def to_cfg_value(value: CfgVal) -> CfgValue:
    """A Python value as a CfgValue message (None -> an empty CfgValue)."""
    match value:
        case None:
            return CfgValue()
        case bool():
            return CfgValue(bool=value)
        case int():
            return CfgValue(int=value)
        case float():
            return CfgValue(float=value)
        case str():
            return CfgValue(str=value)
        case list():
            return CfgValue(list=StringList(items=value))
        case dict():
            return CfgValue(dict=StringMap(items=value))
    raise TypeError(f"not a cfg value: {value!r}")


def from_cfg_value(value: CfgValue) -> CfgVal:
    """The Python value of a CfgValue message."""
    kind = value.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "list":
        return list(value.list.items)
    if kind == "dict":
        return dict(value.dict.items)
    return getattr(value, kind)
