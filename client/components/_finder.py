"""Find a component function (builtin name or `path/to/file.py:function`) and materialize it."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from txd import install
from txd.client.components._parser import Component, ComponentError, ComponentNotFound, evaluate
from txd.v1 import AppDef

# Builtins are the public AppDef-returning functions of these sibling modules.
_BUILTIN_MODULES = ("dist", "metrics", "serve", "utils")
_builtin_cache: dict[str, Callable[..., Any]] | None = None
_FILE_MODULE = "_txd_component_"  # the name prefix of modules made from component files


def _builtin_functions() -> dict[str, Callable[..., Any]]:
    global _builtin_cache
    if _builtin_cache is None:
        import importlib
        import types

        found: dict[str, Callable[..., Any]] = {}
        for short in _BUILTIN_MODULES:
            module = importlib.import_module(f"{__package__}.{short}")
            for attr, obj in vars(module).items():
                if (
                    not attr.startswith("_")
                    and isinstance(obj, types.FunctionType)
                    and obj.__module__ == module.__name__
                    and _returns_appdef(obj)
                ):
                    found[f"{short}.{attr}"] = obj
        _builtin_cache = found
    return _builtin_cache


def _returns_appdef(fn: Callable[..., Any]) -> bool:
    annotation = getattr(fn, "__annotations__", {}).get("return")
    try:
        return evaluate(annotation, dict(fn.__globals__)) is AppDef
    except Exception:
        return False


def builtins() -> list[str]:
    """Sorted names (`<module>.<function>`) of the builtin components."""
    return sorted(_builtin_functions())


def source(name: str) -> str:
    """The source of builtin `name` as `torchx builtins --print` shows TorchX's: its module's
    import lines, then the function. Raises ComponentNotFound for a name that is no builtin."""
    import inspect

    fn = _builtin_functions().get(name)
    if fn is None:
        raise _unknown(name, "builtin")
    lines = inspect.getsource(inspect.getmodule(fn)).splitlines()  # type: ignore[arg-type]
    imports = [line for line in lines if line.startswith(("import ", "from "))]
    return "\n".join(imports) + "\n\n\n" + inspect.getsource(fn).rstrip("\n")


def resolve(
    spec: str,
    args: list[str],
    *,
    defaults: Mapping[str, str] | None = None,
    prog: str = "txctl run",
) -> AppDef:
    """Build the AppDef of component `spec` from its command-line `args`.

    `spec` is a builtin name (`utils.echo`) or `path/to/file.py:function` (relative to the cwd or
    absolute). `defaults` (string values, e.g. from a `[component:NAME]` config section) replace
    the function's declared defaults. Raises ComponentError for anything the user got wrong and
    ComponentHelp when `--help` is among the component's options.
    """
    fn = _find(spec)
    component = Component(fn, spec)
    values = component.parse(args, dict(defaults or {}), prog)
    # A component from a file is the user's code: its errors say where in it they were raised.
    code = getattr(fn, "__code__", None)
    from_file = getattr(fn, "__module__", "").startswith(_FILE_MODULE)
    user_file = code.co_filename if code is not None and from_file else ""
    try:
        return component.call(values)
    except ComponentError as e:
        if (where := _raised_at(e.__cause__, user_file)) is None:
            raise
        raise ComponentError(f"{e} ({where})") from e.__cause__
    except Exception as e:  # the component's own bug or refusal: the user's error, not txctl's
        at = f" ({where})" if (where := _raised_at(e, user_file)) else ""
        raise ComponentError(f"component {spec} raised {type(e).__name__}: {e}{at}") from e


def _raised_at(exc: BaseException | None, filename: str) -> str | None:
    """`at FILE:LINE` of the innermost frame of exc's traceback in filename, or None."""
    if exc is None or not filename:
        return None
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    return f"at {filename}:{frames[-1].lineno}" if frames else None


def _find(spec: str) -> Callable[..., Any]:
    path, sep, function = spec.rpartition(":")
    if sep and (path.endswith(".py") or "/" in path or os.sep in path):
        if not function:
            raise ComponentError(f"missing function name in {spec!r} (expected FILE.py:FUNCTION)")
        return _from_file(path, function)
    if spec.endswith(".py"):
        raise ComponentError(f"missing function name in {spec!r} (expected {spec}:FUNCTION)")
    fn = _builtin_functions().get(spec)
    if fn is None:
        raise _unknown(spec, "component", "; or use path/to/file.py:function")
    return fn


def _unknown(name: str, what: str, more: str = "") -> ComponentNotFound:
    import difflib

    table = sorted(_builtin_functions())
    close = difflib.get_close_matches(name, table, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return ComponentNotFound(f"unknown {what} {name!r}{hint} (builtins: {', '.join(table)}{more})")


def _from_file(path: str, function: str) -> Callable[..., Any]:
    import types

    full = os.path.abspath(os.path.expanduser(path))
    try:
        with open(full, "rb") as f:
            source = f.read()
    except FileNotFoundError:
        raise ComponentNotFound(f"component file not found: {path}") from None
    except OSError as exc:
        raise ComponentError(f"cannot read component file {path}: {exc.strerror}") from None

    # Executed like a script (no bytecode cache written next to the user's file) but registered
    # as a module, so dataclasses/typing in the file can find it through sys.modules.
    stem = "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(full))[0])
    module = types.ModuleType(f"{_FILE_MODULE}{stem}")
    module.__file__ = full
    try:
        code = compile(source, full, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ComponentError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    sys.modules[module.__name__] = module
    try:
        exec(code, module.__dict__)
    except ModuleNotFoundError as exc:
        if exc.name == "torchx" or (exc.name or "").startswith("torchx."):
            raise ComponentError(
                f"{path} is a TorchX component: install torchx into the Python that runs txctl "
                f"with txd's torchx extra ({install.command('torchx')})"
            ) from None
        raise ComponentError(
            f"failed to load component file {path}: {type(exc).__name__}: {exc}"
        ) from exc
    except Exception as exc:
        at = f" ({where})" if (where := _raised_at(exc, full)) else ""
        raise ComponentError(
            f"failed to load component file {path}: {type(exc).__name__}: {exc}{at}"
        ) from exc

    fn = module.__dict__.get(function)
    if fn is None:
        import difflib

        candidates = [
            name
            for name, obj in module.__dict__.items()
            if callable(obj) and not name.startswith("_") and not isinstance(obj, type)
        ]
        close = difflib.get_close_matches(function, candidates, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ComponentNotFound(f"function {function!r} not found in {path}{hint}")
    if not callable(fn) or isinstance(fn, type):
        raise ComponentError(f"{function!r} in {path} is not a function")
    return fn
