"""Turn a component function's signature into an argparse parser, and call the function.

As TorchX does, each component gets an argparse parser built from its signature: every
parameter is an option `--name VALUE` (single-letter names also `-x VALUE`), and `*args` takes
the trailing arguments (argparse.REMAINDER: everything from the first positional argument, or
after `--`). Argument help comes from the docstring (Google, NumPy or reST style, read by
docstring-parser). Values are decoded from strings according to the annotation, after parsing
(so `--help` wins over a bad value), and the set of supported annotations is deliberately
small: str, int, float, bool, `X | None`, and flat list/dict containers of those.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, NoReturn

from txd.v1 import AppDef


class ComponentError(ValueError):
    """A component could not be found, built or called; the message is one line for the user.

    A ValueError so that component functions (and parse_mounts) can reject bad input with either.
    """


class ComponentNotFound(ComponentError):
    """No such component: no builtin of that name, no such file, or no such function in it."""


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


# As TorchX's to_dict: `,` or `;` starts a new pair only where a `KEY=` follows, so
# "A=1;B=2" is two pairs while "A=x,y" and "A=x;y" keep their list values (env values such as
# NCCL settings legitimately contain commas); a value's own `=` stays in it ("A=k=v"). A value
# written '' or "" is empty, as TorchX's to_dict documents (`--env FOO=''`).
_PAIR_SEP = re.compile(r"[,;](?=\s*[A-Za-z_][\w.-]*=)")
_EMPTY_QUOTES = ("''", '""')


def _split_pairs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if not text.strip():
        return out
    for piece in _PAIR_SEP.split(text):
        key, sep, value = piece.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected KEY=VALUE pairs separated by , or ;, got {piece!r}")
        value = value.strip()
        out[key.strip()] = "" if value in _EMPTY_QUOTES else value
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


class Docs:
    """A component's docstring, parsed only when its text is wanted (--help): docstring-parser
    and the regular expressions it compiles cost `txctl run` about 15 ms."""

    def __init__(self, doc: str) -> None:
        self.doc = doc
        self._parsed: tuple[str, dict[str, str]] | None = None

    def parsed(self) -> tuple[str, dict[str, str]]:
        """(description, {argument: help}), as parse_docstring gives them."""
        if self._parsed is None:
            self._parsed = parse_docstring(self.doc)
        return self._parsed


class Param(NamedTuple):
    name: str
    kind: str  # "positional", "keyword" or "varargs"
    type: ArgType
    has_default: bool
    default: Any
    docs: Docs  # the component's

    @property
    def help(self) -> str:
        return self.docs.parsed()[1].get(self.name, "")

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
        self.docs = Docs(inspect.getdoc(fn) or "")
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
                docs=self.docs,
            )
            if kind == "varargs":
                self.varargs = param
            else:
                self.params.append(param)

    @property
    def description(self) -> str:
        return self.docs.parsed()[0]

    # -- parsing -----------------------------------------------------------------------------

    def parser(
        self, prog: str, defaults: Mapping[str, str], *, texts: bool = True
    ) -> argparse.ArgumentParser:
        """The component's argparse parser. Every value is kept as the string given (decoded
        by parse()); `--help` (and `-h`, unless a parameter is named h) raises ComponentHelp.
        Without `texts`, no description or argument help (no docstring is parsed); its --help
        builds the parser with them to show."""
        parser = _Parser(
            self.name,
            prog=f"{prog} {self.name}",
            description=(self.description or None) if texts else None,
            formatter_class=_HelpFormatter,
            add_help=False,  # -h may be a component's own option (a named resource, often)
            allow_abbrev=False,  # `--nam` is a typo, not --name
            exit_on_error=False,
        )
        names = {option for param in self.params for option in param.options()}
        help_options = ["--help"] if "-h" in names else ["-h", "--help"]
        parser.add_argument(
            *help_options,
            action=_Help,
            help=argparse.SUPPRESS,
            show=lambda: self.parser(prog, defaults).format_help(),
        )
        for param in self.params:
            parser.add_argument(
                *param.options(),
                dest=param.name,
                action=_StoreOnce,
                metavar=param.type.metavar(),
                required=not param.has_default and param.name not in defaults,
                default=None,
                help=_help_text(param, defaults).replace("%", "%%") if texts else None,
            )
        if self.varargs is not None:
            parser.add_argument(
                self.varargs.name,
                nargs=argparse.REMAINDER,
                help=_help_text(self.varargs, defaults).replace("%", "%%") if texts else None,
            )
        return parser

    def parse(
        self, args: Sequence[str], defaults: Mapping[str, str], prog: str = "txctl run"
    ) -> dict[str, Any]:
        """Map command-line tokens (plus string defaults, e.g. from a config file, which
        replace the declared ones) to the function's argument values. Raises ComponentHelp
        when `--help` is among the options, ComponentError for anything wrong."""
        parser = self.parser(prog, defaults, texts=False)
        try:
            given, extra = parser.parse_known_args(list(args))
        except argparse.ArgumentError as exc:
            if exc.argument_name is None:  # Python >= 3.12 raises some errors this way
                parser.error(exc.message)
            raise ComponentError(
                f"argument {exc.argument_name} of component {self.name}: {exc.message}"
            ) from None
        if extra:
            # REMAINDER takes everything from the first positional on, so what is left over
            # is an unknown option, or a positional argument of a component without *args.
            if not extra[0].startswith("-"):
                raise ComponentError(
                    f"component {self.name} takes no positional arguments (got {extra[0]!r})"
                )
            import difflib  # for this error only

            option = extra[0].partition("=")[0]
            known = [o for p in self.params for o in p.options()]
            close = difflib.get_close_matches(option, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            if self.varargs is not None:
                hint += "; put `--` before arguments meant for the program"
            raise ComponentError(f"unknown argument {option} for component {self.name}{hint}")

        unknown = sorted(set(defaults) - {p.name for p in self.params} - self._varargs_names())
        if unknown:
            raise ComponentError(
                f"defaults for component {self.name} name unknown argument(s): {', '.join(unknown)}"
            )

        values: dict[str, Any] = {}
        for param in self.params:
            text = getattr(given, param.name)
            if text is not None:
                values[param.name] = _decode(param, text, self.name, "")
            elif param.name in defaults:
                values[param.name] = _decode(
                    param, defaults[param.name], self.name, "configured default "
                )
            else:  # argparse saw to it that a required one was given
                values[param.name] = param.default
        if self.varargs is not None:
            rest = list(getattr(given, self.varargs.name) or [])
            if rest[:1] == ["--"]:  # argparse keeps the `--` that starts a REMAINDER
                rest = rest[1:]
            if not rest and self.varargs.name in defaults:
                import shlex

                rest = shlex.split(defaults[self.varargs.name])
            items = []
            for item in rest:
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
        if isinstance(app, AppDef):
            return app
        from txd.client.torchx_compat import TorchXError, from_torchx, is_torchx

        if not is_torchx(app):
            raise ComponentError(
                f"component {self.name} returned {type(app).__name__}, expected an AppDef"
            )
        try:  # a TorchX component's specs.AppDef
            return from_torchx(app)
        except TorchXError as exc:
            raise ComponentError(f"component {self.name}: {exc}") from None


class _Parser(argparse.ArgumentParser):
    """argparse that raises ComponentError (one line) instead of printing usage and exiting."""

    def __init__(self, component: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.component = component

    def error(self, message: str) -> NoReturn:
        required = "the following arguments are required: "
        if message.startswith(required):
            names = message[len(required) :]
            plural = "s" if "," in names else ""
            raise ComponentError(
                f"missing required argument{plural} {names} for component {self.component}"
            )
        raise ComponentError(f"component {self.component}: {message}")


class _Help(argparse.Action):
    """Raises ComponentHelp with the text `show` makes: the help of the parser with its texts
    (the one parsing may have none)."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, show: Callable[[], str], **kwargs: Any
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)
        self.show = show

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        raise ComponentHelp(self.show())


class _StoreOnce(argparse.Action):
    """Stores the value; a second one for the same parameter is an error (not "last wins")."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, self.dest) is not None:
            raise argparse.ArgumentError(self, "given more than once")
        setattr(namespace, self.dest, values)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the docstring's paragraphs, and shows *args in the usage as `[NAME ...]`."""

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        if action.nargs == argparse.REMAINDER:
            return f"[{self._metavar_formatter(action, default_metavar)(1)[0]} ...]"
        return super()._format_args(action, default_metavar)


def _decode(param: Param, text: str, component: str, source: str) -> Any:
    try:
        return param.type.parse(text)
    except ValueError as exc:
        raise ComponentError(
            f"bad {source}value {text!r} for --{param.name} of component {component}: {exc}"
        ) from None


def _help_text(param: Param, defaults: Mapping[str, str]) -> str:
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


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a cleaned docstring (Google, NumPy or reST style, told apart by docstring-parser,
    which reads anything it cannot place as description) into (description, {argument: help}),
    each help on one line."""
    import docstring_parser

    parsed = docstring_parser.parse(doc)
    arg_help = {
        p.arg_name.lstrip("*"): " ".join((p.description or "").split()) for p in parsed.params
    }
    return (parsed.description or "").strip(), arg_help
