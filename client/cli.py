"""`txctl`: the command line client of txd.

Only argparse and the standard library load at start; each command imports what it needs, so
`txctl --help` imports neither gRPC nor asyncio, and `txctl status` imports gRPC, protobuf and
txd.v1 only.

Exit codes (txd.client._exitcodes, printed by `txctl --help`): 0 ok; 1 the job did not succeed;
2 bad request (usage, unknown handle or scheduler, invalid app or option, a component's error);
3 no daemon answers; 4 the daemon answered but the scheduler's backend did not; 5 a call's
--timeout ran out; 6 the daemon refused for want of a resource; 7 `--wait-timeout` ran out;
8 `logs` printed all but a replica whose log could not be read; 70 internal error; 130
interrupted. TXD_DEBUG=1 adds the traceback of an error on stderr; the exit code stays the same.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

from txd.client import _exitcodes as exits

CONFIGURE_FILE = ".txdconfig"  # what `txctl configure` writes, in the working directory
EPILOG = (
    exits.TABLE + "\nenvironment:\n  TXD_SOCKET        the daemon's socket (as --socket)\n"
    "  TXD_TOKEN         a tcp:// daemon's token (or TXD_TOKEN_FILE: a file holding it)\n"
    "  TXD_CA            a tcp:// daemon's CA (as --ca)\n"
    "  TXD_NO_AUTOSTART  1: as --no-autostart\n"
    "  TXD_HOST          the daemon to reach (as --host)\n"
    "  TXD_REMOTE_COMMAND  the txctl on a remote host (as --remote-command)\n"
    "  TXD_SSH_COMMAND   the ssh command for ssh:// hosts (default: ssh)\n"
    "  TXD_TUNNEL_IDLE   seconds an unused ssh tunnel stays up (default 600)\n"
    "  TXD_RECONNECT_TIMEOUT  as --reconnect-timeout\n"
    "  TXD_DEBUG         1: print an error's traceback too (the exit code stays)\n"
)


class CliError(Exception):
    """One line for stderr, and the exit code."""

    def __init__(self, message: str, code: int = exits.BAD_REQUEST) -> None:
        super().__init__(message)
        self.code = code


class _Version(argparse.Action):
    """--version, looked up only when asked (importlib.metadata is not free)."""

    def __init__(self, option_strings: list[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print txd's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from txd.install import version

        print(f"{parser.prog} {version()}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="txctl",
        description="Run and manage jobs through the txd daemon.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # argparse checks every argument, a component's too, against abbreviations of these
        # options: with --host, --ca and --client-* a component's `--h` or `--c` would be
        # "ambiguous". Global options are given in full.
        allow_abbrev=False,
    )
    p.add_argument("--version", action=_Version)
    p.set_defaults(served_url="")  # set by _locate: the ssh URL of another host serving
    p.add_argument("--socket", help="daemon socket (env TXD_SOCKET; default per user)")
    p.add_argument(
        "--state-dir",
        help="state dir of a daemon txctl starts, or waits for when its socket was removed "
        "(env TXD_STATE_DIR; default per user)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds allowed for each request, not for waiting on a job (default %(default)s)",
    )
    p.add_argument(
        "--reconnect-timeout",
        type=float,
        metavar="SECONDS",
        help="how long wait, run --wait/--log and logs -f keep reconnecting after the "
        "connection to the daemon is lost (env TXD_RECONNECT_TIMEOUT; default 60; 0: never)",
    )
    p.add_argument(
        "--no-autostart",
        action="store_true",
        help="fail instead of starting a daemon when none answers (env TXD_NO_AUTOSTART=1)",
    )
    p.add_argument(
        "--host",
        help="reach the daemon on another host: ssh://[USER@]HOST[:PORT] or a saved endpoint's "
        "name (see `txctl host`; `local`: this host's), or tcp://HOST:PORT, a daemon's TCP "
        "listener (TLS and a token) (env TXD_HOST)",
    )
    p.add_argument(
        "--remote-command",
        metavar="CMD",
        help="the txctl to run on an ssh:// host (env TXD_REMOTE_COMMAND; default txctl)",
    )
    _tcp_options(p)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def cmd(
        name: str, help: str, json: bool = True, aliases: Sequence[str] = ()
    ) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help, aliases=list(aliases))
        sp.set_defaults(subparser=sp)  # for usage errors found after parsing
        if json:
            sp.add_argument("--json", action="store_true", help="print JSON")
        return sp

    run = cmd("run", "run a component (a builtin like utils.echo, or path/file.py:function)")
    # The component's own options follow: `--c` must not be taken for an abbreviation of ours.
    run.allow_abbrev = False
    run.add_argument("-s", "--scheduler", help="scheduler (default: local_cwd, or [cli:run])")
    run.add_argument(
        "-c",
        "--cfg",
        "-cfg",  # TorchX's spellings, so a switching user's muscle memory works
        "--scheduler_args",
        dest="cfg",
        action="append",
        default=[],
        metavar="KEY=VALUE,...",
        help="scheduler options (see `txctl runopts`); may repeat",
    )
    run.add_argument("--dryrun", action="store_true", help="show what would be submitted")
    run.add_argument("--wait", action="store_true", help="wait for the job to end")
    run.add_argument(
        "--log",
        action="store_true",
        help="stream the job's logs until it ends (to stderr with --json)",
    )
    run.add_argument(
        "--cancel-on-interrupt",
        action="store_true",
        help="with --wait/--log: Ctrl-C cancels the job (default: it keeps running)",
    )
    run.add_argument("--request-id", default="", help="idempotency key: never run twice")
    run.add_argument(
        "--parent_run_id",
        "--parent-run-id",
        dest="parent_run_id",
        metavar="ID",
        help="the experiment run this job belongs to, for TorchX's trackers in the job (its "
        "roles get TORCHX_PARENT_RUN_ID; env TORCHX_PARENT_RUN_ID wins)",
    )
    run.add_argument(
        "--workspace",
        metavar="DIR",
        help="code the job runs, built into its image or copied to its job directory (default: "
        "the working directory, or [cli:run] workspace; '' for none)",
    )
    run.add_argument("component", nargs="?", help="component name, then its arguments")
    run.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    status = cmd("status", "show a job's status")
    status.add_argument("handle")
    status.add_argument(
        "--roles",
        type=_names,
        default=[],
        metavar="ROLE[,ROLE...]",
        help="only these roles' replicas (as torchx status --roles)",
    )
    describe = cmd("describe", "show a job's AppDef, options and status")
    describe.add_argument("handle")
    describe.add_argument(
        "--native",
        action="store_true",
        help="print the backend request as submitted (sbatch script, Kubernetes objects, ...) "
        f"instead; exit {exits.INCOMPLETE} if txd kept none for the job",
    )
    wait = cmd("wait", "wait until a job ends; exit 0 only if it succeeded")
    wait.add_argument("handle")
    wait.add_argument(
        "--wait-timeout",
        type=_seconds,
        metavar="S",
        help=f"give up after S seconds (exit {exits.WAIT_TIMEOUT}; the job goes on)",
    )
    for name, help in (
        ("cancel", "cancel a job (returns at once)"),
        ("delete", "cancel a job if live, then forget it and its logs"),
    ):
        cmd(name, help).add_argument("handle")

    # `log` is TorchX's name for it.
    logs = cmd("logs", "print a job's logs", json=False, aliases=["log"])
    logs.add_argument("handle", metavar="HANDLE[/ROLE[/K]]")
    logs.add_argument(
        "target",
        nargs="?",
        default="",
        metavar="ROLE[/K]",
        help="one role, or one replica K of it, or several (ROLE/0,2) (default: every replica)",
    )
    logs.add_argument(
        "--tail",
        type=_nonnegative_int,
        metavar="N",
        help="only the last N lines of each replica (with -f, then what comes next)",
    )
    logs.add_argument("-f", "--follow", action="store_true", help="follow until the job ends")
    logs.add_argument(
        "--regex",
        default="",
        help="only lines matching this regex (Python re, on each whole line; a line over 1 MiB"
        " that a pattern able to match over 64 KiB of text misses is named on stderr)",
    )
    logs.add_argument("--since", help="only lines written since: ISO time, epoch, or 10s/5m/2h/1d")
    logs.add_argument("--until", help="only lines written before (same forms as --since)")
    logs.add_argument("--streams", choices=["combined", "stdout", "stderr"], default="combined")

    lst = cmd("list", "list the jobs txd launched, newest first")
    lst.add_argument("-s", "--scheduler", default="", help="only this scheduler's jobs")
    lst.add_argument(
        "--backend",
        action="store_true",
        help="ask the scheduler (-s) for all your jobs it knows, not only txd's",
    )
    lst.add_argument(
        "--limit", type=_positive_int, metavar="N", help="only the newest N jobs (default: all)"
    )
    lst.add_argument(
        "--state",
        action="append",
        type=_state_names,
        default=[],
        metavar="STATE[,STATE...]",
        help="only jobs in these states (e.g. running,failed); may repeat",
    )
    lst.add_argument("--since", help="only jobs created since: ISO time, epoch, or 10s/5m/2h/1d")
    lst.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="keep the list on screen, redrawn as jobs change (driven by the events stream)",
    )
    events = cmd(
        "events",
        "print job status changes, one line (or JSON object) each with its cursor",
    )
    events.add_argument(
        "--since",
        metavar="CURSOR|TIME",
        help="replay the changes after a cursor (as printed), or since a time (ISO, epoch, "
        "10s/5m/2h/1d)",
    )
    events.add_argument("--snapshot", action="store_true", help="first every job's current status")
    events.add_argument("-f", "--follow", action="store_true", help="then print live changes")
    events.add_argument("-s", "--scheduler", default="", help="only this scheduler's jobs")
    events.add_argument(
        "--state",
        action="append",
        type=_state_names,
        default=[],
        metavar="STATE[,STATE...]",
        help="only changes to these states; may repeat",
    )
    events.add_argument(
        "--handle", action="append", default=[], help="only this job's changes; may repeat"
    )
    prune = cmd("prune", "delete finished jobs created before a time, and their logs")
    prune.add_argument(
        "--older-than",
        required=True,
        metavar="AGE|TIME",
        help="jobs created before this: an age like 7d/12h/30m, an ISO time or epoch seconds",
    )
    prune.add_argument("-s", "--scheduler", default="", help="only this scheduler's jobs")
    prune.add_argument("--dry-run", action="store_true", help="only show what would be deleted")
    cmd("runopts", "show a scheduler's options").add_argument("scheduler", nargs="?", default="")
    configure = cmd(
        "configure",
        f"write {CONFIGURE_FILE} here: each scheduler's required options to fill in (as torchx "
        "configure)",
        json=False,
    )
    configure.add_argument(
        "-s",
        "--schedulers",
        type=_names,
        default=[],
        metavar="SCHED[,SCHED...]",
        help="only these schedulers (default: every one)",
    )
    configure.add_argument(
        "-a", "--all", action="store_true", help="every option, at its default, not only required"
    )
    configure.add_argument(
        "--print", dest="print_only", action="store_true", help="print it instead of writing it"
    )
    dash = cmd(
        "dashboard",
        "serve a live web page of the jobs on 127.0.0.1, its URL holding a random token "
        "(needs txd's dashboard extra)",
        json=False,
    )
    dash.add_argument(
        "--port", type=_port, default=0, help="the port to listen on (default: a free one)"
    )
    dash.add_argument(
        "--no-open", action="store_true", help="only print the URL; do not open a browser"
    )
    cmd(
        "completion",
        'print a shell completion script: eval "$(txctl completion bash)", '
        "source <(txctl completion zsh)",
        json=False,
    ).add_argument("shell", choices=["bash", "zsh"])
    cmd("schedulers", "list the schedulers and what they can do")
    cmd("where", "show which daemon answers: host, socket, state dir, version, pid, uptime")
    metrics = cmd("metrics", "print the daemon's metrics (OpenMetrics text)", json=False)
    metrics.add_argument(
        "--format",
        choices=["openmetrics", "prometheus"],
        default="openmetrics",
        help="openmetrics (default), or Prometheus's text format 0.0.4, as node_exporter's "
        "textfile collector and `promtool check metrics` read it",
    )
    builtins = cmd("builtins", "list the builtin components")
    builtins.add_argument(
        "--print",
        dest="print_name",
        metavar="NAME",
        help="print that builtin's source instead (its module's imports, then the function)",
    )
    host = cmd("host", "manage saved remote endpoints (ssh://): add, rm, use, list", json=False)
    host_sub = host.add_subparsers(dest="host_command", metavar="ACTION", required=True)
    add = host_sub.add_parser("add", help="save an endpoint: NAME ssh://[USER@]HOST[:PORT]")
    add.add_argument("name")
    add.add_argument("url")
    add.add_argument(
        "--command", dest="remote_txctl", help="the txctl on that host (default txctl)"
    )
    add.add_argument(
        "--socket",
        dest="remote_socket",
        help="the remote daemon's socket (default: the remote txctl's default)",
    )
    add.add_argument("--idle", type=_seconds, help="seconds an unused tunnel stays up (600)")
    add.add_argument("--use", action="store_true", help="and make it the current endpoint")
    host_sub.add_parser("rm", help="forget a saved endpoint").add_argument("name")
    host_sub.add_parser(
        "use", help="make an endpoint the current one (`local`: this host's daemon)"
    ).add_argument("name")
    host_sub.add_parser("list", help="list the saved endpoints (* marks the current)").add_argument(
        "--json", action="store_true", help="print JSON"
    )
    tracker = cmd(
        "tracker",
        "what TorchX's experiment trackers recorded of the jobs (needs torchx; as torchx tracker)",
        json=False,
    )
    tracker_sub = tracker.add_subparsers(dest="tracker_command", metavar="ACTION", required=True)
    listing = tracker_sub.add_parser("list", help="list jobs, a job's metadata or its artifacts")
    listed = listing.add_subparsers(dest="tracker_list", metavar="WHAT", required=True)
    jobs = listed.add_parser("jobs", help="the runs the tracker knows")
    jobs.add_argument("--parent-run-id", "--parent_run_id", dest="parent_run_id", metavar="ID")
    listed.add_parser("metadata", help="a run's metadata").add_argument("run_id", metavar="RUN_ID")
    artifacts = listed.add_parser("artifacts", help="a run's artifacts")
    artifacts.add_argument("--artifact", metavar="NAME", help="only the artifact of this name")
    artifacts.add_argument("run_id", metavar="RUN_ID")
    for sp in (jobs, listed.choices["metadata"], artifacts):
        sp.add_argument("--json", action="store_true", help="print JSON")
    # Run over ssh by a laptop's tunnel; not listed in --help.
    for hidden in ("remote-socket", "dial-stdio"):
        sub.add_parser(hidden).set_defaults(subparser=None, json=False)
    return p


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, not {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, not {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"expected a port, 0 to 65535 (0: a free one), not {text!r}"
        )
    return value


def _nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, not {text!r}")
    return value


def _names(text: str) -> list[str]:
    """A comma-separated list of names (--roles)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected NAME[,NAME...], not {text!r}")
    return names


def _state_names(text: str) -> list[str]:
    """--state: comma-separated AppState names, any case."""
    from txd.v1 import AppState

    names = [n.strip().upper() for n in text.split(",") if n.strip()]
    valid = list(AppState.keys())
    bad = [n for n in names if n not in valid]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown state {(bad or [text])[0]!r}; states: {', '.join(valid)} (any case)"
        )
    return names


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """Parses argv; a usage error is reported with the usage of the subcommand it is in."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    sub: argparse.ArgumentParser = args.subparser or parser
    if extra:
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "log":
        args.command = "logs"
    if args.command == "list" and args.backend and not args.scheduler:
        sub.error("--backend needs a scheduler: pass -s SCHEDULER (see `txctl schedulers`)")
    if args.command == "run" and args.cancel_on_interrupt and not (args.wait or args.log):
        sub.error("--cancel-on-interrupt needs --wait or --log")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["__complete"]:  # asked by the completion script, never typed
        from txd.client._completion import complete

        return complete(argv[1:])
    args = _parse(argv)  # --help and usage errors exit here, before asyncio loads (~20 ms)
    debug = os.environ.get("TXD_DEBUG") == "1"
    import asyncio

    try:
        return asyncio.run(_dispatch(args))
    except CliError as e:
        if debug and e.__cause__ is not None:
            import traceback

            traceback.print_exception(e.__cause__)
        print(f"txctl: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return exits.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): not an error. Keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # a bug: still one line, the traceback only when asked for
        if debug:
            import traceback

            traceback.print_exception(e)
        print(
            f"txctl: internal error: {type(e).__name__}: {e} (TXD_DEBUG=1 shows where)",
            file=sys.stderr,
        )
        return exits.INTERNAL


def _quiet_grpc() -> None:
    """gRPC's C core writes log lines of its own to stderr (a target it cannot parse, say),
    where txctl's own messages are what the user reads: off unless GRPC_VERBOSITY asks for
    them. gRPC reads the variable once, at its import; it is not left
    set for the processes txctl starts (a daemon's log keeps gRPC's lines)."""
    if "GRPC_VERBOSITY" in os.environ or "grpc" in sys.modules:
        return
    os.environ["GRPC_VERBOSITY"] = "NONE"
    try:
        import grpc  # noqa: F401
    finally:
        del os.environ["GRPC_VERBOSITY"]


async def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "completion":
        from txd.client._completion import script

        print(script(args.shell, _parser()), end="")
        return 0
    if args.command == "host":
        from txd.client._hosts import host_command

        return host_command(args, _out)
    if args.command == "tracker":
        from txd.client._tracker_cmd import tracker_command

        return tracker_command(args, _out)
    if args.command == "builtins":
        from txd.client import components

        if args.print_name:
            try:
                source = components.source(args.print_name)
            except components.ComponentNotFound as e:
                raise CliError(str(e)) from None
            _out({"name": args.print_name, "source": source} if args.json else source, args.json)
            return 0
        names = components.builtins()
        _out({"builtins": names} if args.json else "\n".join(names), args.json)
        return 0
    if args.command == "dashboard":
        from txd.client.dashboard import missing_extra

        if why := missing_extra():  # before a daemon is started or a tunnel opened
            raise CliError(why)
    if args.command == "run":
        # Resolve the component first: a bad one (or --help) needs no daemon.
        args.submission = _submission(args)
        if args.submission is None:
            return 0
    _quiet_grpc()  # before gRPC's first import, which the client's brings
    from txd.client._async import AsyncClient
    from txd.client._errors import TxdError

    host = args.host or os.environ.get("TXD_HOST") or ""
    endpoint = None
    if host.startswith("tcp://") and args.command not in ("remote-socket", "dial-stdio"):
        client, label = _tcp_client(host, args), host
    elif args.command in ("remote-socket", "dial-stdio"):
        from txd.client._relay import dial_stdio, end_with_session, print_socket

        end_with_session()  # from now on: finding or starting the daemon may take a while
        socket_path, _, _ = await _locate(args)
        if args.command == "remote-socket":
            return print_socket(socket_path)
        return dial_stdio(socket_path)
    else:
        socket_path, label, endpoint = await _locate(args)
        try:
            client = AsyncClient(socket_path, timeout=args.timeout)
        except ValueError as e:  # a bad TXD_RECONNECT_TIMEOUT
            raise CliError(str(e)) from None
        client.remote = endpoint is not None
        client.resumer.rejoin = _rejoin(args, client)
    _reconnect_policy(args, client)
    try:
        async with client:
            return await _COMMANDS[args.command](client, args)
    except TxdError as e:
        message, code = exits.for_error(e, socket_path=label, timeout=args.timeout)
        if e.code == "UNAVAILABLE" and code == exits.NO_DAEMON and args.served_url:
            message = _unanswered(args)  # gRPC's words through the tunnel say nothing of it
        raise CliError(message, code) from None


def _tcp_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="file holding the tcp:// daemon's token (env TXD_TOKEN_FILE, or the token itself "
        "in TXD_TOKEN; never on the command line)",
    )
    p.add_argument("--ca", metavar="PEM", help="the tcp:// daemon's CA (env TXD_CA)")
    p.add_argument(
        "--client-cert",
        metavar="PEM",
        help="a client certificate for a tcp:// daemon that asks for one (env TXD_CLIENT_CERT)",
    )
    p.add_argument("--client-key", metavar="PEM", help="its private key (env TXD_CLIENT_KEY)")


def _tcp_client(host: str, args: argparse.Namespace) -> Any:
    """An AsyncClient for a tcp:// daemon: no socket, no autostart."""
    from txd.client import _tcp
    from txd.client._async import AsyncClient

    cert = args.client_cert or os.environ.get(_tcp.CERT_ENV)
    key = args.client_key or os.environ.get(_tcp.KEY_ENV)
    if bool(cert) != bool(key):
        raise CliError("a client certificate needs both --client-cert and --client-key")
    try:
        token = _tcp.resolve_token(token_file=args.token_file) if args.token_file else None
        return AsyncClient(
            host,
            timeout=args.timeout,
            token=token,
            ca=args.ca,
            client_cert=(cert, key) if cert and key else None,
        )
    except ValueError as e:
        raise CliError(str(e)) from None


def _endpoint(args: argparse.Namespace) -> Any:
    """The remote endpoint to reach, or None for the local daemon. The remote machinery is
    imported only when a host is named (--host, TXD_HOST) or hosts.toml exists."""
    if args.command in ("remote-socket", "dial-stdio"):
        return None  # run on the remote host: its own daemon
    config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    if not (
        args.host
        or os.environ.get("TXD_HOST")
        or os.path.exists(os.path.join(config_home, "txd", "hosts.toml"))
    ):
        return None
    from txd.client._endpoint import EndpointError, resolve

    try:
        endpoint = resolve(args.host, command=args.remote_command)
    except EndpointError as e:
        raise CliError(str(e)) from None
    if endpoint is not None and args.socket:
        raise CliError(
            "--socket names a local daemon's socket; for a remote host's, save it with "
            "`txctl host add NAME URL --socket PATH`"
        )
    if endpoint is not None and args.state_dir:
        raise CliError(
            "--state-dir names the state dir of a daemon txctl starts here; for a remote "
            "host's, give it to the remote txctl: `txctl host add NAME URL --command "
            "'txctl --state-dir DIR'`"
        )
    return endpoint


async def _locate(args: argparse.Namespace, said: set[str] | None = None) -> tuple[str, str, Any]:
    """(socket, how to name it in errors, the ssh endpoint or None) of the daemon to reach:
    the local one (started when autostart allows), the named host's through its ssh tunnel,
    or the host of this cluster that serves the shared state dir. A note already in `said`
    is not printed again (a reconnect tries many times)."""
    endpoint = _endpoint(args)
    if endpoint is not None:
        return (*await _ensure_tunnel(args, endpoint), endpoint)
    try:
        path = await _ensure_daemon(args)
        return path, path, None
    except _ServedElsewhere as e:
        # Another host of this cluster serves the shared state dir: reach it there.
        from txd.client._serving import unanswered

        endpoint = _cluster_endpoint(args, e.served)
        args.served_url = endpoint.url  # a call that finds no answer there says so (_unanswered)
        note = (
            f"txctl: txd serves this state dir on host {e.served.host}; reaching it "
            f"over ssh ({endpoint.url})"
        )
        if said is not None and note in said:
            note = ""
        try:
            # Said once the tunnel is up: one line, not this one and then its contradiction.
            found = await _ensure_tunnel(args, endpoint, note=note)
        except CliError:
            raise CliError(unanswered(e.served, endpoint.url), exits.NO_DAEMON) from None
        if said is not None:
            said.add(note)
        return (*found, endpoint)


def _rejoin(args: argparse.Namespace, client: Any) -> Any:
    """What finds the daemon again before each reconnect (txd.client._resume): as at the
    start, so a restarted daemon, a new tunnel or the host that took over is reached."""
    from txd.client._errors import UnavailableError

    said: set[str] = set()

    async def rejoin() -> None:
        try:
            socket_path, _, endpoint = await _locate(args, said)
        except CliError as e:
            raise UnavailableError(str(e)) from None
        from pathlib import Path

        client.socket_path = Path(socket_path)
        client.target = socket_path
        client.remote = endpoint is not None

    return rejoin


def _reconnect_policy(args: argparse.Namespace, client: Any) -> None:
    """--reconnect-timeout (else TXD_RECONNECT_TIMEOUT), and the lines on stderr as txctl's."""
    from txd.client._resume import ResumePolicy, say_on_stderr

    try:
        client.resumer.policy = ResumePolicy.from_env(args.reconnect_timeout)
    except ValueError as e:
        raise CliError(str(e)) from None
    say = say_on_stderr("txctl")

    def on_own_line(text: str) -> None:  # off wait's live progress line, which redraws
        if sys.stderr.isatty():
            sys.stderr.write("\r\x1b[K")
        say(text)

    client.resumer.say = on_own_line


async def _ensure_tunnel(
    args: argparse.Namespace, endpoint: Any, note: str = ""
) -> tuple[str, str]:
    """The local socket of the endpoint's ssh tunnel (started when none runs), and how to
    name it in errors. `note` is said first, once the tunnel is up."""
    from txd.client._daemon import autostart_allowed
    from txd.client._tunnel import TunnelError, describe, ensure

    autostart = not args.no_autostart and autostart_allowed()
    try:
        # Blocking, as a local daemon's start is: a Ctrl-C ends it at once.
        notes: list[str] = []
        path = ensure(endpoint, autostart=autostart, notes=notes)
    except TunnelError as e:
        raise CliError(describe(e, endpoint), exits.NO_DAEMON) from None
    if note:
        print(note, file=sys.stderr)
    for line in notes:  # as a local autostart says it
        print(f"txctl: {line}", file=sys.stderr)
    return str(path), f"ssh tunnel {path} to {endpoint.url}"


async def _ensure_daemon(args: argparse.Namespace) -> str:
    from txd import defaults
    from txd.client._daemon import NoDaemon, autostart_allowed, connect_error, ensure_local

    path = defaults.socket_path(args.socket)
    if connect_error(path) is None:
        return str(path)
    state_dir = defaults.state_dir(args.state_dir)
    autostart = not args.no_autostart and autostart_allowed()
    # Another host's daemon serving the shared state dir is reached there (_ServedElsewhere);
    # its lock file names a pid and socket of that host, not of this one.
    timeout = _elsewhere(state_dir, autostart)
    remote = args.command in ("remote-socket", "dial-stdio")
    try:
        said = ensure_local(path, state_dir, autostart=autostart, timeout=timeout, remote=remote)
    except NoDaemon as e:
        raise CliError(str(e), exits.NO_DAEMON) from None
    if said:
        print(f"txctl: {said}", file=sys.stderr)
    return str(path)


class _ServedElsewhere(Exception):
    """The state dir is served by a daemon of another host, which still beats."""

    def __init__(self, served: Any) -> None:
        super().__init__(served.host)
        self.served = served


def _cluster_endpoint(args: argparse.Namespace, served: Any) -> Any:
    """The ssh endpoint of the host serving the shared state dir (--remote-command wins over
    the txctl of that daemon's own install)."""
    from txd.client._endpoint import EndpointError
    from txd.client._serving import serving_endpoint

    try:
        return serving_endpoint(served, args.remote_command)
    except EndpointError as e:
        raise CliError(
            f"txd serves the state dir on host {served.host}, but its record names no usable "
            f"ssh host: {e}",
            exits.NO_DAEMON,
        ) from None


def _unanswered(args: argparse.Namespace) -> str:
    """Why the daemon of another host serving the state dir gave no answer through its
    tunnel, as its record says now: it still beats (a takeover possible in N s), or it
    stopped (the next command takes the state dir over here)."""
    from txd import defaults
    from txd.client._serving import RecordError, other_host, unanswered

    with contextlib.suppress(RecordError):
        served = other_host(defaults.state_dir(args.state_dir))
        if served is not None and served.fresh():
            return unanswered(served, args.served_url)
        if served is not None:
            return (
                f"the txd of host {served.host} stopped beating {served.age():.0f}s ago: run "
                "the command again to take the state dir over here"
            )
    return f"txd does not answer over ssh ({args.served_url}): run the command again"


def _elsewhere(state_dir: Path, autostart: bool) -> float:
    """Before starting a daemon here: a daemon of another host sharing the state dir that
    still beats serves it (_ServedElsewhere: reach it over ssh); one that stopped beating
    is taken over by the daemon started here, which first watches its record for a while.
    Returns the time to allow that daemon to start."""
    from txd.client._daemon import START_TIMEOUT
    from txd.client._serving import RecordError, other_host

    try:
        served = other_host(state_dir)
    except RecordError as e:
        raise CliError(str(e), exits.NO_DAEMON) from None
    if served is None:
        return START_TIMEOUT
    if served.fresh():
        raise _ServedElsewhere(served)
    if not autostart:
        raise CliError(
            f"the txd of host {served.host} stopped beating {served.age():.0f}s ago and no txd "
            f"answers here; without --no-autostart, txctl takes the state dir {state_dir} over "
            "here",
            exits.NO_DAEMON,
        )
    print(
        f"txctl: the txd of host {served.host} stopped beating {served.age():.0f}s ago; "
        f"taking the state dir {state_dir} over here (about {served.stale_after:.0f}s)",
        file=sys.stderr,
    )
    return START_TIMEOUT + served.stale_after


def _out(data: Any, as_json: bool) -> None:
    if as_json:
        from txd.client._format import dumps

        print(dumps(data))
    elif data != "":
        print(data)


# -- commands ---------------------------------------------------------------------------------

_CFG_PAIR = re.compile(r"[,;](?=\s*[A-Za-z_][\w.-]*=)")


def parse_cfg(items: list[str]) -> dict[str, str]:
    """`-c a=1,b=x,y,c=2` -> {"a": "1", "b": "x,y", "c": "2"}: a comma or semicolon starts a new
    pair only when a `key=` follows, so list values keep their commas."""
    out: dict[str, str] = {}
    for item in items:
        if not item.strip():
            continue  # `-c ''`: no options, as TorchX takes it
        for pair in _CFG_PAIR.split(item):
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise CliError(f"bad -c value {pair!r}: expected KEY=VALUE")
            out[key.strip()] = value
    return out


def _submission(args: argparse.Namespace) -> tuple[Any, str, dict[str, Any]] | None:
    """(AppDef, scheduler, cfg) for `run`, from the component, its arguments and the config
    files; None when the component's --help was printed instead."""
    from txd.client import components
    from txd.client.config import ConfigError, load_config

    try:
        config = load_config()
    except ConfigError as e:
        raise CliError(str(e)) from None
    spec = args.component or config.cli_default("run", "component")
    if not spec:
        raise CliError("missing component: `txctl run COMPONENT [ARGS...]` (see `txctl builtins`)")
    scheduler = args.scheduler or config.cli_default("run", "scheduler") or "local_cwd"
    try:
        app = components.resolve(spec, list(args.args), defaults=config.component_defaults(spec))
    except components.ComponentHelp as h:
        print(h.text)
        return None
    except components.ComponentError as e:
        raise CliError(str(e)) from e  # the cause: TXD_DEBUG=1 prints its traceback
    from txd.client._tracking import tracking_env, with_env

    app = with_env(app, tracking_env(args.parent_run_id, config))
    cli_cfg = parse_cfg(args.cfg)
    args.cfg_sources = {
        **config.scheduler_cfg_sources(scheduler),
        **{key: f"-c {key}={value}" for key, value in cli_cfg.items()},
    }
    # As TorchX: the working directory unless told otherwise; '' turns workspaces off.
    workspace = args.workspace
    if workspace is None:
        workspace = config.cli_default("run", "workspace")
    args.workspace_dir = os.getcwd() if workspace is None else workspace
    from txd.client._torchx_only import drop_torchx_only

    cfg, notes = drop_torchx_only(scheduler, {**config.scheduler_cfg(scheduler), **cli_cfg})
    for key, value in cfg.items():
        if value.startswith("#FIXME"):  # as `txctl configure` (or torchx's) left it
            raise CliError(f"{args.cfg_sources[key]}: fill in the option's value")
    for note in notes:
        print(f"txctl: {note}", file=sys.stderr)
    return app, scheduler, cfg


async def _cmd_run(client: Any, args: argparse.Namespace) -> int:
    from txd.handle import Handle

    app, scheduler, cfg = args.submission
    workspace = args.workspace_dir
    if client.remote and args.workspace is None:
        workspace = ""  # this host's working directory means nothing on the remote host
    if args.dryrun or args.json or args.wait or args.log:  # a plain run prints the handle only
        from txd.client._format import app_text, status_text, to_dict
        from txd.client._waiting import interruptible
    if args.dryrun:
        resp = await _cfg_checked(args, client.dryrun(app, scheduler, cfg, workspace=workspace))
        if args.json:
            _out(to_dict(resp), True)
        else:
            print(f"=== APPLICATION ===\n{app_text(resp.app)}\n")
            if resp.workspace:
                print(f"=== WORKSPACE ===\n{resp.workspace}\n")
            print(f"=== SCHEDULER REQUEST ({resp.scheduler}) ===\n{resp.request}")
        return 0
    handle = await _cfg_checked(
        args, client.run(app, scheduler, cfg, request_id=args.request_id, workspace=workspace)
    )
    parsed = Handle.parse(handle)
    info = {"handle": handle, "app_id": parsed.app_id, "scheduler": parsed.scheduler}
    if not args.json:
        print(handle, flush=True)
    if not (args.wait or args.log):
        if args.json:
            _out(info, True)
        return 0
    async with interruptible(client, handle, cancel=args.cancel_on_interrupt):
        if args.log:  # with --json, stdout is the JSON object alone: the logs go to stderr
            out = sys.stderr.buffer if args.json else sys.stdout.buffer
            await _print_logs(client, handle, "", None, follow=True, out=out)
            status = await client.wait(handle)
        else:
            status = await _follow(client, handle)
    if args.json:
        _out({**info, "status": to_dict(status)}, True)
    else:
        print(status_text(status))
    return _job_exit(status.state)


async def _follow(client: Any, handle: str) -> Any:
    """The job's terminal status, from its Watch stream, with progress shown on stderr."""
    from txd.client._waiting import Progress, follow

    return await follow(client.watch(handle), Progress.for_stderr())


async def _cfg_checked(args: argparse.Namespace, call: Any) -> Any:
    """Awaits a run or dryrun; an invalid option is named by where its value came from (a
    config file's line, or -c) instead of the daemon's `cfg.KEY`."""
    from txd.client._errors import InvalidArgumentError

    try:
        return await call
    except InvalidArgumentError as e:
        for field, reason in e.violations:
            if field.startswith("cfg.") and (source := args.cfg_sources.get(field[4:])):
                raise CliError(f"{source}: {reason}") from None
        raise


def _job_exit(state: int) -> int:
    from txd.v1 import AppState

    return 0 if state == AppState.SUCCEEDED else exits.JOB_FAILED


async def _cmd_status(client: Any, args: argparse.Namespace) -> int:
    from txd.client._format import status_text, to_dict

    status = await client.status(args.handle)
    if args.roles:
        known = {r.role for r in status.roles}
        if any(r not in known for r in args.roles):  # none reported yet, or no such role
            known = {r.name for r in (await client.describe(status.app_handle)).app.roles}
        if unknown := [r for r in args.roles if r not in known]:
            raise CliError(
                f"{status.app_handle} has no role {unknown[0]!r} (its roles: "
                f"{', '.join(sorted(known))})"
            )
        kept = [r for r in status.roles if r.role in args.roles]
        del status.roles[:]
        status.roles.extend(kept)
    _out(to_dict(status) if args.json else status_text(status), args.json)
    return 0


async def _cmd_wait(client: Any, args: argparse.Namespace) -> int:
    import asyncio

    from txd.client._format import status_text, to_dict
    from txd.client._waiting import interruptible

    try:
        # The timeout inside: it ends the wait by cancelling it, which is no Ctrl-C.
        async with interruptible(client, args.handle), asyncio.timeout(args.wait_timeout):
            status = await _follow(client, args.handle)
    except TimeoutError:
        raise CliError(
            f"{args.handle} still not done after {args.wait_timeout:g} s (it goes on)",
            exits.WAIT_TIMEOUT,
        ) from None
    _out(to_dict(status) if args.json else status_text(status), args.json)
    return _job_exit(status.state)


async def _cmd_describe(client: Any, args: argparse.Namespace) -> int:
    from txd.cfgvalue import from_cfg_value
    from txd.client._format import app_text, status_text, to_dict

    resp = await client.describe(args.handle, native=args.native)
    kept = resp.native.recorded or not args.native
    if args.json:
        _out(to_dict(resp), True)
        return 0 if kept else exits.INCOMPLETE
    if args.native:
        if not kept:
            raise CliError(f"{resp.status.app_handle}: {resp.native.missing}", exits.INCOMPLETE)
        sys.stdout.write(resp.native.text)  # as submitted: not a character added
        return 0
    cfg = "\n".join(f"  {k} = {from_cfg_value(v)!r}" for k, v in sorted(resp.cfg.items()))
    print(f"{app_text(resp.app)}\noptions:\n{cfg or '  (none)'}\n{status_text(resp.status)}")
    return 0


async def _cmd_cancel(client: Any, args: argparse.Namespace) -> int:
    from txd.client._format import state_name, to_dict
    from txd.v1 import TERMINAL_STATES

    status = await client.status(args.handle)
    handle = status.app_handle or args.handle  # the job's full handle
    ended = status.state in TERMINAL_STATES
    if not ended:
        status = await client.cancel(handle)
    state = state_name(status.state)
    if args.json:
        _out({"handle": handle, "cancelled": not ended, "status": to_dict(status)}, True)
    elif ended:
        print(f"{handle} is already {state}; nothing to cancel")
    else:
        print(f"{handle}: cancel requested (state {state})")
    return 0


async def _cmd_delete(client: Any, args: argparse.Namespace) -> int:
    from txd.client._format import state_name
    from txd.v1 import TERMINAL_STATES

    status = await client.status(args.handle)
    handle = status.app_handle or args.handle
    await client.delete(handle)
    was = state_name(status.state)
    cancelled = status.state not in TERMINAL_STATES
    if args.json:
        _out({"handle": handle, "deleted": True, "was": was, "cancelled": cancelled}, True)
    else:
        print(f"deleted {handle} (was {was}{', cancelled' if cancelled else ''})")
    return 0


async def _cmd_list(client: Any, args: argparse.Namespace) -> int:
    """Prints jobs as their pages arrive, so a list of any length takes one page of memory."""
    from txd.client._format import ListTable, dumps, to_dict
    from txd.v1 import AppState

    if args.watch:
        return await _list_watch(client, args)
    apps = client.list_iter(
        args.scheduler,
        args.backend,
        limit=args.limit,
        states=[AppState.Value(name) for names in args.state for name in names],
        created_since=_when(args.since),
    )
    if args.json:  # the same text as json.dumps(list, indent=2), one element at a time
        sep = "[\n"
        async for app in apps:
            print(sep + "  " + dumps(to_dict(app)).replace("\n", "\n  "), end="")
            sep = ",\n"
        print("[]" if sep == "[\n" else "\n]")
        return 0
    table = ListTable()
    async for app in apps:
        for line in table.add(app):
            print(line)
    for line in table.end():
        print(line)
    return 0


async def _list_watch(client: Any, args: argparse.Namespace) -> int:
    """`list --watch`: a snapshot of the events stream, then its live changes, the table
    redrawn (on a terminal, in place) after each change: no polling. Runs until Ctrl-C."""
    import datetime as dt

    from txd.client._format import ListTable
    from txd.v1 import AppState
    from txd.v1.runner_pb2 import EventsResponse as Ev

    if args.json or args.backend or args.limit:
        raise CliError("--watch shows the daemon's jobs as a table: no --json, --backend, --limit")
    states = {AppState.Value(name) for names in args.state for name in names}
    since = _when(args.since)
    since_ns = int(since.timestamp() * 1e9) if isinstance(since, dt.datetime) else None
    jobs: dict[str, Any] = {}
    synced = False
    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
    async for event in client.events(snapshot=True, follow=True, scheduler=args.scheduler):
        if event.kind == Ev.SYNCED:
            synced = True
        elif event.kind == Ev.DELETED:
            jobs.pop(event.status.app_handle, None)
        elif event.kind in (Ev.SNAPSHOT, Ev.CHANGED):
            jobs[event.status.app_handle] = event.status
        if not synced or event.kind in (Ev.BOOKMARK, Ev.GAP):  # a GAP's jobs' DELETED follow
            continue
        shown = sorted(
            (
                s
                for s in jobs.values()
                if (not states or s.state in states)
                and (since_ns is None or s.created.ToNanoseconds() >= since_ns)
            ),
            key=lambda s: (s.created.ToNanoseconds(), s.app_handle),
            reverse=True,
        )
        table = ListTable()
        lines = [line for s in shown for line in table.add(s)] + table.end()
        print(clear + "\n".join(lines), flush=True)
    return 0


async def _cmd_events(client: Any, args: argparse.Namespace) -> int:
    """One line per event, flushed as it comes: a script reads the cursor of the last line it
    handled and resumes with --since CURSOR (no change missed or repeated)."""
    import json

    from txd.client._format import event_line, to_dict
    from txd.v1 import AppState

    if not (args.since or args.snapshot or args.follow):
        raise CliError("nothing to print: give --since CURSOR|TIME, --snapshot, or -f")
    if args.since and args.snapshot:
        raise CliError("--since and --snapshot: give one of them")
    since: Any = args.since if args.since and args.since.startswith("v1.") else _when(args.since)
    stream = client.events(
        since=since,
        snapshot=args.snapshot,
        follow=args.follow,
        scheduler=args.scheduler,
        states=[AppState.Value(name) for names in args.state for name in names],
        handles=args.handle,
    )
    async for event in stream:
        compact = args.json and json.dumps(to_dict(event), separators=(",", ":"))
        print(compact or event_line(event), flush=True)
    return 0


async def _cmd_dashboard(client: Any, args: argparse.Namespace) -> int:
    from txd.client.dashboard._serve import serve

    await client.probe(args.timeout)  # a daemon that does not answer fails here, not in a tab
    return await serve(client, args.port, open_browser=not args.no_open)


async def _cmd_prune(client: Any, args: argparse.Namespace) -> int:
    """Prunes a batch at a time (the daemon's limit) until none is left or one removes
    nothing (its jobs' schedulers failing); prints the removed jobs as `list` does."""
    from txd.client._format import ListTable, to_dict

    before = _when(args.older_than)
    pruned: list[Any] = []
    failed: dict[str, str] = {}
    while True:  # ends: each pass removes at least one job, or it is the last
        resp = await client.prune(before, args.scheduler, dry_run=args.dry_run)
        pruned += resp.pruned
        failed.update(resp.failed)
        if args.dry_run or not resp.more or not resp.pruned:
            break
    if args.json:
        _out(
            {"pruned": [to_dict(s) for s in pruned], "failed": failed, "dry_run": args.dry_run},
            True,
        )
    else:
        table = ListTable()
        lines = [line for status in pruned for line in table.add(status)]
        for line in lines + (table.end() if pruned else []):
            print(line)
        verb = "would prune" if args.dry_run else "pruned"
        more = " (and more: the first 1000 shown)" if args.dry_run and resp.more else ""
        print(f"txctl: {verb} {len(pruned)} finished jobs{more}", file=sys.stderr)
    for handle, why in failed.items():
        print(f"txctl: kept {handle}: {why}", file=sys.stderr)
    return exits.BACKEND if failed else 0


async def _cmd_runopts(client: Any, args: argparse.Namespace) -> int:
    from txd.client._format import runopts_text, to_dict

    if args.scheduler:
        names = [args.scheduler]
    else:
        names = [s.name for s in (await client.schedulers()).schedulers if not s.load_error]
    result = {name: await client.runopts(name) for name in names}
    if args.json:
        _out({n: [to_dict(o) for o in opts] for n, opts in result.items()}, True)
    else:
        print("\n".join(runopts_text(n, opts) for n, opts in result.items()))
    return 0


async def _cmd_configure(client: Any, args: argparse.Namespace) -> int:
    """torchx configure's file, for txd: `.txdconfig` (which txctl reads before
    `.torchxconfig`), never written over: one already there may hold the user's values."""
    from txd.client._format import config_text

    names = args.schedulers or [
        s.name for s in (await client.schedulers()).schedulers if not s.load_error
    ]
    text = config_text({name: await client.runopts(name) for name in names}, args.all)
    if args.print_only:
        print(text, end="")
        return 0
    try:
        _write_new(CONFIGURE_FILE, text)
    except FileExistsError:
        raise CliError(
            f"{os.path.abspath(CONFIGURE_FILE)} exists and is left as it is: `txctl configure "
            "--print` shows the new one, to merge or to write over it yourself"
        ) from None
    except OSError as e:
        raise CliError(f"cannot write {os.path.abspath(CONFIGURE_FILE)}: {e.strerror}") from None
    print(f"wrote {os.path.abspath(CONFIGURE_FILE)}")
    return 0


def _write_new(path: str, text: str) -> None:
    """Writes a file that must not exist yet (FileExistsError if it does)."""
    with open(path, "x", encoding="utf-8") as f:
        f.write(text)


async def _cmd_schedulers(client: Any, args: argparse.Namespace) -> int:
    from txd.client._format import schedulers_text, to_dict

    resp = await client.schedulers(check_backends=True)
    _out(
        to_dict(resp) if args.json else schedulers_text(resp.schedulers, resp.default_scheduler),
        args.json,
    )
    return 0


async def _cmd_where(client: Any, args: argparse.Namespace) -> int:
    from txd.client._format import where_dict, where_text

    resp = await client.where()
    _out(where_dict(resp) if args.json else where_text(resp), args.json)
    return 0


async def _cmd_metrics(client: Any, args: argparse.Namespace) -> int:
    resp = await client.metrics(prometheus=args.format == "prometheus")
    sys.stdout.write(resp.text)
    return 0


async def _cmd_logs(client: Any, args: argparse.Namespace) -> int:
    from txd.client._waiting import interruptible

    handle, target = split_log_target(args.handle, args.target)
    role, _, k = target.partition("/")
    ks = k.split(",")
    if k and not all(x.isdigit() for x in ks):
        raise CliError(
            f"bad replica {k!r} in {target!r}: expected ROLE/K, K a number or several (0,2)"
        )
    logs = _print_logs(
        client,
        handle,
        role,
        None if not k else int(k) if len(ks) == 1 else [int(x) for x in ks],
        follow=args.follow,
        regex=args.regex,
        since=_when(args.since),
        until=_when(args.until),
        streams=args.streams,
        tail=args.tail,
    )
    if not args.follow:
        unreadable = await logs
    else:
        async with interruptible(client, handle):
            unreadable = await logs
    return exits.INCOMPLETE if unreadable else exits.OK


def split_log_target(text: str, target: str) -> tuple[str, str]:
    """(job, ROLE[/K]) of `logs TEXT [TARGET]`, where TEXT may carry the target itself as
    `torchx log` takes it: a handle is `scheme://session/app_id` (neither holds a '/'), so what
    follows its app id is `/ROLE[/K]`; a short id has no '/', so in `ID/ROLE/K` the first '/'
    ends it."""
    scheme, sep, rest = text.partition("://")
    if sep:
        parts = rest.split("/", 2)  # session, app id, and ROLE[/K]
        job, extra = f"{scheme}://{'/'.join(parts[:2])}", "/".join(parts[2:])
    else:
        job, _, extra = text.partition("/")
    if extra and target:
        raise CliError(f"{text!r} names the role already; drop the extra {target!r}")
    return job, extra or target


async def _print_logs(
    client: Any,
    handle: str,
    role: str,
    replica: int | list[int] | None,
    *,
    follow: bool,
    out: Any = None,
    **kw: Any,
) -> int:
    """Writes log chunks to stdout as they come. One replica: its bytes unchanged. Several:
    whole lines only, each prefixed with `role/k `; a replica's unfinished line waits for its
    newline, or for the end of the stream (then it is printed with a newline added). A
    replica whose log cannot be read is named on stderr; returns how many were."""
    from txd.client._lines import ReplicaLines, long_line_note

    out = out or sys.stdout.buffer
    lines: ReplicaLines | None = None
    decided = False
    unreadable = 0

    def write(data: bytes) -> None:
        if data:
            out.write(data)
            out.flush()

    try:
        async for chunk in client.logs(handle, role, replica, follow=follow, **kw):
            if chunk.unreadable:
                unreadable += 1
                print(f"txctl: {chunk.unreadable}; the output is incomplete", file=sys.stderr)
                continue
            if chunk.HasField("long_line"):
                print(f"txctl: {long_line_note(chunk)}", file=sys.stderr, flush=True)
                continue  # carries no data
            if not decided:
                desc = await client.describe(handle)
                roles = [r for r in desc.app.roles if not role or r.name == role]
                if replica is None:
                    several = sum(r.num_replicas for r in roles) > 1
                else:
                    several = not isinstance(replica, int) and len(replica) * len(roles) > 1
                if several:
                    lines = ReplicaLines()
                decided = True
            write(
                chunk.data if lines is None else lines.feed(chunk.role, chunk.replica, chunk.data)
            )
    except BaseException:
        # Interrupted, or the stream failed: still show what arrived, but let nothing (a closed
        # stdout) hide the error that ended the stream.
        if lines is not None:
            with contextlib.suppress(OSError):
                write(lines.flush())
        raise
    if lines is not None:
        write(lines.flush())
    return unreadable


_COMMANDS = {
    "run": _cmd_run,
    "status": _cmd_status,
    "wait": _cmd_wait,
    "describe": _cmd_describe,
    "cancel": _cmd_cancel,
    "delete": _cmd_delete,
    "list": _cmd_list,
    "prune": _cmd_prune,
    "events": _cmd_events,
    "runopts": _cmd_runopts,
    "configure": _cmd_configure,
    "schedulers": _cmd_schedulers,
    "logs": _cmd_logs,
    "dashboard": _cmd_dashboard,
    "where": _cmd_where,
    "metrics": _cmd_metrics,
}

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def _when(text: str | None) -> Any:
    """--since/--until: an ISO 8601 time, seconds since the epoch, or an age like 90s/5m/2h/1d."""
    import datetime as dt

    if not text:
        return None
    if m := _RELATIVE.match(text):
        seconds = float(m[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]
        return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    try:
        return dt.datetime.fromtimestamp(float(text), dt.UTC)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"bad time {text!r}: use ISO 8601, epoch seconds, or 30s/5m/2h/1d") from None
    return when if when.tzinfo else when.astimezone()


if __name__ == "__main__":
    sys.exit(main())
