"""Remote daemons by address: `ssh://[user@]host[:port]` URLs and the saved endpoints.

Which daemon a client reaches: `--host` (txctl) or `host=` (the Python client), else
$TXD_HOST, else the endpoint chosen with `txctl host use NAME`, else the local daemon. Each
is a URL or the name of a saved endpoint; `local` names the local daemon. Saved endpoints live
in $XDG_CONFIG_HOME/txd/hosts.toml (~/.config/txd/hosts.toml):

    current = "cluster"
    [hosts.cluster]
    url = "ssh://me@login1"
    command = "~/venv/bin/txctl"     # the remote txctl (default: txctl, or $TXD_REMOTE_COMMAND)
    socket = ""                      # the remote daemon's socket (default: its own default)
    idle = 600                       # seconds the tunnel stays up unused

Standard library only: txctl imports this only when a remote host is in play.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

HOST_ENV = "TXD_HOST"
REMOTE_COMMAND_ENV = "TXD_REMOTE_COMMAND"
SSH_COMMAND_ENV = "TXD_SSH_COMMAND"
IDLE_ENV = "TXD_TUNNEL_IDLE"
DEFAULT_COMMAND = "txctl"
DEFAULT_IDLE = 600.0  # seconds: ten minutes without a connection, then the tunnel exits
LOCAL = "local"
_URL = re.compile(
    r"^ssh://(?:(?P<user>[^@/:\s]+)@)?(?P<host>[^@/:\s\[\]]+|\[[0-9a-fA-F:]+\])(?::(?P<port>\d{1,5}))?/?$"
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class EndpointError(Exception):
    """A bad URL, an unknown endpoint name, an unreadable hosts.toml: one line for the user."""


@dataclass(frozen=True)
class Endpoint:
    url: str
    host: str
    user: str = ""
    port: int = 0
    command: str = DEFAULT_COMMAND
    socket: str = ""  # the remote daemon's socket; "" for the remote txctl's default
    idle: float = DEFAULT_IDLE
    ssh: tuple[str, ...] = ("ssh",)
    name: str = ""  # the saved endpoint's name, if it is one

    def ssh_target(self) -> list[str]:
        """ssh's arguments that name the server: [-l USER] [-p PORT] HOST."""
        out = ["-l", self.user] if self.user else []
        if self.port:
            out += ["-p", str(self.port)]
        return [*out, self.host.strip("[]")]

    def remote(self, subcommand: str) -> str:
        """The shell command run on the host: the remote txctl's `subcommand`."""
        extra = f" --socket {shlex.quote(self.socket)}" if self.socket else ""
        return f"{self.command}{extra} {subcommand}"

    def label(self) -> str:
        return f"{self.name} ({self.url})" if self.name else self.url


def parse_url(url: str) -> Endpoint:
    m = _URL.match(url.strip())
    if not m:
        raise EndpointError(
            f"bad host {url!r}: expected ssh://[USER@]HOST[:PORT] or a saved endpoint's name "
            "(see `txctl host list`)"
        )
    port = int(m["port"] or 0)
    if port > 65535:
        raise EndpointError(f"bad host {url!r}: port {port} is over 65535")
    return Endpoint(url=url.strip(), host=m["host"], user=m["user"] or "", port=port)


def hosts_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "txd" / "hosts.toml"


def load_hosts() -> dict[str, Any]:
    """hosts.toml as {"current": str, "hosts": {name: {...}}} (empty when absent)."""
    path = hosts_file()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {"current": "", "hosts": {}}
    except OSError as e:
        raise EndpointError(f"cannot read {path}: {e.strerror}") from None
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise EndpointError(f"{path}: {e}") from None
    hosts = data.get("hosts", {})
    if not isinstance(hosts, dict) or not all(isinstance(v, dict) for v in hosts.values()):
        raise EndpointError(f"{path}: [hosts.NAME] tables expected")
    return {"current": str(data.get("current", "")), "hosts": hosts}


def save_hosts(data: dict[str, Any]) -> Path:
    """Writes hosts.toml (0600, replaced atomically)."""
    path = hosts_file()
    lines = [f"current = {json.dumps(data.get('current', ''))}\n"]
    for name, fields in sorted(data["hosts"].items()):
        lines.append(f"\n[hosts.{json.dumps(name)}]\n")
        for key, value in fields.items():
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                continue
            lines.append(f"{key} = {json.dumps(value)}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(lines))
    os.replace(tmp, path)
    return path


def check_name(name: str) -> str:
    if not _NAME.match(name) or name == LOCAL:
        raise EndpointError(
            f"bad endpoint name {name!r}: letters, digits, '.', '_' and '-' (up to 64), "
            f"and not {LOCAL!r}"
        )
    return name


def _from_saved(name: str, fields: dict[str, Any]) -> Endpoint:
    url = fields.get("url")
    if not isinstance(url, str):
        raise EndpointError(f"{hosts_file()}: [hosts.{name}] has no url")
    ep = parse_url(url)
    try:
        idle = float(fields.get("idle", DEFAULT_IDLE))
    except (TypeError, ValueError):
        raise EndpointError(f"{hosts_file()}: [hosts.{name}] idle must be seconds") from None
    return replace(
        ep,
        name=name,
        command=str(fields.get("command") or DEFAULT_COMMAND),
        socket=str(fields.get("socket") or ""),
        idle=idle,
    )


def resolve(
    explicit: str | None = None,
    *,
    command: str | None = None,
    idle: float | None = None,
    environ: dict[str, str] | None = None,
) -> Endpoint | None:
    """The endpoint to reach (see the module's docstring), or None for the local daemon.
    `command` and `idle` (flags) win over $TXD_REMOTE_COMMAND, $TXD_TUNNEL_IDLE and the
    endpoint's own; $TXD_SSH_COMMAND is the ssh command (default `ssh`)."""
    env = os.environ if environ is None else environ
    chosen = explicit or env.get(HOST_ENV) or ""
    saved: dict[str, Any] | None = None
    if not chosen:
        saved = load_hosts()
        chosen = saved["current"]
    if not chosen or chosen == LOCAL:
        return None
    if "://" in chosen:
        ep = parse_url(chosen)
    else:
        saved = saved or load_hosts()
        fields = saved["hosts"].get(chosen)
        if fields is None:
            known = ", ".join(sorted(saved["hosts"])) or "none saved"
            raise EndpointError(
                f"unknown host {chosen!r}: not an ssh:// URL nor a saved endpoint ({known}; "
                "see `txctl host add`)"
            )
        ep = _from_saved(chosen, fields)
    if command or env.get(REMOTE_COMMAND_ENV):
        ep = replace(ep, command=command or env[REMOTE_COMMAND_ENV])
    if idle is None and env.get(IDLE_ENV):
        try:
            idle = float(env[IDLE_ENV])
        except ValueError:
            raise EndpointError(f"bad {IDLE_ENV} {env[IDLE_ENV]!r}: expected seconds") from None
    if idle is not None:
        ep = replace(ep, idle=idle)
    ssh = tuple(shlex.split(env.get(SSH_COMMAND_ENV, ""))) or ("ssh",)
    return replace(ep, ssh=ssh)
