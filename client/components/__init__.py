"""Components: functions that build an AppDef, resolved on the client from command-line args.

A component is a builtin (`utils.echo`, `dist.ddp`, ...; see `builtins()`) or a function in a
Python file (`path/to/file.py:function`). Its parameters become `--name VALUE` options.
"""

from __future__ import annotations

from txd.client.components._finder import builtins, resolve, source
from txd.client.components._mounts import parse_mounts
from txd.client.components._parser import ComponentError, ComponentHelp, ComponentNotFound

__all__ = [
    "ComponentError",
    "ComponentHelp",
    "ComponentNotFound",
    "builtins",
    "parse_mounts",
    "resolve",
    "source",
]
