"""`.txdconfig` / `.torchxconfig`: INI defaults for schedulers, components and CLI flags.

Sections: `[<scheduler>]` (run config, raw strings), `[component:<name>]` (component argument
defaults) and `[cli:<subcommand>]` (CLI flag defaults, e.g. `scheduler` and `component` for run).
Files: `$TXDCONFIG` alone when set; otherwise, in $HOME and then the cwd, `.txdconfig` or (when
absent) `.torchxconfig`. Later files win key by key, so the cwd beats $HOME; CLI values beat both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

FILE_NAMES = (".txdconfig", ".torchxconfig")
ENV_VAR = "TXDCONFIG"


class ConfigError(Exception):
    """A config file is missing (when named by $TXDCONFIG) or cannot be parsed."""


@dataclass
class Config:
    """Merged config: `sections[section][key]` holds the winning raw string."""

    sections: dict[str, dict[str, str]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)  # loaded files, lowest precedence first
    # Where each winning value was written: `sources[section][key]` is "FILE:LINE".
    sources: dict[str, dict[str, str]] = field(default_factory=dict)

    def scheduler_cfg(self, scheduler: str) -> dict[str, str]:
        """The `[<scheduler>]` section: run-config values as raw strings. `key = None` (what
        `torchx configure --all` writes for an option without a default) means unset."""
        return {k: v for k, v in self.sections.get(scheduler, {}).items() if v.strip() != "None"}

    def scheduler_cfg_sources(self, scheduler: str) -> dict[str, str]:
        """Each `[<scheduler>]` value as an error message names it:
        `~/.txdconfig:3: [local_cwd] bogus = 1`."""
        where = self.sources.get(scheduler, {})
        return {
            key: f"{where.get(key, '?')}: [{scheduler}] {key} = {value}"
            for key, value in self.sections.get(scheduler, {}).items()
        }

    def component_defaults(self, name: str) -> dict[str, str]:
        """The `[component:<name>]` section: argument defaults for component `name`."""
        return dict(self.sections.get(f"component:{name}", {}))

    def cli_default(self, subcmd: str, key: str) -> str | None:
        """`key` of the `[cli:<subcmd>]` section, or None when not configured."""
        return self.sections.get(f"cli:{subcmd}", {}).get(key)


def config_files(
    cwd: str | None = None, home: str | None = None, environ: Mapping[str, str] | None = None
) -> list[str]:
    """The config files to load, lowest precedence first."""
    env = os.environ if environ is None else environ
    explicit = env.get(ENV_VAR)
    if explicit:
        if not os.path.isfile(explicit):
            raise ConfigError(f"{ENV_VAR} names {explicit}, which is not a file")
        return [explicit]
    home = os.path.expanduser("~") if home is None else home
    cwd = os.getcwd() if cwd is None else cwd
    files: list[str] = []
    for directory in (home, cwd):
        for name in FILE_NAMES:
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                # The same directory twice (cwd == $HOME) must not be listed twice.
                if not any(os.path.samefile(path, seen) for seen in files):
                    files.append(path)
                break
    return files


def load_config(
    cwd: str | None = None, home: str | None = None, environ: Mapping[str, str] | None = None
) -> Config:
    """Load and merge the config files (see the module docstring for which and in what order)."""
    config = Config()
    for path in config_files(cwd, home, environ):
        lines = _key_lines(path)
        shown = _shown(path)
        for section, values in _read(path).items():
            name = _section_name(section)
            if name is not None:
                config.sections.setdefault(name, {}).update(values)
                where = config.sources.setdefault(name, {})
                for key in values:
                    where[key] = f"{shown}:{lines.get((section, key), '?')}"
        config.files.append(path)
    return config


def _shown(path: str) -> str:
    """path as a person would type it: under $HOME as ~/..."""
    home = os.path.expanduser("~")
    full = os.path.abspath(path)
    return "~" + full[len(home) :] if full.startswith(home + os.sep) else path


def _key_lines(path: str) -> dict[tuple[str, str], int]:
    """(section, key) -> the line number where the key is set (configparser keeps none).
    Read after configparser accepted the file, so its syntax is known to be right."""
    import re

    out: dict[tuple[str, str], int] = {}
    section = ""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return out
    for n, line in enumerate(text, 1):
        if m := re.match(r"\[(.*)\]\s*$", line.strip()):
            section = m[1]
        elif (m := re.match(r"([^\s=:#;][^=:]*?)\s*[=:]", line)) is not None:
            out.setdefault((section, m[1].strip()), n)
    return out


def _section_name(section: str) -> str | None:
    """Normalized section name, or None for malformed ones such as `[component:]`."""
    prefix, sep, rest = section.partition(":")
    prefix, rest = prefix.strip(), rest.strip()
    if not sep:
        return prefix or None
    if not prefix or not rest:
        return None
    return f"{prefix}:{rest}"


def _read(path: str) -> dict[str, dict[str, str]]:
    import configparser

    # No interpolation: values such as slurm times or URLs may contain '%'. No DEFAULT section
    # either: its keys would silently appear in every section.
    parser = configparser.ConfigParser(
        interpolation=None, default_section="\0no-default", strict=True
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # case-sensitive keys
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f, source=path)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read config file {path}: not UTF-8 ({exc.reason})") from None
    except configparser.Error as exc:
        raise ConfigError(_describe(path, exc)) from None
    return {section: dict(parser.items(section, raw=True)) for section in parser.sections()}


def _describe(path: str, exc: Exception) -> str:
    import configparser

    if isinstance(exc, configparser.MissingSectionHeaderError):
        return f"{path}:{exc.lineno}: expected a [section] header before {exc.line.strip()!r}"
    if isinstance(exc, configparser.ParsingError):
        lineno = exc.errors[0][0]  # the error's copy of the line is repr()-ed; re-read it
        return f"{path}:{lineno}: cannot parse {_line(path, lineno)!r} (expected KEY = VALUE)"
    if isinstance(exc, configparser.DuplicateSectionError):
        return f"{path}:{exc.lineno}: section [{exc.section}] appears twice"
    if isinstance(exc, configparser.DuplicateOptionError):
        return f"{path}:{exc.lineno}: key {exc.option!r} appears twice in [{exc.section}]"
    return f"{path}: {exc}"


def _line(path: str, lineno: int) -> str:
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
