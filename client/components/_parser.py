"""Turn a component function's signature into command-line arguments and call it.

Each parameter becomes `--name VALUE` (single-letter names also `-x VALUE`); `*args` collects the
positional remainder. Values are decoded from strings according to the annotation, so the set of
supported annotations is deliberately small: str, int, float, bool, `X | None`, and flat
list/dict containers of those.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from txd.v1 import AppDef


class ComponentError(ValueError):
    """A component could not be found, built or called; the message is one line for the user.

    A ValueError so that component functions (and parse_mounts) can reject bad input with either.
    """


class ComponentHelp(Exception):
    """Raised instead of building an AppDef when `--help` was asked for; carries the help text."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


_PRIMITIVES: dict[type, str] = {str: "STR", int: "INT", float: "FLOAT", bool: "BOOL"}
_EXPECTED: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
}
_HELP_OPTION = "--help"


class ArgType(NamedTuple):
    """A supported annotation: a primitive, or a flat list/dict of primitives, maybe optional."""

    container: str  # "", "list" or "dict"
    item: type  # the primitive, list element or dict value type
    key: type | None  # dict key type
    optional: bool

    def metavar(self) -> str:
        if self.container == "list":
            return f"{_PRIMITIVES[self.item]},..."
        if self.container == "dict":
            assert self.key is not None
            return f"{_PRIMITIVES[self.key]}={_PRIMITIVES[self.item]},..."
        return _PRIMITIVES[self.item]

    def parse(self, text: str) -> Any:
        """Decode `text`; raises ValueError with a short reason (the caller names the option)."""
        if self.optional and text == "None":
            return None
        if self.container == "list":
            return [_parse_item(self.item, part.strip()) for part in _split(text)]
        if self.container == "dict":
            assert self.key is not None
            return {
                _parse_item(self.key, k): _parse_item(self.item, v)
                for k, v in _split_pairs(text).items()
            }
        return _parse_primitive(self.item, text)


def _split(text: str) -> list[str]:
    return text.split(",") if text.strip() else []


def _split_pairs(text: str) -> dict[str, str]:
    # A piece without '=' continues the previous value, so "A=x,y,B=z" keeps "x,y" together
    # (env values such as NCCL settings legitimately contain commas).
    out: dict[str, str] = {}
    last: str | None = None
    for piece in _split(text):
        key, sep, value = piece.partition("=")
        if sep and key.strip():
            last = key.strip()
            out[last] = value.strip()
        elif last is None:
            raise ValueError(f"expected KEY=VALUE pairs separated by commas, got {piece!r}")
        else:
            out[last] = f"{out[last]},{piece.strip()}"
    return out


def _parse_primitive(tp: type, text: str) -> Any:
    if tp is bool:
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError("expected true or false")
        return lowered == "true"
    if tp is str:
        return text
    try:
        return tp(text)
    except ValueError:
        raise ValueError(f"expected {_EXPECTED[tp]}") from None


def _parse_item(tp: type, text: str) -> Any:
    # Inside a list or dict, name the piece that failed, not only the whole value.
    try:
        return _parse_primitive(tp, text)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None


def classify(annotation: Any) -> ArgType | None:
    """The ArgType for a (evaluated) annotation, or None when it is not supported."""
    import types
    import typing

    optional = False
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1 or len(args) != 2:
            return None
        optional = True
        annotation = rest[0]
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in _PRIMITIVES:
        return ArgType("", annotation, None, optional)
    if origin is list and len(args) == 1 and args[0] in _PRIMITIVES:
        return ArgType("list", args[0], None, optional)
    if origin is dict and len(args) == 2 and all(a in _PRIMITIVES for a in args):
        return ArgType("dict", args[1], args[0], optional)
    return None


def _annotation_namespace(fn: Callable[..., Any]) -> dict[str, Any]:
    # `from __future__ import annotations` leaves strings; typing names (Optional, List, Dict)
    # are offered as a fallback so a file need not import them just for its annotations.
    import typing

    namespace = {name: getattr(typing, name) for name in typing.__all__ if hasattr(typing, name)}
    namespace.update(getattr(fn, "__globals__", {}))
    return namespace


def evaluate(annotation: Any, namespace: dict[str, Any]) -> Any:
    """Evaluate a string annotation in `namespace`; other annotations are returned unchanged."""
    if isinstance(annotation, str):
        return eval(annotation, namespace)
    return annotation


class Param(NamedTuple):
    name: str
    kind: str  # "positional", "keyword" or "varargs"
    type: ArgType
    has_default: bool
    default: Any
    help: str

    def options(self) -> list[str]:
        names = [f"--{self.name}"]
        if len(self.name) == 1:
            names.insert(0, f"-{self.name}")
        return names


class Component:
    """A component function plus everything needed to call it from command-line strings."""

    def __init__(self, fn: Callable[..., Any], display_name: str) -> None:
        import inspect

        self.fn = fn
        self.name = display_name
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise ComponentError(f"component {display_name}: cannot read signature: {exc}") from exc
        description, arg_help = parse_docstring(inspect.getdoc(fn) or "")
        self.description = description
        namespace = _annotation_namespace(fn)
        self.params: list[Param] = []
        self.varargs: Param | None = None
        for p in signature.parameters.values():
            if p.kind is p.VAR_KEYWORD:
                raise ComponentError(
                    f"component {display_name}: **{p.name} is not supported; declare each "
                    "argument as a parameter"
                )
            if p.annotation is p.empty:
                raise ComponentError(
                    f"component {display_name}: parameter {p.name!r} has no type annotation"
                )
            if p.name == "help":
                raise ComponentError(
                    f"component {display_name}: a parameter cannot be named 'help' (--help is "
                    "reserved)"
                )
            try:
                annotation = evaluate(p.annotation, namespace)
            except Exception as exc:
                raise ComponentError(
                    f"component {display_name}: cannot evaluate annotation {p.annotation!r} of "
                    f"parameter {p.name!r}: {type(exc).__name__}: {exc}"
                ) from exc
            argtype = classify(annotation)
            if argtype is None or (p.kind is p.VAR_POSITIONAL and argtype.container):
                shown = p.annotation if isinstance(p.annotation, str) else _type_repr(annotation)
                allowed = (
                    "str, int, float or bool"
                    if p.kind is p.VAR_POSITIONAL
                    else "str, int, float, bool, X | None, list[X] or dict[X, Y] of those"
                )
                raise ComponentError(
                    f"component {display_name}: parameter {p.name!r} has unsupported annotation "
                    f"{shown!r} (supported: {allowed})"
                )
            kinds: dict[inspect._ParameterKind, str] = {
                p.VAR_POSITIONAL: "varargs",
                p.KEYWORD_ONLY: "keyword",
            }
            kind = kinds.get(p.kind, "positional")
            param = Param(
                name=p.name,
                kind=kind,
                type=argtype,
                has_default=p.default is not p.empty,
                default=None if p.default is p.empty else p.default,
                help=arg_help.get(p.name, ""),
            )
            if kind == "varargs":
                self.varargs = param
            else:
                self.params.append(param)

    # -- parsing -----------------------------------------------------------------------------

    def _lookup(self) -> dict[str, Param]:
        table: dict[str, Param] = {}
        for param in self.params:
            for option in param.options():
                table[option] = param
        return table

    def wants_help(self, args: Sequence[str]) -> bool:
        """Whether `--help` (or `-h` when no parameter is named h) is among the options."""
        # Walk the option part only: `utils.sh -- python --help` must reach python.
        table = self._lookup()
        i = 0
        while i < len(args):
            token = args[i]
            if token == "--" or not token.startswith("-") or token == "-":
                return False
            if token == _HELP_OPTION or (token == "-h" and "-h" not in table):
                return True
            i += 1 if "=" in token or _attached_short(token, table) else 2
        return False

    def parse(self, args: Sequence[str], defaults: Mapping[str, str]) -> dict[str, Any]:
        """Map command-line tokens (plus string defaults) to the function's argument values."""
        import difflib

        table = self._lookup()
        given: dict[str, str] = {}
        rest: list[str] | None = None
        i = 0
        while i < len(args):
            token = args[i]
            if token == "--":
                rest = list(args[i + 1 :])
                break
            if not token.startswith("-") or token == "-":
                rest = list(args[i:])
                break
            option, value = token, None
            if _attached_short(token, table):
                # -j2x1, -j=2x1, and -eA=B (the value itself may contain '=')
                option, value = token[:2], token[2:]
                value = value[1:] if value.startswith("=") else value
            elif "=" in token:
                option, _, value = token.partition("=")
            param = table.get(option)
            if param is None:
                close = difflib.get_close_matches(option, list(table), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                if self.varargs is not None:
                    hint += "; put `--` before arguments meant for the program"
                raise ComponentError(f"unknown argument {option} for component {self.name}{hint}")
            if value is None:
                if i + 1 >= len(args):
                    raise ComponentError(
                        f"argument {option} of component {self.name} expects a value "
                        f"({param.type.metavar()})"
                    )
                value = args[i + 1]
                i += 1
            if param.name in given:
                raise ComponentError(
                    f"argument --{param.name} given more than once for component {self.name}"
                )
            given[param.name] = value
            i += 1

        unknown = sorted(set(defaults) - {p.name for p in self.params} - self._varargs_names())
        if unknown:
            raise ComponentError(
                f"defaults for component {self.name} name unknown argument(s): {', '.join(unknown)}"
            )

        values: dict[str, Any] = {}
        for param in self.params:
            if param.name in given:
                values[param.name] = _decode(param, given[param.name], self.name, "")
            elif param.name in defaults:
                values[param.name] = _decode(
                    param, defaults[param.name], self.name, "configured default "
                )
            elif param.has_default:
                values[param.name] = param.default
            else:
                raise ComponentError(
                    f"missing required argument --{param.name} for component {self.name}"
                )

        if rest and self.varargs is None:
            raise ComponentError(
                f"component {self.name} takes no positional arguments (got {rest[0]!r})"
            )
        if self.varargs is not None:
            if not rest and self.varargs.name in defaults:
                import shlex

                rest = shlex.split(defaults[self.varargs.name])
            items = []
            for item in rest or []:
                try:
                    items.append(self.varargs.type.parse(item))
                except ValueError as exc:
                    raise ComponentError(
                        f"bad positional argument {item!r} for component {self.name}: {exc}"
                    ) from None
            values[self.varargs.name] = items
        return values

    def _varargs_names(self) -> set[str]:
        return {self.varargs.name} if self.varargs is not None else set()

    def call(self, values: Mapping[str, Any]) -> AppDef:
        """Call the function with parsed values and check that it produced an AppDef."""
        positional = [values[p.name] for p in self.params if p.kind == "positional"]
        keyword = {p.name: values[p.name] for p in self.params if p.kind == "keyword"}
        varargs = values[self.varargs.name] if self.varargs is not None else []
        try:
            app = self.fn(*positional, *varargs, **keyword)
        except ValueError as exc:  # how components (and parse_mounts) reject their input
            raise ComponentError(f"component {self.name}: {exc}") from exc
        if not isinstance(app, AppDef):
            raise ComponentError(
                f"component {self.name} returned {type(app).__name__}, expected an AppDef"
            )
        return app

    # -- help --------------------------------------------------------------------------------

    def help(self, prog: str, defaults: Mapping[str, str]) -> str:
        import textwrap

        usage = [f"usage: {prog} {self.name}"]
        rows: list[tuple[str, str]] = []
        for param in self.params:
            meta = param.type.metavar()
            flag = f"--{param.name} {meta}"
            usage.append(flag if _is_required(param, defaults) else f"[{flag}]")
            left = ", ".join(f"{o} {meta}" for o in param.options())
            rows.append((left, _with_default(param, defaults)))
        if self.varargs is not None:
            usage.append(f"[{self.varargs.name} ...]")
            rows.append((f"{self.varargs.name} ...", _with_default(self.varargs, defaults)))

        lines = textwrap.wrap(
            " ".join(usage), width=100, subsequent_indent=" " * 8, break_on_hyphens=False
        )
        if self.description:
            lines += ["", self.description]
        if rows:
            lines += ["", "arguments:"]
            col = min(max(len(left) for left, _ in rows) + 4, 32)
            for left, text in rows:
                wrapped = textwrap.wrap(text, width=100 - col) or [""]
                if len(left) + 4 > col:
                    lines.append(f"  {left}")
                    lines += [" " * col + w for w in wrapped]
                else:
                    lines.append(f"  {left.ljust(col - 2)}{wrapped[0]}")
                    lines += [" " * col + w for w in wrapped[1:]]
        return "\n".join(lines) + "\n"


def _attached_short(token: str, table: Mapping[str, Param]) -> bool:
    """`-j2x1`: a known single-letter option with its value glued on."""
    return not token.startswith("--") and len(token) > 2 and token[:2] in table


def _decode(param: Param, text: str, component: str, source: str) -> Any:
    try:
        return param.type.parse(text)
    except ValueError as exc:
        raise ComponentError(
            f"bad {source}value {text!r} for --{param.name} of component {component}: {exc}"
        ) from None


def _is_required(param: Param, defaults: Mapping[str, str]) -> bool:
    return not param.has_default and param.name not in defaults


def _with_default(param: Param, defaults: Mapping[str, str]) -> str:
    text = param.help.strip()
    if param.name in defaults:
        suffix = f"(default: {_show(defaults[param.name])}, from config)"
    elif param.kind == "varargs":
        return text
    elif param.has_default:
        suffix = f"(default: {_show(param.default)})"
    else:
        suffix = "(required)"
    return f"{text} {suffix}" if text else suffix


def _show(value: Any) -> str:
    if value == "" and isinstance(value, str):
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _type_repr(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or repr(annotation)


# -- docstrings --------------------------------------------------------------------------------

_ARG_SECTIONS = {"args", "arguments", "parameters", "params"}
_DROPPED_SECTIONS = _ARG_SECTIONS | {"returns", "return", "raises", "yields", "yield"}


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a cleaned Google-style docstring into (description, {argument: help}).

    The description keeps everything except the Args/Returns/Raises/Yields sections.
    """
    description: list[str] = []
    arg_help: dict[str, list[str]] = {}
    section: str | None = None
    current: str | None = None
    entry_indent = 0
    for line in doc.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = stripped[:-1].lower() if stripped.endswith(":") and indent == 0 else None
        if header is not None and header in _DROPPED_SECTIONS:
            section, current = header, None
            continue
        if section is not None and stripped and indent == 0:
            section = None  # unindented text ends a section
        if section is None:
            description.append(line)
        elif section in _ARG_SECTIONS and stripped:
            if current is None or indent <= entry_indent:
                head, sep, text = stripped.partition(":")
                name = head.split("(")[0].strip().lstrip("*")
                if sep and name.isidentifier():
                    current, entry_indent = name, indent
                    arg_help[current] = [text.strip()]
                    continue
            if current is not None:
                arg_help[current].append(stripped)
    text = "\n".join(description).strip()
    return text, {name: " ".join(p for p in parts if p) for name, parts in arg_help.items()}
