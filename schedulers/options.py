"""Typed run options: a scheduler declares a dataclass, and cfg maps are checked against it.

A field's docstring-free help comes from `field(metadata={"help": ...})`; the type comes from the
annotation (str, int, float, bool, list[str], dict[str, str], each optionally `| None`).
`resolve` is the one place where option names, types and required-ness are enforced.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from txd.cfgvalue import CfgVal, from_cfg_value, to_cfg_value
from txd.schedulers.errors import InvalidArgument
from txd.v1 import OptType
from txd.v1.scheduler_pb2 import CfgValue, RunOpt

T = TypeVar("T")

__all__ = [
    "CfgVal",
    "as_cfg",
    "from_cfg_value",
    "opt",
    "parse_str",
    "resolve",
    "run_opts",
    "to_cfg_value",
]

_TYPE_NAMES = {
    OptType.STR: "str",
    OptType.INT: "int",
    OptType.FLOAT: "float",
    OptType.BOOL: "bool",
    OptType.LIST: "list of str",
    OptType.DICT: "dict of str:str",
}


def opt(default: Any = None, help: str = "", required: bool = False) -> Any:
    """Declares one option field with its help text."""
    kw: dict[str, Any] = {"metadata": {"help": help, "required": required}}
    if isinstance(default, list | dict):
        kw["default_factory"] = lambda: type(default)(default)
    else:
        kw["default"] = default
    return dataclasses.field(**kw)


def _opt_type(annotation: Any) -> OptType:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported option type {annotation!r}")
        annotation = inner[0]
    origin = typing.get_origin(annotation) or annotation
    table = {
        str: OptType.STR,
        int: OptType.INT,
        float: OptType.FLOAT,
        bool: OptType.BOOL,
        list: OptType.LIST,
        dict: OptType.DICT,
    }
    if origin not in table:
        raise TypeError(f"unsupported option type {annotation!r}")
    return table[origin]


@functools.cache  # resolving type hints costs more than the rest of option checking
def _fields(opts_cls: type) -> list[tuple[dataclasses.Field[Any], OptType]]:
    hints = typing.get_type_hints(opts_cls)
    return [(f, _opt_type(hints[f.name])) for f in dataclasses.fields(opts_cls)]


def run_opts(opts_cls: type) -> list[RunOpt]:
    """The RunOpt list of an options dataclass, in declaration order."""
    out = []
    for f, t in _fields(opts_cls):
        default = None
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        msg = RunOpt(
            name=f.name,
            type=t,
            help=f.metadata.get("help", ""),
            required=bool(f.metadata.get("required")),
        )
        if default is not None:
            msg.default.CopyFrom(to_cfg_value(default))
        out.append(msg)
    return out


def _split(text: str) -> list[str]:
    sep = ";" if ";" in text else ","
    return [item.strip() for item in text.split(sep) if item.strip()]


def parse_str(text: str, t: OptType, name: str) -> CfgVal:
    """Parses the string form of an option (`txctl run -c name=text`)."""
    field = f"cfg.{name}"
    if t == OptType.STR:
        return text
    if t == OptType.BOOL:
        low = text.strip().lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        raise InvalidArgument(field, f"expected a bool (true/false), got {text!r}")
    if t in (OptType.INT, OptType.FLOAT):
        try:
            return int(text) if t == OptType.INT else float(text)
        except ValueError:
            raise InvalidArgument(field, f"expected {_TYPE_NAMES[t]}, got {text!r}") from None
    if t == OptType.LIST:
        return _split(text)
    pairs: dict[str, str] = {}
    for item in _split(text):
        key, sep, val = item.partition(":")
        if not sep or not key:
            raise InvalidArgument(field, f"expected key:value pairs, got {item!r}")
        pairs[key.strip()] = val.strip()
    return pairs


def _check_type(value: CfgValue, t: OptType, name: str) -> CfgVal:
    kind = value.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "str":
        return parse_str(value.str, t, name)
    expected = {
        OptType.INT: "int",
        OptType.FLOAT: "float",
        OptType.BOOL: "bool",
        OptType.LIST: "list",
        OptType.DICT: "dict",
        OptType.STR: "str",
    }[t]
    if kind == "int" and t == OptType.FLOAT:
        return float(value.int)
    if kind != expected:
        raise InvalidArgument(f"cfg.{name}", f"expected {_TYPE_NAMES[t]}, got a {kind} value")
    return from_cfg_value(value)


def resolve(opts_cls: type[T], cfg: Mapping[str, CfgValue]) -> T:
    """Checks cfg against the options dataclass and returns a filled instance.

    Raises InvalidArgument for an unknown option (with the valid names, or, for a TorchX option
    the options class lists in its `TORCHX_REFUSED` dict, why txd has none),
    a value of the wrong type, or a missing required option.
    """
    fields = _fields(typing.cast(type, opts_cls))
    known = {f.name: t for f, t in fields}
    # TorchX spells some options with dashes (slurm's `mail-user`, `mail-type`): the same option.
    cfg = {
        (k.replace("-", "_") if k not in known and k.replace("-", "_") in known else k): v
        for k, v in cfg.items()
    }
    for name in cfg:
        if name not in known:
            # Options TorchX has that txd refuses on purpose: the scheduler says why.
            if why := getattr(opts_cls, "TORCHX_REFUSED", {}).get(name):
                raise InvalidArgument(f"cfg.{name}", f"a TorchX option txd refuses: {why}")
            valid = ", ".join(sorted(known)) or "none"
            raise InvalidArgument(f"cfg.{name}", f"unknown option (valid options: {valid})")
    values: dict[str, Any] = {}
    for f, t in fields:
        value = _check_type(cfg[f.name], t, f.name) if f.name in cfg else None
        if value is None:
            if f.metadata.get("required"):
                raise InvalidArgument(f"cfg.{f.name}", "required option is missing")
            continue
        values[f.name] = value
    return opts_cls(**values)


def as_cfg(opts: object) -> dict[str, CfgValue]:
    """The resolved options as a cfg map (what the job store keeps and Describe returns)."""
    return {
        f.name: to_cfg_value(getattr(opts, f.name))
        for f in dataclasses.fields(opts)  # type: ignore[arg-type]
        if getattr(opts, f.name) is not None
    }
