"""`txctl host add|rm|use|list`: the saved remote endpoints (txd.client._endpoint)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from txd.client._endpoint import (
    DEFAULT_COMMAND,
    DEFAULT_IDLE,
    LOCAL,
    EndpointError,
    check_name,
    hosts_file,
    load_hosts,
    parse_url,
    save_hosts,
)


def host_command(args: argparse.Namespace, out: Callable[[Any, bool], None]) -> int:
    from txd.client.cli import CliError

    try:
        return _run(args, out)
    except EndpointError as e:
        raise CliError(str(e)) from None


def _run(args: argparse.Namespace, out: Callable[[Any, bool], None]) -> int:
    data = load_hosts()
    hosts: dict[str, dict[str, Any]] = data["hosts"]
    action = args.host_command
    if action == "list":
        rows = [
            {
                "name": name,
                "url": str(f.get("url", "")),
                "command": str(f.get("command") or DEFAULT_COMMAND),
                "socket": str(f.get("socket") or ""),
                "idle": float(f.get("idle", DEFAULT_IDLE)),
                "current": name == data["current"],
            }
            for name, f in sorted(hosts.items())
        ]
        if args.json:
            out({"current": data["current"] or LOCAL, "hosts": rows}, True)
            return 0
        mark = " " if data["current"] else "*"
        lines = [f"{mark} {LOCAL:<16} this host's daemon"]
        for r in rows:
            extra = f"  (command {r['command']})" if r["command"] != DEFAULT_COMMAND else ""
            lines.append(f"{'*' if r['current'] else ' '} {r['name']:<16} {r['url']}{extra}")
        out("\n".join(lines), False)
        return 0
    name = check_name(args.name) if args.name != LOCAL or action != "use" else LOCAL
    if action == "add":
        parse_url(args.url)  # a bad URL is refused before it is saved
        fields: dict[str, Any] = {"url": args.url}
        if args.remote_txctl:
            fields["command"] = args.remote_txctl
        if args.remote_socket:
            fields["socket"] = args.remote_socket
        if args.idle is not None:
            fields["idle"] = args.idle
        hosts[name] = fields
        if args.use:
            data["current"] = name
    elif action == "rm":
        if hosts.pop(name, None) is None:
            raise EndpointError(f"no saved endpoint {name!r} (see `txctl host list`)")
        if data["current"] == name:
            data["current"] = ""
    elif action == "use":
        if name != LOCAL and name not in hosts:
            raise EndpointError(f"no saved endpoint {name!r} (see `txctl host list`)")
        data["current"] = "" if name == LOCAL else name
    save_hosts(data)
    if action in ("use",) or (action == "add" and args.use):
        print(f"txctl: now using {name} ({hosts_file()})")
    return 0
