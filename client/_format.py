"""How txctl prints things: text for people, JSON (states by name) for programs."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf.message import Message
from txd.v1 import AppState, OptType
from txd.v1.app_pb2 import AppDef, AppStatus
from txd.v1.scheduler_pb2 import RunOpt, SchedulerInfo


def to_dict(msg: Message) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict  # only --json needs it

    return MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False)


def state_name(state: int) -> str:
    return AppState.Name(state)


def _when(ts: Any) -> str:
    if not ts.seconds:
        return "-"
    return ts.ToDatetime(dt.UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def event_line(event: Any) -> str:
    """An Events response on one line: cursor, kind, then (for a job's) time, handle, state
    and message; for a GAP, how many events were removed there."""
    from txd.v1.runner_pb2 import EventsResponse

    known = event.kind in EventsResponse.Kind.values()  # a newer daemon's kind: its number
    kind = EventsResponse.Kind.Name(event.kind) if known else str(event.kind)
    if event.kind == EventsResponse.GAP:
        return f"{event.cursor}  {kind}  {event.removed} events removed here with their jobs"
    if not event.HasField("status"):
        return f"{event.cursor}  {kind}"
    st = event.status
    when = _when(event.time) if event.HasField("time") else "-"
    msg = " ".join(st.msg.split())
    return f"{event.cursor}  {kind}  {when}  {st.app_handle}  {state_name(st.state)}" + (
        f"  {msg}" if msg else ""
    )


def status_text(status: AppStatus) -> str:
    lines = [
        f"{status.app_handle}",
        f"  state:    {state_name(status.state)}",
        f"  name:     {status.name}",
        f"  created:  {_when(status.created)}",
        f"  updated:  {_when(status.updated)}",
    ]
    if status.stale_msg:
        lines.append(f"  STALE:    {status.stale_msg}")
    if status.num_restarts:
        lines.append(f"  restarts: {status.num_restarts}")
    if status.msg:
        lines.append(f"  msg:      {status.msg}")
    if status.ui_url:
        lines.append(f"  url:      {status.ui_url}")
    if status.roles:
        lines.append("  replicas:")
        for role in status.roles:
            for r in sorted(role.replicas, key=lambda r: r.id):
                extra = f" exit={r.exit_code}" if r.HasField("exit_code") else ""
                host = f" on {r.hostname}" if r.hostname else ""
                lines.append(f"    {role.role}/{r.id}: {state_name(r.state)}{extra}{host}")
    if status.structured_error_msg:
        lines.append(f"  error:    {status.structured_error_msg.strip()}")
    return "\n".join(lines)


def _row_format(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A str.format pattern with columns as wide as the headers and rows need."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    return "  ".join(f"{{:<{w}}}" for w in widths)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows under their headers, in columns as wide as they need."""
    fmt = _row_format(headers, rows)
    return "\n".join(fmt.format(*row).rstrip() for row in [headers, *rows])


_LIST_HEADERS = ("HANDLE", "NAME", "STATE", "CREATED")
STALE_MARK = " (stale)"
STALE_NOTE = "(stale): the backend has not confirmed this state lately; `txctl status` says why"


class ListTable:
    """`txctl list` as text, a line as soon as it can be printed: the columns are as wide as
    the first HEAD_ROWS rows need (a longer cell further down shifts its own line only), so
    a list of any length is printed holding no more than that many rows."""

    HEAD_ROWS = 500

    def __init__(self) -> None:
        self._head: list[list[str]] | None = []  # None once the head is printed
        self._fmt = ""
        self._stale = False

    def add(self, app: AppStatus) -> list[str]:
        """The lines to print now (none while the head is still being collected)."""
        state = state_name(app.state)
        if app.stale_msg:  # the last state known, which the backend has not confirmed since
            state += STALE_MARK
            self._stale = True
        row = [app.app_handle, app.name, state, _when(app.created)]
        if self._head is None:
            return [self._fmt.format(*row).rstrip()]
        self._head.append(row)
        return self.end() if len(self._head) >= self.HEAD_ROWS else []

    def end(self) -> list[str]:
        """The lines still held back, and what a stale mark means if a row had one: call once
        no more rows come."""
        lines = []
        if self._head is not None:
            head, self._head = self._head, None
            self._fmt = _row_format(_LIST_HEADERS, head)
            lines = [self._fmt.format(*row).rstrip() for row in [list(_LIST_HEADERS), *head]]
        if self._stale:
            self._stale = False
            lines.append(STALE_NOTE)
        return lines


def app_text(app: AppDef) -> str:
    lines = [f"app: {app.name}"]
    for role in app.roles:
        lines.append(f"  role {role.name}: {role.num_replicas} replica(s)")
        lines.append(f"    entrypoint: {role.entrypoint}")
        if role.args:
            lines.append(f"    args: {json.dumps(list(role.args))}")
        if role.image:
            lines.append(f"    image: {role.image}")
        res = role.resource
        if res.cpu or res.gpu or res.mem_mb or res.named:
            named = f" ({res.named})" if res.named else ""
            lines.append(f"    resource: cpu={res.cpu} gpu={res.gpu} mem_mb={res.mem_mb}{named}")
        if role.env:
            lines.append(f"    env: {json.dumps(dict(sorted(role.env.items())))}")
        if role.max_retries:
            lines.append(f"    max_retries: {role.max_retries}")
    return "\n".join(lines)


_TYPE_NAMES = {
    OptType.STR: "str",
    OptType.INT: "int",
    OptType.FLOAT: "float",
    OptType.BOOL: "bool",
    OptType.LIST: "list[str]",
    OptType.DICT: "dict[str, str]",
}


def _default(opt: RunOpt, sep: str = ",") -> str:
    kind = opt.default.WhichOneof("kind")
    if kind is None:
        return ""
    value = getattr(opt.default, kind)
    if kind == "list":
        return sep.join(value.items)
    if kind == "dict":
        return sep.join(f"{k}:{v}" for k, v in value.items.items())
    return str(value).lower() if kind == "bool" else str(value)


def config_text(opts: Mapping[str, Sequence[RunOpt]], everything: bool) -> str:
    """A `.txdconfig` (TorchX's `.torchxconfig` format) with a section per scheduler: its
    required options as `name = #FIXME:(type) help`, as `torchx configure` writes them, and with
    `everything` the others too, at their defaults (`None`: unset), in the form txctl reads."""
    lines = [
        "# Written by `txctl configure`: replace each #FIXME with a value; `txctl runopts`",
        "# says what every option does.",
    ]
    for scheduler, scheduler_opts in opts.items():
        lines += ["", f"[{scheduler}]"]
        for opt in scheduler_opts:
            if opt.required:
                help = " ".join(opt.help.split())
                lines.append(f"{opt.name} = #FIXME:({_TYPE_NAMES[opt.type]}) {help}".rstrip())
            elif everything:
                unset = opt.default.WhichOneof("kind") is None
                lines.append(f"{opt.name} = {'None' if unset else _default(opt, ';')}".rstrip())
    return "\n".join(lines) + "\n"


def runopts_text(scheduler: str, opts: Sequence[RunOpt]) -> str:
    lines = [f"{scheduler}:"]
    if not opts:
        lines.append("    (no options)")
    for opt in opts:
        default = _default(opt)
        req = "required" if opt.required else f"default: {default or 'unset'}"
        lines.append(f"    {opt.name} ({_TYPE_NAMES[opt.type]}, {req})")
        if opt.help:
            lines.append(f"        {opt.help}")
    return "\n".join(lines)


WIDTH = 80  # `txctl schedulers` fits a terminal this wide


def schedulers_text(infos: Sequence[SchedulerInfo], default: str) -> str:
    """Per scheduler: its name, then whether it is ready, wrapped beside it; a ready one's
    description and capabilities, else the one-line reason it is not.

    local_cwd (default)  ready: processes on this host, started in the caller's
                         working directory
                         can: logs, log_follow, log_since_until, ...
    local_docker         unusable: No module named 'aiodocker':
                         .../scripts/setup --venv ... docker installs it
    """
    import textwrap

    names = [info.name + (" (default)" if info.name == default else "") for info in infos]
    indent = max(map(len, names), default=0) + 2
    lines = []
    for name, info in zip(names, infos, strict=True):
        if info.load_error:
            paragraphs = [f"unusable: {info.load_error}"]
        elif info.not_ready:
            paragraphs = [f"not ready: {info.not_ready}"]
        else:
            caps = [f.name for f, v in info.capabilities.ListFields() if v]
            paragraphs = [f"ready: {info.description}", "can: " + ", ".join(caps)]
        first = name.ljust(indent)
        for text in paragraphs:
            lines += textwrap.wrap(
                text,
                WIDTH,
                initial_indent=first,
                subsequent_indent=" " * indent,
                break_on_hyphens=False,
            )
            first = " " * indent
    return "\n".join(lines)


def where_dict(resp: Any) -> dict[str, Any]:
    """`txctl where --json`: numbers as numbers (to_dict would write the int64 pid as a string
    and the uptime as "12.5s")."""
    return {
        "host": resp.host,
        "user": resp.user,
        "pid": resp.pid,
        "socket": resp.socket,
        "state_dir": resp.state_dir,
        "version": resp.version,
        "started": resp.started.ToDatetime(dt.UTC).isoformat(),
        "uptime_seconds": round(resp.uptime.ToNanoseconds() / 1e9, 3),
        "systemd_unit": resp.systemd_unit,
    }


def where_text(resp: Any) -> str:
    seconds = int(resp.uptime.ToNanoseconds() // 1_000_000_000)
    days, rest = divmod(seconds, 86400)
    parts = [f"{days}d"] if days else []
    parts += [f"{rest // 3600}h", f"{rest // 60 % 60}m", f"{rest % 60}s"]
    rows = [
        ("host", resp.host),
        ("user", resp.user),
        ("pid", str(resp.pid)),
        ("socket", resp.socket),
        ("state dir", resp.state_dir),
        ("version", resp.version),
        ("started", f"{_when(resp.started)} (up {' '.join(parts)})"),
        ("unit", resp.systemd_unit or "none (not started by systemd)"),
    ]
    return "\n".join(f"{name:<10} {value}" for name, value in rows)
