"""The daemon's settings per scheduler: `[schedulers.<name>]` sections of a TOML file, with
`--set NAME.KEY=VALUE` flags over them (`events.KEY` sets the [events] table, the events
stream's). Each section is checked against the scheduler's
`Settings` dataclass when the scheduler is built (at daemon start for every configured one)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

CONFIG_ENV = "TXD_CONFIG"
# The daemon's events settings (daemon.events.EventSettings): the config file's [events]
# table, or `--set events.KEY=VALUE`; kept apart from the schedulers' sections.
EVENTS = "events"
# The metrics' opt-in exposition (daemon.metrics.MetricsSettings): the [metrics] table, or
# `--set metrics.KEY=VALUE`.
METRICS = "metrics"


class ConfigError(Exception):
    """The config file or a --set flag is malformed; the message names where."""


def default_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "txd" / "txd.toml"


def load(path: str | None, sets: list[str]) -> dict[str, dict[str, Any]]:
    """Settings by scheduler name. `path` None: $TXD_CONFIG, else the default file if it
    exists. A file named explicitly must exist."""
    explicit = path or os.environ.get(CONFIG_ENV)
    file = Path(explicit) if explicit else default_path()
    out: dict[str, dict[str, Any]] = {}
    if explicit or file.exists():
        out = _read(file)
    for item in sets:
        key, sep, value = item.partition("=")
        name, dot, setting = key.partition(".")
        if not sep or not dot or not name or not setting:
            raise ConfigError(
                f"--set {item!r}: expected SCHEDULER.KEY=VALUE, e.g. slurm.poll_interval=2"
            )
        out.setdefault(name, {})[setting] = value
    return out


def _read(file: Path) -> dict[str, dict[str, Any]]:
    try:
        data = tomllib.loads(file.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read the config file {file}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{file}: {e}") from None
    unknown = set(data) - {"schedulers", EVENTS, METRICS}
    if unknown:
        raise ConfigError(
            f"{file}: unknown table(s) {', '.join(sorted(unknown))} "
            "(known: schedulers, events, metrics)"
        )
    sections = data.get("schedulers", {})
    if not isinstance(sections, dict) or not all(isinstance(v, dict) for v in sections.values()):
        raise ConfigError(
            f"{file}: [schedulers] must hold one table per scheduler, e.g. [schedulers.slurm]"
        )
    out = {name: dict(values) for name, values in sections.items()}
    events = data.get(EVENTS, {})
    if not isinstance(events, dict):
        raise ConfigError(f"{file}: [events] must be a table, e.g. retention = 604800")
    if events:
        out[EVENTS] = dict(events)
    metrics = data.get(METRICS, {})
    if not isinstance(metrics, dict):
        raise ConfigError(f'{file}: [metrics] must be a table, e.g. textfile = "/path/txd.prom"')
    if metrics:
        out[METRICS] = dict(metrics)
    return out
