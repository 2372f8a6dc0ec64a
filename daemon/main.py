"""`txd`: the daemon's command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import sys
import warnings

from txd import defaults
from txd.daemon import config, logsetup
from txd.daemon.sdnotify import Notifier
from txd.schedulers import jobumask

log = logging.getLogger("txd.daemon.main")  # by name: this module also runs as __main__


def _use_pidfd_child_watcher() -> None:
    """Python 3.11 watches children with a thread per process; a pidfd watcher lets the event
    loop see exits directly (3.12 does this by default)."""
    if sys.version_info >= (3, 12):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with contextlib.suppress(AttributeError, OSError):
            asyncio.get_event_loop_policy().set_child_watcher(asyncio.PidfdChildWatcher())


class _ReadyPipe:
    """txctl's autostart pipe (--ready-fd) gets one line: `ready`; `busy: WHY` when another
    daemon serves, or is about to serve, this socket (the client uses that one); or
    `error: WHY`, the reason this daemon cannot start, which txctl prints as it is."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def send(self, line: str) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):  # the client gave up waiting
            os.write(self.fd, f"{line}\n".encode())
        os.close(self.fd)
        self.fd = None

    def ready(self) -> None:
        self.send("ready")


# What other hosts' txctl give ssh as its destination (the serving record): never an option.
_SSH_NAME = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?[A-Za-z0-9][A-Za-z0-9.-]*$")


def _session(text: str) -> str:
    """Handles are `scheduler://session/app_id`: a '/' in the session would make
    `handle/ROLE/K` (txctl logs) ambiguous."""
    if not text or "/" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: a session name is not empty and has no '/'")
    return text


def main(argv: list[str] | None = None) -> int:
    from txd.install import version

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["token"]:
        from txd.daemon import token_cli

        return token_cli.main(argv[1:])
    if argv[:1] == ["unit"]:
        from txd.daemon import unit_cli

        return unit_cli.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="txd",
        description="the txd job launcher daemon",
        epilog="txd token {create,revoke,list}: the tokens --listen accepts (txd token --help); "
        "txd unit {install,show,uninstall}: txd as a systemd user service (txd unit --help)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    parser.add_argument(
        "--socket",
        help=f"Unix socket to serve on (env {defaults.SOCKET_ENV}; "
        f"default {defaults.socket_path()})",
    )
    parser.add_argument(
        "--state-dir",
        help=f"job store and logs (env {defaults.STATE_DIR_ENV}; default {defaults.state_dir()})",
    )
    parser.add_argument(
        "--session",
        type=_session,
        default=defaults.SESSION,
        help="session name in app handles (default %(default)s)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=5.0,
        help="seconds given to replicas and calls at shutdown (default %(default)s)",
    )
    parser.add_argument(
        "--config",
        help=f"TOML file with a [schedulers.NAME] table of settings per scheduler (env "
        f"TXD_CONFIG; default {config.default_path()} if it exists)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SCHEDULER.KEY=VALUE",
        help="a scheduler setting, over the config file's; repeatable",
    )
    parser.add_argument(
        "--poll-interval",
        action="append",
        default=[],
        metavar="SCHEDULER=SECONDS",
        help="short for --set SCHEDULER.poll_interval=SECONDS; repeatable",
    )
    parser.add_argument(
        "--listen",
        action="append",
        default=[],
        metavar="tcp://HOST:PORT",
        help="also serve on TCP, for clients that cannot use SSH: only with --tls-cert, "
        "--tls-key and a live token (txd token create); every call needs the token; repeatable",
    )
    parser.add_argument("--tls-cert", metavar="PEM", help="--listen's certificate chain")
    parser.add_argument("--tls-key", metavar="PEM", help="--listen's private key (mode 0600)")
    parser.add_argument(
        "--client-ca",
        metavar="PEM",
        help="--listen requires client certificates signed by these CAs (besides the token)",
    )
    parser.add_argument(
        "--ssh-name",
        help="the name other hosts sharing the state dir reach this one by with ssh, written in "
        "the serving record (env TXD_SSH_NAME; default this host's name)",
    )
    parser.add_argument(
        "--heartbeat",
        type=float,
        default=None,
        help="seconds between rewrites of the serving record; another host takes the state "
        "dir over once it is 3 of them old (env TXD_HEARTBEAT; default 5)",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=logsetup.LEVELS,
        default="INFO",
        help="the level of txd's own lines; other libraries' lines pass at WARNING and above "
        "only, whatever this says (default %(default)s)",
    )
    parser.add_argument(
        "--log-format",
        choices=logsetup.FORMATS,
        default="text",
        help="stderr's format: text lines, or one JSON object per line with one access line "
        "per RPC at INFO (in text they are at DEBUG) (default %(default)s)",
    )
    parser.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)  # txctl's autostart pipe
    args = parser.parse_args(argv)
    # Everything the daemon writes (job store, job logs, the state dir's folders) is the
    # user's alone; the user's jobs get the umask it was started with (jobumask).
    jobumask.keep_private()
    pipe = _ReadyPipe(args.ready_fd)
    notifier = Notifier()  # takes NOTIFY_SOCKET out of the environment the jobs inherit
    if args.heartbeat is None:
        try:
            args.heartbeat = float(os.environ.get("TXD_HEARTBEAT") or 5.0)
        except ValueError:
            parser.error(f"TXD_HEARTBEAT={os.environ['TXD_HEARTBEAT']!r}: expected seconds")
    if not 0.05 <= args.heartbeat <= 3600:
        parser.error(f"--heartbeat {args.heartbeat}: expected seconds from 0.05 to 3600")
    ssh_name = (
        args.ssh_name if args.ssh_name is not None else os.environ.get("TXD_SSH_NAME") or None
    )
    if ssh_name is not None:
        if not _SSH_NAME.match(ssh_name):
            what = "--ssh-name" if args.ssh_name is not None else "TXD_SSH_NAME"
            parser.error(f"{what} {ssh_name!r}: expected a host name for ssh ([USER@]HOST)")
        os.environ["TXD_SSH_NAME"] = ssh_name
    sets = list(args.set)
    for item in args.poll_interval:
        name, _, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = 0.0
        if not name or not seconds > 0:
            parser.error(f"--poll-interval {item!r}: expected SCHEDULER=SECONDS, e.g. slurm=2")
        sets.append(f"{name}.poll_interval={value}")
    try:
        settings = config.load(args.config, sets)
    except config.ConfigError as e:
        pipe.send(f"error: {e}")
        parser.error(str(e))
    from txd.daemon import tcp

    listen = None
    if args.listen:
        try:
            listen = tcp.prepare(
                args.listen,
                args.tls_cert,
                args.tls_key,
                args.client_ca,
                defaults.state_dir(args.state_dir),
            )
        except tcp.ListenError as e:
            pipe.send(f"error: {e}")
            parser.error(str(e))
    elif args.tls_cert or args.tls_key or args.client_ca:
        pipe.send("error: --tls-cert, --tls-key and --client-ca are for --listen")
        parser.error("--tls-cert, --tls-key and --client-ca are for --listen")
    logsetup.configure(args.log_level, args.log_format)
    logging.getLogger("grpc._cython.cygrpc").addFilter(_client_left)
    from txd.daemon.backends import SettingsError
    from txd.daemon.jobstore import JobStoreError
    from txd.daemon.server import AlreadyRunning, SocketBlocked, SocketNotPrivate, serve

    _use_pidfd_child_watcher()
    socket_path = defaults.socket_path(args.socket)
    state_dir = defaults.state_dir(args.state_dir)

    def ready() -> None:  # the gRPC server answers on its socket: systemd and txctl's pipe
        notifier.ready(f"serving on {socket_path} (state in {state_dir})")
        pipe.ready()

    try:
        asyncio.run(
            serve(
                socket_path,
                state_dir,
                args.session,
                args.grace,
                ready,
                settings,
                listen,
                args.heartbeat,
                on_stopping=notifier.stopping,
            )
        )
    except AlreadyRunning as e:
        return _fatal(pipe, notifier, "busy" if e.serving_here else "error", e, 1)
    except JobStoreError as e:
        return _fatal(pipe, notifier, "error", e, 1)
    except (
        SettingsError,
        SocketNotPrivate,
        SocketBlocked,
        defaults.StateDirError,
        tcp.ListenError,
    ) as e:
        return _fatal(pipe, notifier, "error", e, 2)
    return 0


def _fatal(pipe: _ReadyPipe, notifier: Notifier, kind: str, e: Exception, code: int) -> int:
    print(f"txd: {e}", file=sys.stderr)
    pipe.send(f"{kind}: {e}")
    notifier.send(STATUS=f"cannot start: {e}")  # `systemctl --user status txd` shows why
    return code


if __name__ == "__main__":
    sys.exit(main())


def _client_left(record: logging.LogRecord) -> bool:
    """grpcio logs a server stream's write to a client that has just gone (cancelled, or past
    its deadline) as an ERROR with a traceback: ExecuteBatchError. Nothing failed on our side;
    one INFO line of txd's says so instead (grpcio's own INFO would not pass logsetup.passes)."""
    exc = record.exc_info[1] if record.exc_info else None
    if type(exc).__name__ != "ExecuteBatchError":
        return True
    method = record.getMessage().split(" by servicer method ")[-1]
    log.info("a client left a stream while it was written to (%s)", method)
    return False
